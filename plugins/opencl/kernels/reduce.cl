/* reduce.cl -- one work-group per output element; each work-item strides over the
 * reduced elements, then a tree in local memory combines the partials. Sums (sum, mean,
 * var) are compensated at both levels (cs_add / cs_merge in common.cl). */

inline long rg_offset(const ocl_rgeom* g, long j) {
  long e = 0;
  for (int d = g->rndim - 1; d >= 0; d--) {
    e += (j % g->rsize[d]) * g->rst[d];
    j /= g->rsize[d];
  }
  return e;
}

/* Where output o's reduction starts in the input, and where its value goes. */
inline void rg_out_offsets(const ocl_rgeom* g, long o, long* base, long* obase) {
  long b = g->off_in, ob = g->off_out;
  for (int d = g->ondim - 1; d >= 0; d--) {
    long c = o % g->osize[d];
    o /= g->osize[d];
    b += c * g->ost_in[d];
    ob += c * g->ost_out[d];
  }
  *base = b, *obase = ob;
}

/* Is (a, ia) preferred over (b, ib) by an arg-reduction? NaN wins, then first index. */
inline int arg_better(float a, long ia, float b, long ib, int want_max) {
  if (isnan(a) || isnan(b)) return isnan(a) && (!isnan(b) || ia < ib);
  if (a == b) return ia < ib;
  return want_max ? a > b : a < b;
}

inline float comb_f(int op, float a, float b) {
  switch (op) {
    case RD_MAX: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    case RD_MIN: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    case RD_PROD: return a * b;
    default: return a + b;
  }
}

inline long comb_i(int op, long a, long b) {
  switch (op) {
    case RD_MAX: case RD_ANY: return max(a, b);
    case RD_MIN: case RD_ALL: return min(a, b);
    case RD_PROD: return a * b;
    default: return a + b;
  }
}

__kernel void reduce_any(gbuf out, gbuf idx, gcbuf in, ocl_rgeom g) {
  __local float lf[OCL_MAX_LOCAL];
  __local long ll[OCL_MAX_LOCAL];
  __local float lo[OCL_MAX_LOCAL]; /* compensation terms of lf (sums) */
  long o = get_group_id(0);
  int lid = get_local_id(0), L = get_local_size(0);
  long base = g.off_in, obase = g.off_out, ibase = g.off_idx, rest = o;
  for (int d = g.ondim - 1; d >= 0; d--) {
    long c = rest % g.osize[d];
    rest /= g.osize[d];
    base += c * g.ost_in[d];
    obase += c * g.ost_out[d];
    ibase += c * g.ost_out[d];
  }
  int op = g.op, arg = op == RD_ARGMAX || op == RD_ARGMIN;
  int want_max = op == RD_ARGMAX || op == RD_MAX;
  int summing = op == RD_SUM || op == RD_MEAN || op == RD_VAR;
  if (g.cfl || arg) {
    float init = op == RD_PROD ? 1.0f : op == RD_MAX ? -INFINITY : op == RD_MIN ? INFINITY : 0.0f;
    float acc = arg ? NAN : init;
    long best = -1;
    float2 cs = (float2)(0.0f, 0.0f);
    for (long j = lid; j < g.n_red; j += L) {
      float v = ld_f(in, base + rg_offset(&g, j), g.dt_in);
      if (arg) {
        if (best < 0 || arg_better(v, j, acc, best, want_max)) acc = v, best = j;
      } else if (summing) {
        cs = cs_add(cs, v);
      } else {
        acc = comb_f(op, acc, v);
      }
    }
    lf[lid] = summing ? cs.x : acc;
    lo[lid] = cs.y;
    ll[lid] = best;
    for (int s = L / 2; s > 0; s >>= 1) {
      barrier(CLK_LOCAL_MEM_FENCE);
      if (lid < s) {
        if (arg) {
          if (ll[lid + s] >= 0 && (ll[lid] < 0 || arg_better(lf[lid + s], ll[lid + s], lf[lid], ll[lid], want_max)))
            lf[lid] = lf[lid + s], ll[lid] = ll[lid + s];
        } else if (summing) {
          float2 m = cs_merge((float2)(lf[lid], lo[lid]), (float2)(lf[lid + s], lo[lid + s]));
          lf[lid] = m.x, lo[lid] = m.y;
        } else {
          lf[lid] = comb_f(op, lf[lid], lf[lid + s]);
        }
      }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = summing ? cs_val((float2)(lf[0], lo[0])) : lf[0];
    if (op == RD_VAR) { /* second pass around the mean, compensated too */
      float mean = total / (float)g.n_red;
      float2 ss = (float2)(0.0f, 0.0f);
      barrier(CLK_LOCAL_MEM_FENCE);
      for (long j = lid; j < g.n_red; j += L) {
        float dv = ld_f(in, base + rg_offset(&g, j), g.dt_in) - mean;
        ss = cs_add(ss, dv * dv);
      }
      lf[lid] = ss.x;
      lo[lid] = ss.y;
      for (int s = L / 2; s > 0; s >>= 1) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (lid < s) {
          float2 m = cs_merge((float2)(lf[lid], lo[lid]), (float2)(lf[lid + s], lo[lid + s]));
          lf[lid] = m.x, lo[lid] = m.y;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
      total = cs_val((float2)(lf[0], lo[0]));
    }
    if (lid == 0) {
      float r = total;
      if (op == RD_MEAN) r = r / (float)g.n_red;
      if (op == RD_VAR) r = r / fmax((float)g.n_red - g.correction, 0.0f);
      if (arg && g.scale != 0.0f) { /* max.dim / min.dim: values and indices */
        st_f(out, obase, g.dt_out, r);
        st_i(idx, ibase, DT_I64, ll[0] < 0 ? 0 : ll[0]);
      } else if (arg) {
        st_i(out, obase, g.dt_out, ll[0]);
      } else {
        st_f(out, obase, g.dt_out, r);
      }
    }
    return;
  }
  long acc = op == RD_PROD || op == RD_ALL ? 1 : op == RD_MAX ? LONG_MIN : op == RD_MIN ? LONG_MAX : 0;
  /* all/any test floats as floats: through ld_i, 0.5 would truncate to 0 (false). */
  int truth = op == RD_ALL || op == RD_ANY,
      fl = g.dt_in == DT_F32 || g.dt_in == DT_F16 || g.dt_in == DT_BF16 || g.dt_in == DT_F64;
  for (long j = lid; j < g.n_red; j += L) {
    long e = base + rg_offset(&g, j);
    long v = !truth ? ld_i(in, e, g.dt_in) : fl ? ld_f(in, e, g.dt_in) != 0.0f : ld_i(in, e, g.dt_in) != 0;
    acc = comb_i(op, acc, v);
  }
  ll[lid] = acc;
  for (int s = L / 2; s > 0; s >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < s) ll[lid] = comb_i(op, ll[lid], ll[lid + s]);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (lid == 0) st_i(out, obase, g.dt_out, ll[0]);
}

/* ---------------------------------------------------------------- CPU-shaped sums
 * sum / mean in float over one (merged) reduced dim, a chunk of outputs per work-item,
 * each summed in index order with compensation. When the outputs are adjacent in the
 * input (a bias gradient: columns of [rows, N]), 16 outputs advance together as one
 * vector per reduced step, so the walk is sequential in memory. */
__kernel void reduce_sum_c(gbuf out, gcbuf in, ocl_rgeom g, long chunk) {
  long o0 = get_global_id(0) * chunk, o1 = min(o0 + chunk, g.n_out);
  if (o0 >= o1) return;
  float div = g.op == RD_MEAN ? (float)g.n_red : 1.0f;
  long rs = g.rndim ? g.rst[0] : 0;
  long o = o0;
  if (g.ondim == 1 && g.ost_in[0] == 1 && g.dt_in == DT_F32) {
    __global const float* p = (__global const float*)in + g.off_in;
    for (; o + 16 <= o1; o += 16) {
      float16 hi = (float16)(0.0f), lo = (float16)(0.0f);
      for (long j = 0; j < g.n_red; j++) cs_add16(&hi, &lo, vload16(0, p + o + j * rs));
      float16 r = select(hi + lo, hi, (as_int16(hi) & 0x7f800000) == 0x7f800000) / div;
      float t[16];
      vstore16(r, 0, t);
      for (int l = 0; l < 16; l++) st_f(out, g.off_out + (o + l) * g.ost_out[0], g.dt_out, t[l]);
    }
  }
  for (; o < o1; o++) {
    long base, obase;
    rg_out_offsets(&g, o, &base, &obase);
    float2 cs = (float2)(0.0f, 0.0f);
    if (g.dt_in == DT_F32 && rs == 1) {
      /* A row (the reduced dim is contiguous: softmax's and layer norm's row sums): 16
       * lanes, each compensated, then merged; a scalar loop took 0.6 ms for 512 x 256. */
      __global const float* p = (__global const float*)in + base;
      float16 hi = (float16)(0.0f), lo = (float16)(0.0f);
      long j = 0;
      for (; j + 16 <= g.n_red; j += 16) cs_add16(&hi, &lo, vload16(0, p + j));
      cs = cs_lanes16(hi, lo);
      for (; j < g.n_red; j++) cs = cs_add(cs, p[j]);
    } else if (g.dt_in == DT_F32) {
      __global const float* p = (__global const float*)in + base;
      for (long j = 0; j < g.n_red; j++) cs = cs_add(cs, p[j * rs]);
    } else {
      for (long j = 0; j < g.n_red; j++) cs = cs_add(cs, ld_f(in, base + j * rs, g.dt_in));
    }
    st_f(out, obase, g.dt_out, cs_val(cs) / div);
  }
}

/* ---------------------------------------------------------------- CPU-shaped max / min
 * amax / amin in float32 over one (merged) reduced dim, a chunk of outputs per work-item;
 * a contiguous row runs as 16 lanes (a log-softmax's row maximum over 2048 logits). NaN
 * wins, as in reduce_any. */
__kernel void reduce_minmax_c(gbuf out, gcbuf in, ocl_rgeom g, long chunk) {
  long o0 = get_global_id(0) * chunk, o1 = min(o0 + chunk, g.n_out);
  long rs = g.rndim ? g.rst[0] : 0;
  int want_max = g.op == RD_MAX;
  for (long o = o0; o < o1; o++) {
    long base, obase;
    rg_out_offsets(&g, o, &base, &obase);
    __global const float* p = (__global const float*)in + base;
    float acc = want_max ? -INFINITY : INFINITY;
    int nan = 0;
    long j = 0;
    if (rs == 1 && g.n_red >= 16) {
      float16 m = (float16)(acc);
      int16 bad = (int16)(0);
      for (; j + 16 <= g.n_red; j += 16) {
        float16 v = vload16(0, p + j);
        bad |= isnan(v);
        m = want_max ? fmax(m, v) : fmin(m, v);
      }
      float t[16];
      vstore16(m, 0, t);
      for (int l = 0; l < 16; l++) acc = want_max ? fmax(acc, t[l]) : fmin(acc, t[l]);
      nan = any(bad);
    }
    for (; j < g.n_red; j++) {
      float v = p[j * rs];
      nan |= isnan(v);
      acc = want_max ? fmax(acc, v) : fmin(acc, v);
    }
    st_f(out, obase, g.dt_out, nan ? NAN : acc);
  }
}
