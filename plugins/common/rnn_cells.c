/*
 * rnn_cells.c -- one batch row of the fused LSTM/GRU cells (rnn_cells.h), float32, with
 * ral_fastmath.h's sigmoid and tanh (the host plugin's element-wise ops use the same).
 */
#include "rnn_cells.h"

#include "ral_fastmath.h"

static float at(const float* p, int64_t k) { return p ? p[k] : 0.0f; }

void ral_lstm_cell_row(int64_t H, const float* ig, const float* hg, const float* bi, const float* bh, const float* cx,
                       float* hy, float* cy, float* ws) {
  for (int64_t k = 0; k < H; k++) {
    float v[4];
    for (int q = 0; q < 4; q++) {
      int64_t j = q * H + k;
      v[q] = ig[j] + hg[j] + at(bi, j) + at(bh, j); /* CUDA's order of the sum */
    }
    float i = ral_sigmoidf(v[0]), f = ral_sigmoidf(v[1]), g = ral_tanhf(v[2]), o = ral_sigmoidf(v[3]);
    float c = f * cx[k] + i * g;
    ws[k] = i, ws[H + k] = f, ws[2 * H + k] = g, ws[3 * H + k] = o;
    cy[k] = c;
    hy[k] = o * ral_tanhf(c);
  }
}

void ral_lstm_cell_backward_row(int64_t H, const float* ghy, const float* gcy, const float* cx, const float* cy,
                                const float* ws, float* gg, float* gcx) {
  for (int64_t k = 0; k < H; k++) {
    float i = ws[k], f = ws[H + k], g = ws[2 * H + k], o = ws[3 * H + k], t = ral_tanhf(cy[k]);
    float gh = at(ghy, k), gc = gh * o * (1.0f - t * t) + at(gcy, k);
    gg[k] = gc * g * i * (1.0f - i);
    gg[H + k] = gc * cx[k] * f * (1.0f - f);
    gg[2 * H + k] = gc * i * (1.0f - g * g);
    gg[3 * H + k] = gh * t * o * (1.0f - o);
    gcx[k] = gc * f;
  }
}

void ral_gru_cell_row(int64_t H, const float* ig, const float* hg, const float* bi, const float* bh, const float* hx,
                      float* hy, float* ws) {
  for (int64_t k = 0; k < H; k++) {
    float r = ral_sigmoidf(ig[k] + hg[k] + at(bi, k) + at(bh, k));
    float z = ral_sigmoidf(ig[H + k] + hg[H + k] + at(bi, H + k) + at(bh, H + k));
    float hn = hg[2 * H + k] + at(bh, 2 * H + k);
    float n = ral_tanhf(ig[2 * H + k] + at(bi, 2 * H + k) + r * hn);
    float h = hx[k];
    hy[k] = n + z * (h - n);
    ws[k] = r, ws[H + k] = z, ws[2 * H + k] = n, ws[3 * H + k] = hn, ws[4 * H + k] = h;
  }
}

void ral_gru_cell_backward_row(int64_t H, const float* ghy, const float* ws, float* gig, float* ghg, float* ghx) {
  for (int64_t k = 0; k < H; k++) {
    float r = ws[k], z = ws[H + k], n = ws[2 * H + k], hn = ws[3 * H + k], h = ws[4 * H + k], go = ghy[k];
    float gz = go * (h - n) * (1.0f - z) * z;
    float gn = go * (1.0f - z) * (1.0f - n * n);
    float gr = gn * hn * (1.0f - r) * r;
    gig[k] = ghg[k] = gr;
    gig[H + k] = ghg[H + k] = gz;
    gig[2 * H + k] = gn;
    ghg[2 * H + k] = gn * r;
    ghx[k] = go * z;
  }
}
