/*
 * rnn_cells.c -- one batch row of the fused LSTM/GRU cells (rnn_cells.h), float32, with
 * ral_fastmath.h's sigmoid and tanh (the host plugin's element-wise ops use the same).
 */
#include "rnn_cells.h"

#include <stdio.h>

#include "ral_fastmath.h"

/* Call order, outputs first (the ATen schemas' order). */
const ral_rnn_layout ral_rnn_layouts[RAL_RNN_KINDS] = {
    /* hy cy ws | input_gates hidden_gates cx input_bias? hidden_bias? */
    [RAL_RNN_LSTM] = {{"hy", "cy", "workspace", "input_gates", "hidden_gates", "cx", "input_bias", "hidden_bias"},
                      3,
                      5, {1, 1, 4, 4, 4, 1, 4, 4}, {0, 0, 0, 0, 0, 0, 1, 1}, {0, 0, 0, 0, 0, 0, 1, 1},
                      {-1, -1, -1, -1, -1, -1, -1, -1}, 3, 5},
    /* grad_gates grad_cx grad_bias? | grad_hy? grad_cy? cx cy workspace */
    [RAL_RNN_LSTM_BWD] = {{"grad_gates", "grad_cx", "grad_bias", "grad_hy", "grad_cy", "cx", "cy", "workspace"},
                          3,
                          5, {4, 1, 4, 1, 1, 1, 1, 4}, {0, 0, 1, 0, 0, 0, 0, 0},
                          {0, 0, 1, 1, 1, 0, 0, 0}, {-1, -1, 0, -1, -1, -1, -1, -1}, 7, 5},
    /* hy workspace | input_gates hidden_gates hx input_bias? hidden_bias? */
    [RAL_RNN_GRU] = {{"hy", "workspace", "input_gates", "hidden_gates", "hx", "input_bias", "hidden_bias"},
                     2,
                     5, {1, 5, 3, 3, 1, 3, 3}, {0, 0, 0, 0, 0, 1, 1}, {0, 0, 0, 0, 0, 1, 1},
                     {-1, -1, -1, -1, -1, -1, -1}, 2, 4},
    /* grad_input_gates grad_hidden_gates grad_hx grad_input_bias? grad_hidden_bias? | grad_hy workspace */
    [RAL_RNN_GRU_BWD] = {{"grad_input_gates", "grad_hidden_gates", "grad_hx", "grad_input_bias", "grad_hidden_bias",
                          "grad_hy", "workspace"},
                         5,
                         2, {3, 3, 1, 3, 3, 1, 5}, {0, 0, 0, 1, 1, 0, 0}, {0, 0, 0, 1, 1, 0, 0},
                         {-1, -1, -1, 0, 1, -1, -1}, 6, 5},
};

static int is_contiguous(const ral_tensor* t) {
  int64_t want = 1;
  for (int d = t->ndim - 1; d >= 0; d--) {
    if (t->sizes[d] != 1 && t->strides[d] != want) return 0;
    want *= t->sizes[d];
  }
  return 1;
}

static int64_t numel(const ral_tensor* t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
  return n;
}

int ral_rnn_check(ral_rnn_kind kind, const ral_tensor* const* ts, int64_t* B, int64_t* H, char* why, size_t n) {
  const ral_rnn_layout* L = &ral_rnn_layouts[kind];
  const ral_tensor *g = ts[L->gates], *s = ts[L->state];
  for (int i = 0; i < L->n_out + L->n_in; i++) {
    const ral_tensor* t = ts[i];
    if (!t && !L->optional[i]) return snprintf(why, n, "%s is required", L->names[i]), 0;
    if (t && t->dtype != RAL_DTYPE_FLOAT32 && t->dtype != RAL_DTYPE_FLOAT16 && t->dtype != RAL_DTYPE_BFLOAT16)
      return snprintf(why, n, "%s: only float32, float16 and bfloat16", L->names[i]), 0;
    if (t && !is_contiguous(t)) return snprintf(why, n, "%s must be contiguous", L->names[i]), 0;
  }
  int w = L->width[L->gates];
  if (g->ndim != 2 || s->ndim != 2 || g->sizes[0] != s->sizes[0] || g->sizes[1] != w * s->sizes[1])
    return snprintf(why, n, "expected %s [B, %dH] and %s [B, H], got [%lld, %lld] (%dd) and %dd", L->names[L->gates], w,
                    L->names[L->state], (long long)(g->ndim > 0 ? g->sizes[0] : 1),
                    (long long)(g->ndim > 1 ? g->sizes[1] : 1), (int)g->ndim, (int)s->ndim),
           0;
  *B = s->sizes[0];
  *H = s->sizes[1];
  for (int i = 0; i < L->n_out + L->n_in; i++) {
    int64_t want = L->width[i] * *H * (L->bias[i] ? 1 : *B);
    if (ts[i] && numel(ts[i]) != want)
      return snprintf(why, n, "%s has %lld elements, expected %lld", L->names[i], (long long)numel(ts[i]),
                      (long long)want),
             0;
  }
  return 1;
}

void ral_rnn_row(ral_rnn_kind kind, int64_t H, float* const* r) {
  switch (kind) {
    case RAL_RNN_LSTM:
      ral_lstm_cell_row(H, r[3], r[4], r[6], r[7], r[5], r[0], r[1], r[2]);
      break;
    case RAL_RNN_LSTM_BWD:
      ral_lstm_cell_backward_row(H, r[3], r[4], r[5], r[6], r[7], r[0], r[1]);
      break;
    case RAL_RNN_GRU:
      ral_gru_cell_row(H, r[2], r[3], r[5], r[6], r[4], r[0], r[1]);
      break;
    default:
      ral_gru_cell_backward_row(H, r[5], r[6], r[0], r[1], r[2]);
      break;
  }
}

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
