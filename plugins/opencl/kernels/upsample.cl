/* upsample.cl -- 2-d nearest, bilinear and bicubic upsampling of [B, H, W] planes into [B, OH, OW],
 * and 3-d nearest and trilinear upsampling of [B, D, H, W] volumes (upsample.c), both of any
 * strides (OCL_PLANE_AT; depth strides xsd, ysd), `chunk` rows per work-item. Source indices and weights are those
 * of plugins/common/resample.c (ATen's CPU formulas in float), from steps the host computed;
 * contraction into fma is off so every product rounds as on the host. The backward is a
 * gather: each input element sums, in output order, the weighted gradients of the outputs
 * that read it (CPU's order of addition, no atomics). */
#pragma OPENCL FP_CONTRACT OFF

/* Source index i0 of output o along an axis of `in` -> `out` (returned), the second one
 * (*i1: i0 or i0 + 1) and the weight of i0 (*l0; that of i1 is 1 - l0). `align` of a nearest
 * axis says nearest-exact. */
inline long up_src(long o, long in, long out, float step, int linear, int align, long* i1, float* l0) {
  if (!linear) { /* identity at 1x, a shift at 2x, else floor(o * scale) clamped; exact:
                  * floor((o + 0.5) * scale) clamped (resample.c's nearest_axis) */
    long s = align ? min((long)floor(((float)o + 0.5f) * step), in - 1)
                   : out == in ? o : (out == 2 * in ? o >> 1 : min((long)floor((float)o * step), in - 1));
    *i1 = s;
    *l0 = 1.0f;
    return s;
  }
  if (out == in) { /* a copy at equal sizes, even with a scale given (resample.c's linear_axis) */
    *i1 = o;
    *l0 = 1.0f;
    return o;
  }
  float rr = align ? step * (float)o : step * ((float)o + 0.5f) - 0.5f;
  if (!align && rr < 0) rr = 0;
  long i = min((long)floor(rr), in - 1);
  float l = rr - (float)i;
  l = l < 0 ? 0 : (l > 1 ? 1 : l);
  *i1 = i + (i < in - 1 ? 1 : 0);
  *l0 = 1.0f - l;
  return i;
}

/* First output index along an axis whose second source index reaches i (both source
 * indices grow with the output index, so the outputs reading i follow from there); a
 * binary search for a row, a pointer advanced along the row for the columns. */
inline long up_first(long i, long in, long out, float step, int linear, int align) {
  long lo = 0, hi = out, i1;
  float l0;
  while (lo < hi) {
    long mid = (lo + hi) / 2;
    up_src(mid, in, out, step, linear, align, &i1, &l0);
    if (i1 >= i) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* One output's bilinear value (linear1d: along the row alone) from the rows at p0, p1. */
inline float up_bilinear(gcbuf x, ocl_upsample g, long p0, long p1, long e0, long e1, float h0, float w0) {
  if (g.one_d) return w0 * ld_f(x, p0 + e0, g.dt) + (1.0f - w0) * ld_f(x, p0 + e1, g.dt); /* linear1d */
  float h1 = 1.0f - h0, w1 = 1.0f - w0;
  return h0 * (w0 * ld_f(x, p0 + e0, g.dt) + w1 * ld_f(x, p0 + e1, g.dt)) +
         h1 * (w0 * ld_f(x, p1 + e0, g.dt) + w1 * ld_f(x, p1 + e1, g.dt));
}

/* Output rows r = (b * OD + od) * OH + oh (2-d: OD = 1); trilinear: each depth tap's bilinear
 * value times its weight, the two added (resample.c's interpolate_plane). */
__kernel void upsample2d_fwd(gbuf y, gcbuf x, ocl_upsample g, long chunk) {
  long rows = g.B * g.OD * g.OH, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  int mode = g.linear ? g.align : g.exact;
  for (long r = r0; r < r1; r++) {
    long b = r / (g.OD * g.OH), od = (r / g.OH) % g.OD, oh = r % g.OH, a1, c1, z1 = 0;
    float h0, w0, d0 = 1.0f;
    long z0 = g.three_d ? up_src(od, g.D, g.OD, g.step_d, g.linear, mode, &z1, &d0) : 0;
    long a0 = up_src(oh, g.H, g.OH, g.step_h, g.linear, mode, &a1, &h0);
    long p0 = OCL_PLANE_AT(g.off_x, g.xs, g.C, b, a0, 0) + z0 * g.xsd;
    long p1 = OCL_PLANE_AT(g.off_x, g.xs, g.C, b, a1, 0) + z0 * g.xsd, dz = (z1 - z0) * g.xsd;
    for (long ow = 0; ow < g.OW; ow++) {
      long c0 = up_src(ow, g.W, g.OW, g.step_w, g.linear, mode, &c1, &w0);
      float v;
      long e0 = c0 * g.xs[3], e1 = c1 * g.xs[3];
      if (!g.linear) v = ld_f(x, p0 + e0, g.dt);
      else v = up_bilinear(x, g, p0, p1, e0, e1, h0, w0);
      if (g.linear && g.three_d) v = d0 * v + (1.0f - d0) * up_bilinear(x, g, p0 + dz, p1 + dz, e0, e1, h0, w0);
      st_f(y, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow) + od * g.ysd, g.dt, v);
    }
  }
}

/* The terms of one output's gradient v that land on input row ih, column iw, in CPU's
 * order ((i0, i0), (i0, i1), (i1, i0), (i1, i1) of rows, columns), each weight dw * h * w * v
 * (2-d: dw = 1, exactly h * w * v). */
inline float up_terms(float acc, ocl_upsample g, float dw, long ih, long iw, long a0, long a1, long c0, long c1,
                      float h0, float w0, float v) {
  float h1 = 1.0f - h0, w1 = 1.0f - w0;
  if (a0 == ih) {
    if (c0 == iw) acc += dw * h0 * w0 * v;
    if (c1 == iw) acc += dw * h0 * w1 * v;
  }
  if (a1 == ih && !g.one_d) { /* linear1d has no second row */
    if (c0 == iw) acc += dw * h1 * w0 * v;
    if (c1 == iw) acc += dw * h1 * w1 * v;
  }
  return acc;
}

/* The source indices of output o along an axis (up_src: *s0, *s1, weight *l0) and whether they
 * reach input i: 1 when one is i, 0 when neither is, -1 when the first is past i (no later
 * output reads i). */
inline int up_reads(long o, long i, long in, long out, float step, int linear, int mode, long* s0, long* s1,
                    float* l0) {
  *s0 = up_src(o, in, out, step, linear, mode, s1, l0);
  return *s0 > i ? -1 : (*s0 == i || *s1 == i);
}

/* Input rows r = (b * D + id) * H + ih (2-d: D = 1): grad_input, each output's contributions
 * in the order CPU's scatter adds them (trilinear: those of the first depth tap, then the
 * second's). */
__kernel void upsample2d_bwd(gbuf gi, gcbuf go, ocl_upsample g, long chunk) {
  long rows = g.B * g.D * g.H, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  int mode = g.linear ? g.align : g.exact;
  for (long r = r0; r < r1; r++) {
    long b = r / (g.D * g.H), id = (r / g.H) % g.D, ih = r % g.H;
    long oh0 = up_first(ih, g.H, g.OH, g.step_h, g.linear, mode), ow0 = 0;
    long od0 = g.three_d ? up_first(id, g.D, g.OD, g.step_d, g.linear, mode) : 0;
    for (long iw = 0; iw < g.W; iw++) {
      /* the first output column reading iw: up_first, advanced from the previous column's */
      for (;;) {
        long c1;
        float w0;
        if (ow0 >= g.OW) break;
        up_src(ow0, g.W, g.OW, g.step_w, g.linear, mode, &c1, &w0);
        if (c1 >= iw) break;
        ow0++;
      }
      float acc = 0.0f;
      for (long od = od0; od < g.OD; od++) {
        long z0 = 0, z1 = 0;
        float d0 = 1.0f;
        int k = g.three_d ? up_reads(od, id, g.D, g.OD, g.step_d, g.linear, mode, &z0, &z1, &d0) : 1;
        if (k < 0) break;
        if (k == 0) continue;
        for (long oh = oh0; oh < g.OH; oh++) {
          long a0, a1;
          float h0;
          k = up_reads(oh, ih, g.H, g.OH, g.step_h, g.linear, mode, &a0, &a1, &h0);
          if (k < 0) break;
          if (k == 0) continue;
          for (long ow = ow0; ow < g.OW; ow++) {
            long c1;
            float w0;
            long c0 = up_src(ow, g.W, g.OW, g.step_w, g.linear, mode, &c1, &w0);
            if (c0 > iw) break;
            float v = ld_f(go, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow) + od * g.ysd, g.dt);
            if (!g.linear) {
              if (c0 == iw) acc += v;
              continue;
            }
            if (z0 == id) acc = up_terms(acc, g, d0, ih, iw, a0, a1, c0, c1, h0, w0, v);
            if (g.three_d && z1 == id) acc = up_terms(acc, g, 1.0f - d0, ih, iw, a0, a1, c0, c1, h0, w0, v);
          }
        }
      }
      st_f(gi, OCL_PLANE_AT(g.off_x, g.xs, g.C, b, ih, iw) + id * g.xsd, g.dt, acc);
    }
  }
}

/* ---------------------------------------------------------------- bicubic
 * plugins/common/resample.c's bicubic: the floor i of each source index (may be -1; taps
 * i - 1 .. i + 2 clamped into the axis) and its fraction t, A = -0.75. */
inline long cubic_src(long o, long in, float step, int align, float* t) {
  float rr = align ? step * (float)o : step * ((float)o + 0.5f) - 0.5f; /* no clamp at 0 */
  long i = min((long)floor(rr), in - 1);
  float l = rr - (float)i;
  *t = l < 0 ? 0 : (l > 1 ? 1 : l);
  return i;
}

/* ral_cubic_weights. */
inline void cubic_weights(float t, float* w) {
  const float A = -0.75f;
  float x1 = t + 1.0f, x2 = 1.0f - t, x3 = x2 + 1.0f;
  w[0] = ((A * x1 - 5 * A) * x1 + 8 * A) * x1 - 4 * A;
  w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
  w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

inline long cubic_tap(long i, int k, long n) { return max(min(i - 1 + k, n - 1), 0L); }

/* Output rows r = b * OH + oh: each row's four taps along W, then the four rows along H. */
__kernel void bicubic2d_fwd(gbuf y, gcbuf x, ocl_upsample g, long chunk) {
  long rows = g.B * g.OH, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.OH, oh = r % g.OH;
    float th, tw, wh[4], ww[4];
    long ih = cubic_src(oh, g.H, g.step_h, g.align, &th);
    cubic_weights(th, wh);
    for (long ow = 0; ow < g.OW; ow++) {
      long iw = cubic_src(ow, g.W, g.step_w, g.align, &tw);
      cubic_weights(tw, ww);
      float out = 0.0f;
      for (int j = 0; j < 4; j++) {
        long p = OCL_PLANE_AT(g.off_x, g.xs, g.C, b, cubic_tap(ih, j, g.H), 0);
        float t = ld_f(x, p + cubic_tap(iw, 0, g.W) * g.xs[3], g.dt) * ww[0];
        for (int i = 1; i < 4; i++) t += ld_f(x, p + cubic_tap(iw, i, g.W) * g.xs[3], g.dt) * ww[i];
        out = j == 0 ? t * wh[0] : out + t * wh[j];
      }
      st_f(y, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow), g.dt, out);
    }
  }
}

/* First output index along an axis whose floor source index reaches lo (they grow with the
 * output index; the outputs whose taps cover input i have floors in [i - 2, i + 1], clamping
 * included). */
inline long cubic_first(long lo, long in, long out, float step, int align) {
  long a = 0, z = out;
  float t;
  while (a < z) {
    long mid = (a + z) / 2;
    if (cubic_src(mid, in, step, align, &t) >= lo) z = mid;
    else a = mid + 1;
  }
  return a;
}

/* Input rows r = b * H + ih: grad_input sums, output by output in order and per output
 * columns outer, rows inner (CPU's scatter order), gradient * row weight * column weight of
 * every tap that lands on the element. */
__kernel void bicubic2d_bwd(gbuf gi, gcbuf go, ocl_upsample g, long chunk) {
  long rows = g.B * g.H, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.H, ih = r % g.H;
    long oh0 = cubic_first(ih - 2, g.H, g.OH, g.step_h, g.align);
    for (long iw = 0; iw < g.W; iw++) {
      long ow0 = cubic_first(iw - 2, g.W, g.OW, g.step_w, g.align);
      float acc = 0.0f;
      if (g.H == g.OH && g.W == g.OW) { /* CPU's backward copies at equal sizes (resample.c) */
        st_f(gi, OCL_PLANE_AT(g.off_x, g.xs, g.C, b, ih, iw), g.dt, ld_f(go, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, ih, iw), g.dt));
        continue;
      }
      for (long oh = oh0; oh < g.OH; oh++) {
        float th, tw, wh[4], ww[4];
        long sh = cubic_src(oh, g.H, g.step_h, g.align, &th);
        if (sh > ih + 1) break;
        cubic_weights(th, wh);
        for (long ow = ow0; ow < g.OW; ow++) {
          long sw = cubic_src(ow, g.W, g.step_w, g.align, &tw);
          if (sw > iw + 1) break;
          cubic_weights(tw, ww);
          float v = ld_f(go, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow), g.dt);
          for (int i = 0; i < 4; i++) {
            if (cubic_tap(sw, i, g.W) != iw) continue;
            for (int j = 0; j < 4; j++)
              if (cubic_tap(sh, j, g.H) == ih) acc += v * wh[j] * ww[i];
          }
        }
      }
      st_f(gi, OCL_PLANE_AT(g.off_x, g.xs, g.C, b, ih, iw), g.dt, acc);
    }
  }
}
