/* conv.cl -- the data movement of a convolution around the plugin's GEMM (conv.c): im2col,
 * col2im (a gather: every X element sums its own patches, so no atomics), the transposed
 * layout T [Cy, nb * osp] of a Y operand and back, and the bias gradient. Operands are read
 * and written through their strides and dtype (float32, float16, bfloat16); the buffers the
 * GEMM sees are float32. Every kernel walks `chunk` rows per work-item (one on a GPU). */

/* The outputs o in [*lo, *hi) of a run of n, the tap of output o at input i0 + o * s, that
 * read inside [0, I); the rest read padding. */
inline void conv_in_bounds(long i0, long s, long I, long n, long* lo, long* hi) {
  long l = i0 >= 0 ? 0 : (-i0 + s - 1) / s, h = I > i0 ? (I - i0 + s - 1) / s : 0;
  *hi = clamp(h, (long)0, n);
  *lo = min(l, *hi);
}

/* im2col over rows r = (grp * K + kk) * nb + nl: col row (grp, kk), columns of sample nl. */
__kernel void conv_im2col(__global float* col, gcbuf X, ocl_conv g, long chunk) {
  long rows = g.G * g.K * g.nb, J = g.nb * g.osp;
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long nl = r % g.nb, gk = r / g.nb, kk = gk % g.K, grp = gk / g.K;
    long ci = kk / g.ksp, kp = kk % g.ksp;
    long k2 = kp % g.k[2], k1 = (kp / g.k[2]) % g.k[1], k0 = kp / (g.k[2] * g.k[1]);
    long xb = g.off_x + (g.n0 + nl) * g.xn + (grp * g.cxg + ci) * g.xc;
    __global float* dst = col + gk * J + nl * g.osp;
    for (long o0 = 0; o0 < g.O[0]; o0++) {
      long i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
      for (long o1 = 0; o1 < g.O[1]; o1++) {
        long i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
        __global float* dr = dst + (o0 * g.O[1] + o1) * g.O[2];
        if (i0 < 0 || i0 >= g.I[0] || i1 < 0 || i1 >= g.I[1]) {
          for (long o2 = 0; o2 < g.O[2]; o2++) dr[o2] = 0.0f;
          continue;
        }
        long rb = xb + i0 * g.xs[0] + i1 * g.xs[1];
        long i2 = k2 * g.d[2] - g.p[2];
        /* o2 in [lo, hi) reads inside the row; the padding around it is zeros */
        long lo, hi;
        conv_in_bounds(i2, g.s[2], g.I[2], g.O[2], &lo, &hi);
        for (long o2 = 0; o2 < lo; o2++) dr[o2] = 0.0f;
        for (long o2 = hi; o2 < g.O[2]; o2++) dr[o2] = 0.0f;
        long st = g.s[2] * g.xs[2];
        if (g.dt_x == DT_F32) {
          __global const float* xr = (__global const float*)X + rb + i2 * g.xs[2];
          if (st == 1)
            for (long o2 = lo; o2 < hi; o2++) dr[o2] = xr[o2];
          else
            for (long o2 = lo; o2 < hi; o2++) dr[o2] = xr[o2 * st];
        } else {
          for (long o2 = lo; o2 < hi; o2++) dr[o2] = ld_f(X, rb + (i2 + o2 * g.s[2]) * g.xs[2], g.dt_x);
        }
      }
    }
  }
}

/* im2col straight into the GEMM's B panels (gemm_pack's layout for B = col[grp] [K, J]):
 * P[((grp * NP + p) * K + kk) * vn + jj] = col[grp, kk, p * vn + jj], zero past J; one panel
 * (grp, p) per unit, written in order, so the GEMM needs no packing pass of its own. */
__kernel void conv_im2col_p(__global float* P, gcbuf X, ocl_conv g, long chunk) {
  long J = g.nb * g.osp, NP = (J + g.vn - 1) / g.vn, units = g.G * NP;
  long u0 = get_global_id(0) * chunk, u1 = min(u0 + chunk, units);
  __global const float* xf = (__global const float*)X;
  int f32 = g.dt_x == DT_F32;
  for (long u = u0; u < u1; u++) {
    long grp = u / NP, p = u % NP;
    __global float* dst = P + u * g.K * g.vn;
    long j0 = p * g.vn, oa = j0 % g.osp;
    if (oa % g.O[2] + g.vn <= g.O[2]) {
      /* the panel's columns are vn consecutive o2 of one output row: per kernel tap, one
       * run of x (stride s2) with zeros where it reaches into the padding */
      long nl = j0 / g.osp, o2a = oa % g.O[2], o1 = (oa / g.O[2]) % g.O[1], o0 = oa / (g.O[2] * g.O[1]);
      long xb = g.off_x + (g.n0 + nl) * g.xn + grp * g.cxg * g.xc;
      for (long ci = 0; ci < g.cxg; ci++)
        for (long k0 = 0; k0 < g.k[0]; k0++) {
          long i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
          for (long k1 = 0; k1 < g.k[1]; k1++) {
            long i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
            int in01 = i0 >= 0 && i0 < g.I[0] && i1 >= 0 && i1 < g.I[1];
            long rb = xb + ci * g.xc + i0 * g.xs[0] + i1 * g.xs[1];
            for (long k2 = 0; k2 < g.k[2]; k2++, dst += g.vn) {
              long i2 = o2a * g.s[2] - g.p[2] + k2 * g.d[2];
              long lo, hi;
              conv_in_bounds(i2, g.s[2], g.I[2], in01 ? g.vn : 0, &lo, &hi);
              for (long jj = 0; jj < lo; jj++) dst[jj] = 0.0f;
              for (long jj = hi; jj < g.vn; jj++) dst[jj] = 0.0f;
              long st = g.s[2] * g.xs[2], e = rb + i2 * g.xs[2];
              if (f32 && st == 1)
                for (long jj = lo; jj < hi; jj++) dst[jj] = xf[e + jj];
              else
                for (long jj = lo; jj < hi; jj++) dst[jj] = ld_f(X, e + jj * st, g.dt_x);
            }
          }
        }
      continue;
    }
    long base[16], q0[16], q1[16], q2[16];
    for (int jj = 0; jj < g.vn; jj++) {
      long j = p * g.vn + jj;
      if (j >= J) {
        base[jj] = -1;
        continue;
      }
      long nl = j / g.osp, o = j % g.osp;
      q2[jj] = (o % g.O[2]) * g.s[2] - g.p[2];
      q1[jj] = ((o / g.O[2]) % g.O[1]) * g.s[1] - g.p[1];
      q0[jj] = (o / (g.O[2] * g.O[1])) * g.s[0] - g.p[0];
      base[jj] = g.off_x + (g.n0 + nl) * g.xn + grp * g.cxg * g.xc;
    }
    for (long ci = 0; ci < g.cxg; ci++)
      for (long k0 = 0; k0 < g.k[0]; k0++)
        for (long k1 = 0; k1 < g.k[1]; k1++)
          for (long k2 = 0; k2 < g.k[2]; k2++, dst += g.vn)
            for (int jj = 0; jj < g.vn; jj++) {
              long i0 = q0[jj] + k0 * g.d[0], i1 = q1[jj] + k1 * g.d[1], i2 = q2[jj] + k2 * g.d[2];
              float v = 0.0f;
              if (base[jj] >= 0 && i0 >= 0 && i0 < g.I[0] && i1 >= 0 && i1 < g.I[1] && i2 >= 0 && i2 < g.I[2]) {
                long e = base[jj] + ci * g.xc + i0 * g.xs[0] + i1 * g.xs[1] + i2 * g.xs[2];
                v = f32 ? xf[e] : ld_f(X, e, g.dt_x);
              }
              dst[jj] = v;
            }
  }
}

/* im2col for the weight gradient, column-major: colT[(grp * J + nl * osp + o) * K + kk] over
 * rows r = ((grp * nb + nl) * O0 + o0) * O1 + o1, so the GEMM packs colT's rows as vectors. */
__kernel void conv_im2col_t(__global float* colT, gcbuf X, ocl_conv g, long chunk) {
  long rows = g.G * g.nb * g.O[0] * g.O[1], J = g.nb * g.osp;
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  __global const float* xf = (__global const float*)X;
  int f32 = g.dt_x == DT_F32;
  for (long r = r0; r < r1; r++) {
    long o1 = r % g.O[1], t = r / g.O[1], o0 = t % g.O[0];
    t /= g.O[0];
    long nl = t % g.nb, grp = t / g.nb;
    long xb = g.off_x + (g.n0 + nl) * g.xn + grp * g.cxg * g.xc;
    __global float* dst = colT + (grp * J + nl * g.osp + (o0 * g.O[1] + o1) * g.O[2]) * g.K;
    /* tap by tap: the row's outputs read one run of x (stride s2), written K apart */
    long kk = 0;
    for (long ci = 0; ci < g.cxg; ci++)
      for (long k0 = 0; k0 < g.k[0]; k0++) {
        long i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
        for (long k1 = 0; k1 < g.k[1]; k1++) {
          long i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
          int in01 = i0 >= 0 && i0 < g.I[0] && i1 >= 0 && i1 < g.I[1];
          long rb = xb + ci * g.xc + i0 * g.xs[0] + i1 * g.xs[1];
          for (long k2 = 0; k2 < g.k[2]; k2++, kk++) {
            long i2 = k2 * g.d[2] - g.p[2], lo, hi;
            conv_in_bounds(i2, g.s[2], g.I[2], in01 ? g.O[2] : 0, &lo, &hi);
            __global float* d = dst + kk;
            for (long o2 = 0; o2 < lo; o2++) d[o2 * g.K] = 0.0f;
            for (long o2 = hi; o2 < g.O[2]; o2++) d[o2 * g.K] = 0.0f;
            long st = g.s[2] * g.xs[2], e = rb + i2 * g.xs[2];
            if (f32)
              for (long o2 = lo; o2 < hi; o2++) d[o2 * g.K] = xf[e + o2 * st];
            else
              for (long o2 = lo; o2 < hi; o2++) d[o2 * g.K] = ld_f(X, e + o2 * st, g.dt_x);
          }
        }
      }
  }
}

/* The output position whose window puts kernel tap at input offset t (= i + p - k * d), or
 * -1 when none does; stride 1 (the common case) needs no division. */
inline long conv_out_of(long t, long s, long O) {
  if (s == 1) return t >= 0 && t < O ? t : -1;
  if (t < 0 || t % s) return -1;
  return t / s < O ? t / s : -1;
}

/* col2im over rows r = ((nl * Cx + c) * I0 + i0) * I1 + i1 of X: each element of the row
 * sums the col entries of every (kernel position, output position) that reads it, plus
 * bias[c] when given (a transposed convolution's forward). */
__kernel void conv_col2im(gbuf X, __global const float* col, gcbuf bias, ocl_conv g, long chunk) {
  long Cx = g.G * g.cxg, J = g.nb * g.osp;
  long rows = g.nb * Cx * g.I[0] * g.I[1];
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long i1 = r % g.I[1], t = r / g.I[1], i0 = t % g.I[0];
    t /= g.I[0];
    long c = t % Cx, nl = t / Cx, grp = c / g.cxg, ci = c % g.cxg;
    __global const float* cb = col + (grp * g.K + ci * g.ksp) * J + nl * g.osp;
    long xb = g.off_x + (g.n0 + nl) * g.xn + c * g.xc + i0 * g.xs[0] + i1 * g.xs[1];
    float bv = g.has_bias ? ld_f(bias, g.off_b + c * g.sb, g.dt_b) : 0.0f;
    for (long i2 = 0; i2 < g.I[2]; i2++) {
      float acc = bv;
      for (long k0 = 0; k0 < g.k[0]; k0++) {
        long o0 = conv_out_of(i0 + g.p[0] - k0 * g.d[0], g.s[0], g.O[0]);
        if (o0 < 0) continue;
        for (long k1 = 0; k1 < g.k[1]; k1++) {
          long o1 = conv_out_of(i1 + g.p[1] - k1 * g.d[1], g.s[1], g.O[1]);
          if (o1 < 0) continue;
          for (long k2 = 0; k2 < g.k[2]; k2++) {
            long o2 = conv_out_of(i2 + g.p[2] - k2 * g.d[2], g.s[2], g.O[2]);
            if (o2 < 0) continue;
            long kp = (k0 * g.k[1] + k1) * g.k[2] + k2;
            acc += cb[kp * J + (o0 * g.O[1] + o1) * g.O[2] + o2];
          }
        }
      }
      st_f(X, xb + i2 * g.xs[2], g.dt_x, acc);
    }
  }
}

/* Row r = ((c * nb + nl) * O0 + o0) * O1 + o1 of T: Y's offset of its first element, and c. */
inline long conv_t_row(const ocl_conv* g, long r, long* c) {
  long o1 = r % g->O[1], t = r / g->O[1], o0 = t % g->O[0];
  t /= g->O[0];
  long nl = t % g->nb;
  *c = t / g->nb;
  return g->off_y + (g->n0 + nl) * g->yn + *c * g->yc + o0 * g->ys[0] + o1 * g->ys[1];
}

/* T[c, nl * osp + o] = Y[n0 + nl, c, o] over rows r = ((c * nb + nl) * O0 + o0) * O1 + o1. */
__kernel void conv_to_t(__global float* T, gcbuf Y, ocl_conv g, long chunk) {
  long Cy = g.G * g.cyg, rows = Cy * g.nb * g.O[0] * g.O[1];
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long c, yb = conv_t_row(&g, r, &c);
    __global float* d = T + r * g.O[2];
    if (g.dt_y == DT_F32 && g.ys[2] == 1) {
      __global const float* y = (__global const float*)Y + yb;
      for (long o2 = 0; o2 < g.O[2]; o2++) d[o2] = y[o2];
    } else {
      for (long o2 = 0; o2 < g.O[2]; o2++) d[o2] = ld_f(Y, yb + o2 * g.ys[2], g.dt_y);
    }
  }
}

/* Y[n0 + nl, c, o] = T[c, nl * osp + o] (+ bias[c]), rows as conv_to_t. */
__kernel void conv_from_t(gbuf Y, __global const float* T, gcbuf bias, ocl_conv g, long chunk) {
  long Cy = g.G * g.cyg, rows = Cy * g.nb * g.O[0] * g.O[1];
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long c, yb = conv_t_row(&g, r, &c);
    __global const float* s = T + r * g.O[2];
    float bv = g.has_bias ? ld_f(bias, g.off_b + c * g.sb, g.dt_b) : 0.0f;
    if (g.dt_y == DT_F32 && g.ys[2] == 1) {
      __global float* y = (__global float*)Y + yb;
      for (long o2 = 0; o2 < g.O[2]; o2++) y[o2] = s[o2] + bv;
    } else {
      for (long o2 = 0; o2 < g.O[2]; o2++) st_f(Y, yb + o2 * g.ys[2], g.dt_y, s[o2] + bv);
    }
  }
}

/* bias gradient: gb[c] = sum of Y[n, c, o] over every n and o, compensated; one work-item
 * per channel (Y is the gradient of the convolution's output). */
__kernel void conv_bias_grad(gbuf gb, gcbuf Y, ocl_conv g) {
  long c = get_global_id(0);
  if (c >= g.G * g.cyg) return;
  float2 acc = (float2)(0.0f, 0.0f);
  for (long n = 0; n < g.N; n++)
    for (long o0 = 0; o0 < g.O[0]; o0++)
      for (long o1 = 0; o1 < g.O[1]; o1++) {
        long yb = g.off_y + n * g.yn + c * g.yc + o0 * g.ys[0] + o1 * g.ys[1];
        for (long o2 = 0; o2 < g.O[2]; o2++) acc = cs_add(acc, ld_f(Y, yb + o2 * g.ys[2], g.dt_y));
      }
  st_f(gb, g.off_b + c * g.sb, g.dt_b, cs_val(acc));
}
