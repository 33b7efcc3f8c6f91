/* pool.cl -- 2-d max (plain and adaptive) and average pooling over [B, H, W] planes (and 3-d
 * max / average pooling over [B, D, H, W] volumes, at the end) of any
 * strides (pool.c), `chunk` rows per work-item. Max pooling follows CPU's kernel exactly: the window's first in-bounds
 * element is the index when nothing beats -inf, and NaN wins (val > max || isnan(val)).
 * Average pooling takes the windows and divisors of plugins/common/resample.c (CPU's). Each
 * backward is a gather: every input element sums, in output order, the gradients of the
 * outputs that read it, so no atomics and CPU's summation order. */

/* The input span [i0, i1) of output o's window along an axis (w_axis: W, else H), its first
 * in-bounds element first (step: the dilation); adaptive (adaptive_max_pool2d, unit
 * dilation): floor(o * I / O) .. ceil((o + 1) * I / O). */
inline void max_span(const ocl_pool* g, int w_axis, long o, long* i0, long* i1) {
  long in = w_axis ? g->W : g->H, out = w_axis ? g->OW : g->OH;
  long k = w_axis ? g->kw : g->kh, s = w_axis ? g->sw : g->sh, p = w_axis ? g->pw : g->ph, d = w_axis ? g->dw : g->dh;
  if (g->adaptive) {
    *i0 = o * in / out, *i1 = ((o + 1) * in + out - 1) / out;
    return;
  }
  long a = o * s - p;
  *i1 = min(a + (k - 1) * d + 1, in);
  while (a < 0) a += d;
  *i0 = a;
}

/* Output rows r = b * OH + oh; every operand of any strides (OCL_PLANE_AT). The index is
 * the element's position in its [H, W] plane (ih * W + iw), as CPU's. */
__kernel void maxpool2d_fwd(gbuf y, __global long* idx, gcbuf x, ocl_pool g, long chunk) {
  long rows = g.B * g.OH, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.OH, oh = r % g.OH, h0, h1;
    max_span(&g, 0, oh, &h0, &h1);
    long pb = OCL_PLANE_AT(g.off_x, g.xs, g.C, b, 0, 0);
    for (long ow = 0; ow < g.OW; ow++) {
      long w0, w1;
      max_span(&g, 1, ow, &w0, &w1);
      long best = h0 * g.W + w0;
      float m = -INFINITY;
      for (long ih = h0; ih < h1; ih += g.dh)
        for (long iw = w0; iw < w1; iw += g.dw) {
          float v = ld_f(x, pb + ih * g.xs[2] + iw * g.xs[3], g.dt);
          if (v > m || isnan(v)) {
            m = v;
            best = ih * g.W + iw;
          }
        }
      st_f(y, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow), g.dt, m);
      idx[OCL_PLANE_AT(g.off_i, g.is, g.C, b, oh, ow)] = best;
    }
  }
}

/* First and last output index along an axis whose window may hold input index i (adaptive:
 * as avg_outputs below). */
inline void max_outputs(const ocl_pool* g, int w_axis, long i, long* o0, long* o1) {
  long in = w_axis ? g->W : g->H, out = w_axis ? g->OW : g->OH;
  long k = w_axis ? g->kw : g->kh, s = w_axis ? g->sw : g->sh, p = w_axis ? g->pw : g->ph, d = w_axis ? g->dw : g->dh;
  if (g->adaptive) {
    *o0 = i * out / in;
    *o1 = min(((i + 1) * out + in - 1) / in - 1, out - 1);
    return;
  }
  long t = i + p - (k - 1) * d;
  *o0 = t <= 0 ? 0 : (t + s - 1) / s;
  *o1 = min((i + p) / s, out - 1);
}

/* Input rows r = b * H + ih: grad_input = sum of grad_output over the outputs that chose it,
 * in output order (CPU's). Every output is visited from some input of its window, so an index
 * outside the plane is found and recorded (IndexError at the next sync), never dropped silently. */
__kernel void maxpool2d_bwd(gbuf gi, gcbuf go, __global const long* idx, ocl_pool g, __global int* err, long chunk) {
  long rows = g.B * g.H, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows), hw = g.H * g.W;
  int site = g.adaptive ? OCL_SITE_ADAPTIVE_MAX_POOL_BACKWARD : OCL_SITE_MAX_POOL_BACKWARD;
  for (long r = r0; r < r1; r++) {
    long b = r / g.H, ih = r % g.H, oh0, oh1;
    max_outputs(&g, 0, ih, &oh0, &oh1);
    for (long iw = 0; iw < g.W; iw++) {
      long ow0, ow1;
      max_outputs(&g, 1, iw, &ow0, &ow1);
      long me = ih * g.W + iw;
      float acc = 0.0f;
      for (long oh = oh0; oh <= oh1; oh++)
        for (long ow = ow0; ow <= ow1; ow++) {
          long v = idx[OCL_PLANE_AT(g.off_i, g.is, g.C, b, oh, ow)];
          if (v == me)
            acc += ld_f(go, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow), g.dt);
          else if (v < 0 || v >= hw)
            index_fault(err, site, v, 0, hw);
        }
      st_f(gi, OCL_PLANE_AT(g.off_x, g.xs, g.C, b, ih, iw), g.dt, acc);
    }
  }
}

/* Window [h0, h1) x [w0, w1) of output (oh, ow), clipped to the input, and its divisor:
 * ral_avg_pool_window of plugins/common/resample.c. */
inline float avg_window(const ocl_pool* g, long oh, long ow, long* h0, long* h1, long* w0, long* w1) {
  if (g->adaptive) {
    *h0 = oh * g->H / g->OH, *h1 = ((oh + 1) * g->H + g->OH - 1) / g->OH;
    *w0 = ow * g->W / g->OW, *w1 = ((ow + 1) * g->W + g->OW - 1) / g->OW;
    return (float)((*h1 - *h0) * (*w1 - *w0));
  }
  long hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw;
  long he = min(hs + g->kh, g->H + g->ph), we = min(ws + g->kw, g->W + g->pw);
  long padded = (he - hs) * (we - ws);
  *h0 = max(hs, 0L), *w0 = max(ws, 0L), *h1 = min(he, g->H), *w1 = min(we, g->W);
  if (g->divisor) return (float)g->divisor;
  return (float)(g->count_include_pad ? padded : (*h1 - *h0) * (*w1 - *w0));
}

/* First and last output index along an axis whose window may hold input index i. */
inline void avg_outputs(const ocl_pool* g, int w_axis, long i, long* o0, long* o1) {
  long in = w_axis ? g->W : g->H, out = w_axis ? g->OW : g->OH;
  long k = w_axis ? g->kw : g->kh, s = w_axis ? g->sw : g->sh, p = w_axis ? g->pw : g->ph;
  if (g->adaptive) {
    *o0 = i * out / in;
    *o1 = min(((i + 1) * out + in - 1) / in - 1, out - 1);
    return;
  }
  long t = i + p - k + 1;
  *o0 = t <= 0 ? 0 : (t + s - 1) / s;
  *o1 = min((i + p) / s, out - 1);
}

/* Output rows r = b * OH + oh: the window sums over the divisor (0 for an empty window).
 * Both operands of any strides (OCL_PLANE_AT). */
__kernel void avgpool2d_fwd(gbuf y, gcbuf x, ocl_pool g, long chunk) {
  long rows = g.B * g.OH, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.OH, oh = r % g.OH, pb = OCL_PLANE_AT(g.off_x, g.xs, g.C, b, 0, 0);
    for (long ow = 0; ow < g.OW; ow++) {
      long h0, h1, w0, w1;
      float d = avg_window(&g, oh, ow, &h0, &h1, &w0, &w1), s = 0.0f;
      for (long ih = h0; ih < h1; ih++)
        for (long iw = w0; iw < w1; iw++) s += ld_f(x, pb + ih * g.xs[2] + iw * g.xs[3], g.dt);
      st_f(y, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow), g.dt, h0 < h1 && w0 < w1 ? s / d : 0.0f);
    }
  }
}

/* Input rows r = b * H + ih: grad_input = the sum, in output order, of grad_output / divisor
 * over the outputs whose window holds the element. */
__kernel void avgpool2d_bwd(gbuf gi, gcbuf go, ocl_pool g, long chunk) {
  long rows = g.B * g.H, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long b = r / g.H, ih = r % g.H, oh0, oh1;
    avg_outputs(&g, 0, ih, &oh0, &oh1);
    for (long iw = 0; iw < g.W; iw++) {
      long ow0, ow1;
      avg_outputs(&g, 1, iw, &ow0, &ow1);
      float acc = 0.0f;
      for (long oh = oh0; oh <= oh1; oh++)
        for (long ow = ow0; ow <= ow1; ow++) {
          long h0, h1, w0, w1;
          float d = avg_window(&g, oh, ow, &h0, &h1, &w0, &w1);
          if (ih >= h0 && ih < h1 && iw >= w0 && iw < w1)
            acc += ld_f(go, OCL_PLANE_AT(g.off_y, g.ys, g.C, b, oh, ow), g.dt) / d;
        }
      st_f(gi, OCL_PLANE_AT(g.off_x, g.xs, g.C, b, ih, iw), g.dt, acc);
    }
  }
}

/* ---------------------------------------------------------------- 3-d pooling */
/* The same rules along three axes (a: 0 depth, 1 height, 2 width) over [B, D, H, W]
 * volumes of any strides (OCL_VOLUME_AT); plugins/common/resample.c's ral_pool3 is the host
 * form. Max pooling's index is flat per volume (z * H * W + h * W + w), as CPU's. */

/* Max window of output o along axis a: [i0, i1) by the dilation, its first in-bounds element first. */
inline void max3_span(const ocl_pool3* g, int a, long o, long* i0, long* i1) {
  if (g->adaptive) { /* adaptive_max_pool3d: floor(o * I / O) .. ceil((o + 1) * I / O), dilation 1 */
    *i0 = o * g->I[a] / g->O[a], *i1 = ((o + 1) * g->I[a] + g->O[a] - 1) / g->O[a];
    return;
  }
  long s = o * g->s[a] - g->p[a];
  *i1 = min(s + (g->k[a] - 1) * g->d[a] + 1, g->I[a]);
  while (s < 0) s += g->d[a];
  *i0 = s;
}

/* First and last output along axis a whose window may hold input index i (kernel extent
 * ext: (k - 1) * d + 1 for max pooling, k for average pooling). */
inline void outputs3(const ocl_pool3* g, int a, long i, long ext, long* o0, long* o1) {
  if (g->adaptive) { /* as avg_outputs */
    *o0 = i * g->O[a] / g->I[a];
    *o1 = min(((i + 1) * g->O[a] + g->I[a] - 1) / g->I[a] - 1, g->O[a] - 1);
    return;
  }
  long t = i + g->p[a] - ext + 1;
  *o0 = t <= 0 ? 0 : (t + g->s[a] - 1) / g->s[a];
  *o1 = min((i + g->p[a]) / g->s[a], g->O[a] - 1);
}

/* Output rows r = (b * OD + od) * OH + oh. */
__kernel void maxpool3d_fwd(gbuf y, __global long* idx, gcbuf x, ocl_pool3 g, long chunk) {
  long rows = g.B * g.O[0] * g.O[1], r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long oh = r % g.O[1], od = r / g.O[1] % g.O[0], b = r / (g.O[1] * g.O[0]), z0, z1, h0, h1;
    max3_span(&g, 0, od, &z0, &z1);
    max3_span(&g, 1, oh, &h0, &h1);
    long pb = OCL_VOLUME_AT(g.off_x, g.xs, g.C, b, 0, 0, 0);
    for (long ow = 0; ow < g.O[2]; ow++) {
      long w0, w1;
      max3_span(&g, 2, ow, &w0, &w1);
      long best = (z0 * g.I[1] + h0) * g.I[2] + w0;
      float m = -INFINITY;
      for (long iz = z0; iz < z1; iz += g.d[0])
        for (long ih = h0; ih < h1; ih += g.d[1])
          for (long iw = w0; iw < w1; iw += g.d[2]) {
            float v = ld_f(x, pb + iz * g.xs[2] + ih * g.xs[3] + iw * g.xs[4], g.dt);
            if (v > m || isnan(v)) {
              m = v;
              best = (iz * g.I[1] + ih) * g.I[2] + iw;
            }
          }
      st_f(y, OCL_VOLUME_AT(g.off_y, g.ys, g.C, b, od, oh, ow), g.dt, m);
      idx[OCL_VOLUME_AT(g.off_i, g.is, g.C, b, od, oh, ow)] = best;
    }
  }
}

/* Input rows r = (b * D + iz) * H + ih: grad_input = the sum, in output order (CPU's), of the
 * gradients of the outputs whose index names the element. Every output is visited from some
 * input of its window, so an index outside the volume is recorded (IndexError at the next
 * sync), never dropped silently. */
__kernel void maxpool3d_bwd(gbuf gi, gcbuf go, __global const long* idx, ocl_pool3 g, __global int* err, long chunk) {
  long rows = g.B * g.I[0] * g.I[1], r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  long vol = g.I[0] * g.I[1] * g.I[2], ez = (g.k[0] - 1) * g.d[0] + 1, eh = (g.k[1] - 1) * g.d[1] + 1;
  long ew = (g.k[2] - 1) * g.d[2] + 1;
  for (long r = r0; r < r1; r++) {
    long ih = r % g.I[1], iz = r / g.I[1] % g.I[0], b = r / (g.I[1] * g.I[0]), z0, z1, h0, h1;
    outputs3(&g, 0, iz, ez, &z0, &z1);
    outputs3(&g, 1, ih, eh, &h0, &h1);
    for (long iw = 0; iw < g.I[2]; iw++) {
      long w0, w1, me = (iz * g.I[1] + ih) * g.I[2] + iw;
      outputs3(&g, 2, iw, ew, &w0, &w1);
      float acc = 0.0f;
      for (long od = z0; od <= z1; od++)
        for (long oh = h0; oh <= h1; oh++)
          for (long ow = w0; ow <= w1; ow++) {
            long v = idx[OCL_VOLUME_AT(g.off_i, g.is, g.C, b, od, oh, ow)];
            if (v == me)
              acc += ld_f(go, OCL_VOLUME_AT(g.off_y, g.ys, g.C, b, od, oh, ow), g.dt);
            else if (v < 0 || v >= vol)
              index_fault(err, g.adaptive ? OCL_SITE_ADAPTIVE_MAX_POOL3D_BACKWARD : OCL_SITE_MAX_POOL3D_BACKWARD, v, 0, vol);
          }
      st_f(gi, OCL_VOLUME_AT(g.off_x, g.xs, g.C, b, iz, ih, iw), g.dt, acc);
    }
  }
}

/* Average window of output o along axis a, clipped: [*lo, *hi); returns the padded extent. */
inline long avg3_span(const ocl_pool3* g, int a, long o, long* lo, long* hi) {
  if (g->adaptive) {
    *lo = o * g->I[a] / g->O[a], *hi = ((o + 1) * g->I[a] + g->O[a] - 1) / g->O[a];
    return *hi - *lo;
  }
  long s = o * g->s[a] - g->p[a], e = min(s + g->k[a], g->I[a] + g->p[a]);
  *lo = max(s, 0L), *hi = min(e, g->I[a]);
  return e - s;
}

/* The clipped window of output (od, oh, ow) in lo/hi and its divisor (ral_avg_pool3_window). */
inline float avg3_window(const ocl_pool3* g, long od, long oh, long ow, long* lo, long* hi) {
  long padded = avg3_span(g, 0, od, &lo[0], &hi[0]) * avg3_span(g, 1, oh, &lo[1], &hi[1]) *
                avg3_span(g, 2, ow, &lo[2], &hi[2]);
  if (g->divisor && !g->adaptive) return (float)g->divisor;
  return (float)(g->count_include_pad && !g->adaptive ? padded : (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
}

/* v over the divisor dv; adaptive: over each extent in turn (CPU's sum / kd / kh / kw). */
inline float avg3_div(const ocl_pool3* g, float v, float dv, const long* lo, const long* hi) {
  if (!g->adaptive) return v / dv;
  return v / (float)(hi[0] - lo[0]) / (float)(hi[1] - lo[1]) / (float)(hi[2] - lo[2]);
}

/* Output rows r = (b * OD + od) * OH + oh: the window sums over the divisor (0 for an empty window). */
__kernel void avgpool3d_fwd(gbuf y, gcbuf x, ocl_pool3 g, long chunk) {
  long rows = g.B * g.O[0] * g.O[1], r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long oh = r % g.O[1], od = r / g.O[1] % g.O[0], b = r / (g.O[1] * g.O[0]);
    long pb = OCL_VOLUME_AT(g.off_x, g.xs, g.C, b, 0, 0, 0);
    for (long ow = 0; ow < g.O[2]; ow++) {
      long lo[3], hi[3];
      float dv = avg3_window(&g, od, oh, ow, lo, hi), s = 0.0f;
      for (long iz = lo[0]; iz < hi[0]; iz++)
        for (long ih = lo[1]; ih < hi[1]; ih++)
          for (long iw = lo[2]; iw < hi[2]; iw++) s += ld_f(x, pb + iz * g.xs[2] + ih * g.xs[3] + iw * g.xs[4], g.dt);
      int empty = lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2];
      st_f(y, OCL_VOLUME_AT(g.off_y, g.ys, g.C, b, od, oh, ow), g.dt, empty ? 0.0f : avg3_div(&g, s, dv, lo, hi));
    }
  }
}

/* Input rows r = (b * D + iz) * H + ih: grad_input = the sum, in output order, of
 * grad_output / divisor over the outputs whose clipped window holds the element. */
__kernel void avgpool3d_bwd(gbuf gi, gcbuf go, ocl_pool3 g, long chunk) {
  long rows = g.B * g.I[0] * g.I[1], r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long ih = r % g.I[1], iz = r / g.I[1] % g.I[0], b = r / (g.I[1] * g.I[0]), z0, z1, h0, h1;
    outputs3(&g, 0, iz, g.k[0], &z0, &z1);
    outputs3(&g, 1, ih, g.k[1], &h0, &h1);
    for (long iw = 0; iw < g.I[2]; iw++) {
      long w0, w1;
      outputs3(&g, 2, iw, g.k[2], &w0, &w1);
      float acc = 0.0f;
      for (long od = z0; od <= z1; od++)
        for (long oh = h0; oh <= h1; oh++)
          for (long ow = w0; ow <= w1; ow++) {
            long lo[3], hi[3];
            float dv = avg3_window(&g, od, oh, ow, lo, hi);
            if (iz >= lo[0] && iz < hi[0] && ih >= lo[1] && ih < hi[1] && iw >= lo[2] && iw < hi[2])
              acc += avg3_div(&g, ld_f(go, OCL_VOLUME_AT(g.off_y, g.ys, g.C, b, od, oh, ow), g.dt), dv, lo, hi);
          }
      st_f(gi, OCL_VOLUME_AT(g.off_x, g.xs, g.C, b, iz, ih, iw), g.dt, acc);
    }
  }
}
