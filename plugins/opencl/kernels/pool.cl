/* pool.cl -- 2-d max pooling over contiguous [B, H, W] planes (pool.c), `chunk` rows per
 * work-item. The forward follows CPU's kernel exactly: the window's first in-bounds element
 * is the index when nothing beats -inf, and NaN wins (val > max || isnan(val)). The
 * backward is a gather: every input element sums, in output order, the gradients of the
 * outputs whose index names it, so no atomics and CPU's summation order. */

/* Output rows r = b * OH + oh. */
__kernel void maxpool2d_fwd(gbuf y, __global long* idx, gcbuf x, ocl_pool g, long chunk) {
  long rows = g.B * g.OH, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.OH, oh = r % g.OH;
    long h0 = oh * g.sh - g.ph, h1 = min(h0 + (g.kh - 1) * g.dh + 1, g.H);
    while (h0 < 0) h0 += g.dh;
    gcbuf plane = x;
    long pb = g.off_x + b * g.H * g.W;
    for (long ow = 0; ow < g.OW; ow++) {
      long w0 = ow * g.sw - g.pw, w1 = min(w0 + (g.kw - 1) * g.dw + 1, g.W);
      while (w0 < 0) w0 += g.dw;
      long best = h0 * g.W + w0;
      float m = -INFINITY;
      for (long ih = h0; ih < h1; ih += g.dh)
        for (long iw = w0; iw < w1; iw += g.dw) {
          float v = ld_f(plane, pb + ih * g.W + iw, g.dt);
          if (v > m || isnan(v)) {
            m = v;
            best = ih * g.W + iw;
          }
        }
      long o = r * g.OW + ow;
      st_f(y, g.off_y + o, g.dt, m);
      idx[g.off_i + o] = best;
    }
  }
}

/* Input rows r = b * H + ih: grad_input = sum of grad_output over the outputs that chose it. */
__kernel void maxpool2d_bwd(gbuf gi, gcbuf go, __global const long* idx, ocl_pool g, long chunk) {
  long rows = g.B * g.H, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.H, ih = r % g.H;
    long t = ih + g.ph - (g.kh - 1) * g.dh;
    long oh0 = t <= 0 ? 0 : (t + g.sh - 1) / g.sh, oh1 = min((ih + g.ph) / g.sh, g.OH - 1);
    for (long iw = 0; iw < g.W; iw++) {
      long u = iw + g.pw - (g.kw - 1) * g.dw;
      long ow0 = u <= 0 ? 0 : (u + g.sw - 1) / g.sw, ow1 = min((iw + g.pw) / g.sw, g.OW - 1);
      long me = ih * g.W + iw;
      float acc = 0.0f;
      for (long oh = oh0; oh <= oh1; oh++)
        for (long ow = ow0; ow <= ow1; ow++) {
          long o = (b * g.OH + oh) * g.OW + ow;
          if (idx[g.off_i + o] == me) acc += ld_f(go, g.off_y + o, g.dt);
        }
      st_f(gi, g.off_x + r * g.W + iw, g.dt, acc);
    }
  }
}
