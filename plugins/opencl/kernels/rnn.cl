/* rnn.cl -- the fused LSTM/GRU cells (rnn.c), the math of plugins/common/rnn_cells.c:
 * gates [i, f, g, o] / [r, z, n], CUDA's workspaces. Each kernel's buffers are the call's
 * tensors in call order (outputs first), addressed through g.off / g.dt; an absent one
 * (bit clear in g.has) reads as zeros. Work-items take `chunk` consecutive (row, unit)
 * elements of the B x H grid. */
#define RNN_LD(p, i, e) ld_f(p, g.off[i] + (e), g.dt[i])
#define RNN_OPT(p, i, e) (((g.has >> (i)) & 1) ? RNN_LD(p, i, e) : 0.0f)
#define RNN_ST(p, i, e, v) st_f(p, g.off[i] + (e), g.dt[i], v)
#define RNN_LOOP                                                                  \
  long n = g.B * g.H, e0 = get_global_id(0) * chunk, e1 = min(e0 + chunk, n); \
  for (long e = e0; e < e1; e++)

inline float rnn_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

/* (hy, cy, ws | ig, hg, cx, bi?, bh?) */
__kernel void lstm_cell_fwd(gbuf hy, gbuf cy, gbuf ws, gcbuf ig, gcbuf hg, gcbuf cx, gcbuf bi, gcbuf bh, ocl_rnn g,
                            long chunk) {
  RNN_LOOP {
    long H = g.H, k = e % H, row = (e / H) * 4 * H;
    float v[4];
    for (int q = 0; q < 4; q++) {
      long j = q * H + k;
      v[q] = RNN_LD(ig, 3, row + j) + RNN_LD(hg, 4, row + j) + RNN_OPT(bi, 6, j) + RNN_OPT(bh, 7, j);
    }
    float i = rnn_sigmoid(v[0]), f = rnn_sigmoid(v[1]), c = tanh(v[2]), o = rnn_sigmoid(v[3]);
    float cv = f * RNN_LD(cx, 5, e) + i * c;
    RNN_ST(ws, 2, row + k, i);
    RNN_ST(ws, 2, row + H + k, f);
    RNN_ST(ws, 2, row + 2 * H + k, c);
    RNN_ST(ws, 2, row + 3 * H + k, o);
    RNN_ST(cy, 1, e, cv);
    RNN_ST(hy, 0, e, o * tanh(cv));
  }
}

/* (grad_gates, grad_cx, grad_bias? | grad_hy?, grad_cy?, cx, cy, ws); grad_bias: rnn_bias_grad */
__kernel void lstm_cell_bwd(gbuf gg, gbuf gcx, gbuf gb, gcbuf ghy, gcbuf gcy, gcbuf cx, gcbuf cy, gcbuf ws, ocl_rnn g,
                            long chunk) {
  RNN_LOOP {
    long H = g.H, k = e % H, row = (e / H) * 4 * H;
    float i = RNN_LD(ws, 7, row + k), f = RNN_LD(ws, 7, row + H + k), c = RNN_LD(ws, 7, row + 2 * H + k),
          o = RNN_LD(ws, 7, row + 3 * H + k), t = tanh(RNN_LD(cy, 6, e));
    float gh = RNN_OPT(ghy, 3, e), gc = gh * o * (1.0f - t * t) + RNN_OPT(gcy, 4, e);
    RNN_ST(gg, 0, row + k, gc * c * i * (1.0f - i));
    RNN_ST(gg, 0, row + H + k, gc * RNN_LD(cx, 5, e) * f * (1.0f - f));
    RNN_ST(gg, 0, row + 2 * H + k, gc * i * (1.0f - c * c));
    RNN_ST(gg, 0, row + 3 * H + k, gh * t * o * (1.0f - o));
    RNN_ST(gcx, 1, e, gc * f);
  }
}

/* (hy, ws | ig, hg, hx, bi?, bh?) */
__kernel void gru_cell_fwd(gbuf hy, gbuf ws, gcbuf ig, gcbuf hg, gcbuf hx, gcbuf bi, gcbuf bh, ocl_rnn g, long chunk) {
  RNN_LOOP {
    long H = g.H, k = e % H, row = (e / H) * 3 * H, wrow = (e / H) * 5 * H;
    float r = rnn_sigmoid(RNN_LD(ig, 2, row + k) + RNN_LD(hg, 3, row + k) + RNN_OPT(bi, 5, k) + RNN_OPT(bh, 6, k));
    float z = rnn_sigmoid(RNN_LD(ig, 2, row + H + k) + RNN_LD(hg, 3, row + H + k) + RNN_OPT(bi, 5, H + k) +
                          RNN_OPT(bh, 6, H + k));
    float hn = RNN_LD(hg, 3, row + 2 * H + k) + RNN_OPT(bh, 6, 2 * H + k);
    float nv = tanh(RNN_LD(ig, 2, row + 2 * H + k) + RNN_OPT(bi, 5, 2 * H + k) + r * hn);
    float h = RNN_LD(hx, 4, e);
    RNN_ST(hy, 0, e, nv + z * (h - nv));
    RNN_ST(ws, 1, wrow + k, r);
    RNN_ST(ws, 1, wrow + H + k, z);
    RNN_ST(ws, 1, wrow + 2 * H + k, nv);
    RNN_ST(ws, 1, wrow + 3 * H + k, hn);
    RNN_ST(ws, 1, wrow + 4 * H + k, h);
  }
}

/* (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias? | grad_hy,
 * ws); the bias gradients: rnn_bias_grad */
__kernel void gru_cell_bwd(gbuf gig, gbuf ghg, gbuf ghx, gbuf gib, gbuf ghb, gcbuf ghy, gcbuf ws, ocl_rnn g,
                           long chunk) {
  RNN_LOOP {
    long H = g.H, k = e % H, row = (e / H) * 3 * H, wrow = (e / H) * 5 * H;
    float r = RNN_LD(ws, 6, wrow + k), z = RNN_LD(ws, 6, wrow + H + k), nv = RNN_LD(ws, 6, wrow + 2 * H + k),
          hn = RNN_LD(ws, 6, wrow + 3 * H + k), h = RNN_LD(ws, 6, wrow + 4 * H + k), go = RNN_LD(ghy, 5, e);
    float gz = go * (h - nv) * (1.0f - z) * z, gn = go * (1.0f - z) * (1.0f - nv * nv), gr = gn * hn * (1.0f - r) * r;
    RNN_ST(gig, 0, row + k, gr);
    RNN_ST(ghg, 1, row + k, gr);
    RNN_ST(gig, 0, row + H + k, gz);
    RNN_ST(ghg, 1, row + H + k, gz);
    RNN_ST(gig, 0, row + 2 * H + k, gn);
    RNN_ST(ghg, 1, row + 2 * H + k, gn * r);
    RNN_ST(ghx, 2, e, go * z);
  }
}

/* gb[k] = sum over the g.B rows of gg[row, k] in row order, k < g.H columns (0: gb, 1: gg). */
__kernel void rnn_bias_grad(gbuf gb, gcbuf gg, ocl_rnn g, long chunk) {
  long k0 = get_global_id(0) * chunk, k1 = min(k0 + chunk, g.H);
  for (long k = k0; k < k1; k++) {
    float acc = 0.0f;
    for (long b = 0; b < g.B; b++) acc += RNN_LD(gg, 1, b * g.H + k);
    RNN_ST(gb, 0, k, acc);
  }
}
