/* nn.cl -- row kernels (one work-group per row, local-memory reductions): softmax and
 * log_softmax forward/backward, layer norm forward/backward, nll_loss forward/backward.
 * Every sum is compensated (cs_add in common.cl, group_csum here). */

/* Sum (op 0) or max (op 1) of v over the work-group; every work-item gets the result. */
inline float group_reduce(__local float* sh, float v, int op) {
  int lid = get_local_id(0), L = get_local_size(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  sh[lid] = v;
  for (int s = L / 2; s > 0; s >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < s) sh[lid] = op ? fmax(sh[lid], sh[lid + s]) : sh[lid] + sh[lid + s];
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return sh[0];
}

/* Compensated sum of every work-item's (hi, lo) over the work-group; all get the value. */
inline float group_csum(__local float* sh, __local float* sl, float2 v) {
  int lid = get_local_id(0), L = get_local_size(0);
  barrier(CLK_LOCAL_MEM_FENCE);
  sh[lid] = v.x;
  sl[lid] = v.y;
  for (int s = L / 2; s > 0; s >>= 1) {
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < s) {
      float2 m = cs_merge((float2)(sh[lid], sl[lid]), (float2)(sh[lid + s], sl[lid + s]));
      sh[lid] = m.x, sl[lid] = m.y;
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  return cs_val((float2)(sh[0], sl[0]));
}

#define CS0 ((float2)(0.0f, 0.0f))

inline long row_base(const ocl_rows* g, long r) { return (r / g->inner) * g->len * g->inner + r % g->inner; }

/* op 0 softmax, 1 log_softmax, 2 _safe_softmax (a row of -inf gives zeros). */
__kernel void softmax_fwd(__global float* out, __global const float* in, ocl_rows g) {
  __local float sh[OCL_MAX_LOCAL], sl[OCL_MAX_LOCAL];
  long r = get_group_id(0);
  int lid = get_local_id(0), L = get_local_size(0);
  long base = row_base(&g, r);
  __global const float* x = in + g.off[1] + base;
  __global float* y = out + g.off[0] + base;
  float m = -INFINITY;
  for (long j = lid; j < g.len; j += L) m = fmax(m, x[j * g.inner]);
  m = group_reduce(sh, m, 1);
  float2 cs = CS0;
  for (long j = lid; j < g.len; j += L) cs = cs_add(cs, exp(x[j * g.inner] - m));
  float s = group_csum(sh, sl, cs);
  int dead = g.op == 2 && m == -INFINITY;
  float ls = log(s);
  for (long j = lid; j < g.len; j += L) {
    float v = x[j * g.inner] - m;
    y[j * g.inner] = dead ? 0.0f : g.op == 1 ? v - ls : exp(v) / s;
  }
}

/* op 0: softmax backward gi = y * (go - sum(go * y)); op 1: log_softmax backward
 * gi = go - exp(y) * sum(go). */
__kernel void softmax_bwd(__global float* gi, __global const float* go, __global const float* yv, ocl_rows g) {
  __local float sh[OCL_MAX_LOCAL], sl[OCL_MAX_LOCAL];
  long r = get_group_id(0);
  int lid = get_local_id(0), L = get_local_size(0);
  long base = row_base(&g, r);
  __global const float* dy = go + g.off[1] + base;
  __global const float* y = yv + g.off[2] + base;
  __global float* dx = gi + g.off[0] + base;
  float2 cs = CS0;
  for (long j = lid; j < g.len; j += L) cs = cs_add(cs, g.op ? dy[j * g.inner] : dy[j * g.inner] * y[j * g.inner]);
  float s = group_csum(sh, sl, cs);
  for (long j = lid; j < g.len; j += L) {
    long e = j * g.inner;
    dx[e] = g.op ? dy[e] - exp(y[e]) * s : y[e] * (dy[e] - s);
  }
}

/* flags: 1 weight, 2 bias. Buffers: y, mean, rstd, x, w, b. */
__kernel void layer_norm_fwd(__global float* y, __global float* mean, __global float* rstd,
                             __global const float* x, __global const float* w,
                             __global const float* b, ocl_rows g) {
  __local float sh[OCL_MAX_LOCAL], sl[OCL_MAX_LOCAL];
  long r = get_group_id(0);
  int lid = get_local_id(0), L = get_local_size(0);
  __global const float* xr = x + g.off[3] + r * g.len;
  __global float* yr = y + g.off[0] + r * g.len;
  float2 s = CS0;
  for (long j = lid; j < g.len; j += L) s = cs_add(s, xr[j]);
  float mu = group_csum(sh, sl, s) / (float)g.len;
  float2 ss = CS0;
  for (long j = lid; j < g.len; j += L) {
    float d = xr[j] - mu;
    ss = cs_add(ss, d * d);
  }
  float rs = rsqrt(group_csum(sh, sl, ss) / (float)g.len + g.eps);
  for (long j = lid; j < g.len; j += L) {
    float v = (xr[j] - mu) * rs;
    if (g.flags & 1) v *= w[g.off[4] + j];
    if (g.flags & 2) v += b[g.off[5] + j];
    yr[j] = v;
  }
  if (lid == 0) {
    mean[g.off[1] + r] = mu;
    rstd[g.off[2] + r] = rs;
  }
}

/* Buffers: gx, go, x, mean, rstd, w (flags & 1). */
__kernel void layer_norm_bwd_input(__global float* gx, __global const float* go,
                                   __global const float* x, __global const float* mean,
                                   __global const float* rstd, __global const float* w, ocl_rows g) {
  __local float sh[OCL_MAX_LOCAL], sl[OCL_MAX_LOCAL];
  long r = get_group_id(0);
  int lid = get_local_id(0), L = get_local_size(0);
  __global const float* dy = go + g.off[1] + r * g.len;
  __global const float* xr = x + g.off[2] + r * g.len;
  float mu = mean[g.off[3] + r], rs = rstd[g.off[4] + r];
  float2 c1 = CS0, c2 = CS0;
  for (long j = lid; j < g.len; j += L) {
    float wg = dy[j] * ((g.flags & 1) ? w[g.off[5] + j] : 1.0f);
    c1 = cs_add(c1, wg);
    c2 = cs_add(c2, wg * (xr[j] - mu) * rs);
  }
  float s1 = group_csum(sh, sl, c1);
  float s2 = group_csum(sh, sl, c2);
  float inv_n = 1.0f / (float)g.len;
  for (long j = lid; j < g.len; j += L) {
    float wg = dy[j] * ((g.flags & 1) ? w[g.off[5] + j] : 1.0f);
    float xh = (xr[j] - mu) * rs;
    gx[g.off[0] + r * g.len + j] = rs * (wg - inv_n * s1 - xh * inv_n * s2);
  }
}

/* One work-item per column. Buffers: gw, gb, go, x, mean, rstd; flags 1: gw, 2: gb. */
__kernel void layer_norm_bwd_params(__global float* gw, __global float* gb, __global const float* go,
                                    __global const float* x, __global const float* mean,
                                    __global const float* rstd, ocl_rows g) {
  long j = get_global_id(0);
  if (j >= g.len) return;
  float2 sw = CS0, sb = CS0;
  for (long r = 0; r < g.rows; r++) {
    float dy = go[g.off[2] + r * g.len + j];
    sw = cs_add(sw, dy * (x[g.off[3] + r * g.len + j] - mean[g.off[4] + r]) * rstd[g.off[5] + r]);
    sb = cs_add(sb, dy);
  }
  if (g.flags & 1) gw[g.off[0] + j] = cs_val(sw);
  if (g.flags & 2) gb[g.off[1] + j] = cs_val(sb);
}

/* One work-group for the whole batch. Buffers: out, total_weight, self, target, weight.
 * op = reduction (0 none, 1 mean, 2 sum); li0 = ignore_index; flags 1: weight given. A
 * target outside [0, C) (and not ignore_index) is recorded as an index fault. */
__kernel void nll_fwd(__global float* out, __global float* tw, __global const float* x,
                      __global const long* target, __global const float* w, ocl_rows g,
                      __global int* err) {
  __local float sh[OCL_MAX_LOCAL], sl[OCL_MAX_LOCAL];
  int lid = get_local_id(0), L = get_local_size(0);
  float2 cs = CS0, cw = CS0;
  for (long n = lid; n < g.rows; n += L) {
    long t = target[g.off[3] + n];
    if (t != g.li0 && (t < 0 || t >= g.len)) index_fault(err, OCL_SITE_NLL_LOSS, t, 1, g.len);
    float wt = (t == g.li0 || t < 0 || t >= g.len) ? 0.0f : (g.flags & 1) ? w[g.off[4] + t] : 1.0f;
    float l = wt == 0.0f ? 0.0f : -x[g.off[2] + n * g.len + t] * wt;
    if (g.op == 0) out[g.off[0] + n] = l;
    cs = cs_add(cs, l);
    cw = cs_add(cw, wt);
  }
  float s = group_csum(sh, sl, cs);
  float sw = group_csum(sh, sl, cw);
  if (lid == 0) {
    if (g.op != 0) out[g.off[0]] = g.op == 1 ? s / sw : s;
    tw[g.off[1]] = g.op == 0 ? 0.0f : sw;
  }
}

/* Per element of grad_input [rows, len]. Buffers: gi, go, target, weight, total_weight. */
__kernel void nll_bwd(__global float* gi, __global const float* go, __global const long* target,
                      __global const float* w, __global const float* tw, ocl_rows g) {
  long i = get_global_id(0);
  if (i >= g.rows * g.len) return;
  long n = i / g.len, cc = i % g.len;
  long t = target[g.off[2] + n];
  float v = 0.0f;
  if (cc == t && t != g.li0) {
    float wt = (g.flags & 1) ? w[g.off[3] + t] : 1.0f;
    float gr = go[g.off[1] + (g.op == 0 ? n : 0)];
    v = -wt * gr;
    if (g.op == 1) v /= tw[g.off[4]];
  }
  gi[g.off[0] + i] = v;
}

/* Fused attention forward (see ocl_sdpa in shared.h): one work-item per query row, an
 * online softmax over the keys (running max m, running sum l, output rescaled when m
 * grows), so the [L, S] score matrix never exists. Causal is top-left aligned (key j <=
 * row i), as PyTorch's tril(ones(L, S)). A row with no finite score writes zeros and
 * lse 0, like PyTorch's CPU flash kernel (the math path's _safe_softmax also gives 0). */
__kernel void sdpa_fwd(__global float* out, __global float* lse, __global const float* q,
                       __global const float* k, __global const float* v, __global const float* mask,
                       __global const uchar* bmask, ocl_sdpa g) {
  long r = get_global_id(0);
  if (r >= g.B * g.H * g.L) return;
  long i = r % g.L, bh = r / g.L, h = bh % g.H, b = bh / g.H;
  __global const float* qi = q + g.off_q + b * g.sq[0] + h * g.sq[1] + i * g.sq[2];
  __global const float* kb = k + g.off_k + b * g.sk[0] + h * g.sk[1];
  __global const float* vb = v + g.off_v + b * g.sv[0] + h * g.sv[1];
  long moff = g.off_m + b * g.sm[0] + h * g.sm[1] + i * g.sm[2];
  __global const float* mi = mask + moff;
  __global const uchar* bi = bmask + moff;
  float qr[OCL_SDPA_MAXE], acc[OCL_SDPA_MAXE];
  for (long e = 0; e < g.E; e++) qr[e] = qi[e * g.sq[3]];
  for (long e = 0; e < g.Ev; e++) acc[e] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  long jend = g.causal ? min(i + 1, g.S) : g.S;
  for (long j = 0; j < jend; j++) {
    /* bool mask: False = not attended; tested before the dot product, which it would discard */
    if (g.has_mask == 2 && !bi[j * g.sm[3]]) continue;
    __global const float* kj = kb + j * g.sk[2];
    float s = 0.0f;
    for (long e = 0; e < g.E; e++) s = fma(qr[e], kj[e * g.sk[3]], s);
    s *= g.scale;
    if (g.has_mask == 1) s += mi[j * g.sm[3]];
    if (s == -INFINITY) continue; /* a masked key adds nothing (and would make exp(-inf+inf)) */
    if (s > m) {
      float corr = exp(m - s);
      l *= corr;
      for (long e = 0; e < g.Ev; e++) acc[e] *= corr;
      m = s;
    }
    float p = exp(s - m); /* NaN scores propagate through p */
    l += p;
    __global const float* vj = vb + j * g.sv[2];
    for (long e = 0; e < g.Ev; e++) acc[e] = fma(p, vj[e * g.sv[3]], acc[e]);
  }
  __global float* oi = out + g.off_o + b * g.so[0] + h * g.so[1] + i * g.so[2];
  float inv = l == 0.0f ? 0.0f : 1.0f / l;
  for (long e = 0; e < g.Ev; e++) oi[e * g.so[3]] = acc[e] * inv;
  lse[g.off_l + b * g.sl[0] + h * g.sl[1] + i * g.sl[2]] = l == 0.0f ? 0.0f : m + log(l);
}

/* CPU form of sdpa_fwd for head sizes that are multiples of 16 (up to 16 * SDPA_VMAX) with
 * unit stride along the head dim: work-item = (batch, head, `rows_per` consecutive query
 * rows), dot products as 16-lane vectors, keys taken 16 at a time so the softmax's exp runs
 * on a vector; the same online softmax, causal rule, masks and empty-row result as sdpa_fwd. */
#define SDPA_VMAX 8
inline float hsum16(float16 p) {
  float8 a = p.lo + p.hi;
  float4 b = a.lo + a.hi;
  float2 c = b.lo + b.hi;
  return c.x + c.y;
}
inline float hmax16(float16 p) {
  float8 a = fmax(p.lo, p.hi);
  float4 b = fmax(a.lo, a.hi);
  float2 c = fmax(b.lo, b.hi);
  return fmax(c.x, c.y);
}

__kernel void sdpa_fwd_c(__global float* out, __global float* lse, __global const float* q,
                         __global const float* k, __global const float* v, __global const float* mask,
                         __global const uchar* bmask, ocl_sdpa g, long rows_per) {
  long nblk = (g.L + rows_per - 1) / rows_per, w = get_global_id(0);
  if (w >= g.B * g.H * nblk) return;
  long blk = w % nblk, bh = w / nblk, h = bh % g.H, b = bh / g.H;
  int nv = (int)(g.E / 16), nvv = (int)(g.Ev / 16);
  __global const float* kb = k + g.off_k + b * g.sk[0] + h * g.sk[1];
  __global const float* vb = v + g.off_v + b * g.sv[0] + h * g.sv[1];
  long iend = min((blk + 1) * rows_per, g.L);
  for (long i = blk * rows_per; i < iend; i++) {
    __global const float* qi = q + g.off_q + b * g.sq[0] + h * g.sq[1] + i * g.sq[2];
    long moff = g.off_m + b * g.sm[0] + h * g.sm[1] + i * g.sm[2];
    float16 qv[SDPA_VMAX], acc[SDPA_VMAX];
    for (int t = 0; t < nv; t++) qv[t] = vload16(t, qi);
    for (int t = 0; t < nvv; t++) acc[t] = (float16)(0.0f);
    float m = -INFINITY, l = 0.0f;
    long jend = g.causal ? min(i + 1, g.S) : g.S;
    for (long j0 = 0; j0 < jend; j0 += 16) {
      int nj = (int)min(16L, jend - j0);
      float s[16];
      for (int jj = 0; jj < 16; jj++) {
        if (jj >= nj) {
          s[jj] = -INFINITY;
          continue;
        }
        long j = j0 + jj;
        if (g.has_mask == 2 && !bmask[moff + j * g.sm[3]]) { /* hidden: skip its dot product */
          s[jj] = -INFINITY;
          continue;
        }
        __global const float* kj = kb + j * g.sk[2];
        float16 p = qv[0] * vload16(0, kj);
        for (int t = 1; t < nv; t++) p = mad(qv[t], vload16(t, kj), p);
        float sc = hsum16(p) * g.scale;
        if (g.has_mask == 1) sc += mask[moff + j * g.sm[3]];
        s[jj] = sc;
      }
      float16 sv = vload16(0, s);
      float bm = hmax16(sv);
      if (bm == -INFINITY && !any(isnan(sv))) continue; /* nothing attended in this block */
      float mn = fmax(m, bm);
      float corr = exp(m - mn); /* 0 while m is still -inf */
      float pj[16];
      vstore16(exp(sv - mn), 0, pj); /* masked keys give exp(-inf) = 0; NaN scores propagate */
      l *= corr;
      for (int t = 0; t < nvv; t++) acc[t] *= corr;
      for (int jj = 0; jj < nj; jj++) {
        l += pj[jj];
        __global const float* vj = vb + (j0 + jj) * g.sv[2];
        for (int t = 0; t < nvv; t++) acc[t] = mad((float16)(pj[jj]), vload16(t, vj), acc[t]);
      }
      m = mn;
    }
    __global float* oi = out + g.off_o + b * g.so[0] + h * g.so[1] + i * g.so[2];
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    for (int t = 0; t < nvv; t++) vstore16(acc[t] * inv, t, oi);
    lse[g.off_l + b * g.sl[0] + h * g.sl[1] + i * g.sl[2]] = l == 0.0f ? 0.0f : m + log(l);
  }
}

/* ---------------------------------------------------------------- CPU-shaped row kernels
 * A chunk of rows per work-item (local size 1), each row walked as 16-lane vectors with
 * per-lane compensated sums merged at the end, then a scalar tail. Same formulas as the
 * work-group kernels above. */

/* Compensated sum of a row (f = 0: x, 1: (x - mu)^2). */
inline float row_csum(__global const float* xr, long len, int f, float mu) {
  float16 hi = (float16)(0.0f), lo = (float16)(0.0f);
  long j = 0;
  for (; j + 16 <= len; j += 16) {
    float16 v = vload16(0, xr + j);
    if (f) v = (v - mu) * (v - mu);
    cs_add16(&hi, &lo, v);
  }
  float2 cs = cs_lanes16(hi, lo);
  for (; j < len; j++) cs = cs_add(cs, f ? (xr[j] - mu) * (xr[j] - mu) : xr[j]);
  return cs_val(cs);
}

__kernel void layer_norm_fwd_c(__global float* y, __global float* mean, __global float* rstd,
                               __global const float* x, __global const float* w,
                               __global const float* b, ocl_rows g, long chunk) {
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, g.rows);
  __global const float* wp = w + g.off[4];
  __global const float* bp = b + g.off[5];
  for (long r = r0; r < r1; r++) {
    __global const float* xr = x + g.off[3] + r * g.len;
    __global float* yr = y + g.off[0] + r * g.len;
    float mu = row_csum(xr, g.len, 0, 0.0f) / (float)g.len;
    float rs = rsqrt(row_csum(xr, g.len, 1, mu) / (float)g.len + g.eps);
    long j = 0;
    for (; j + 16 <= g.len; j += 16) {
      float16 v = (vload16(0, xr + j) - mu) * rs;
      if (g.flags & 1) v *= vload16(0, wp + j);
      if (g.flags & 2) v += vload16(0, bp + j);
      vstore16(v, 0, yr + j);
    }
    for (; j < g.len; j++) {
      float v = (xr[j] - mu) * rs;
      if (g.flags & 1) v *= wp[j];
      if (g.flags & 2) v += bp[j];
      yr[j] = v;
    }
    mean[g.off[1] + r] = mu;
    rstd[g.off[2] + r] = rs;
  }
}

/* Buffers: gx, go, x, mean, rstd, w (flags & 1). */
__kernel void layer_norm_bwd_input_c(__global float* gx, __global const float* go,
                                     __global const float* x, __global const float* mean,
                                     __global const float* rstd, __global const float* w, ocl_rows g,
                                     long chunk) {
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, g.rows);
  __global const float* wp = w + g.off[5];
  int hw = g.flags & 1;
  float inv_n = 1.0f / (float)g.len;
  for (long r = r0; r < r1; r++) {
    __global const float* dy = go + g.off[1] + r * g.len;
    __global const float* xr = x + g.off[2] + r * g.len;
    __global float* gr = gx + g.off[0] + r * g.len;
    float mu = mean[g.off[3] + r], rs = rstd[g.off[4] + r];
    float16 h1 = (float16)(0.0f), l1 = h1, h2 = h1, l2 = h1;
    long j = 0;
    for (; j + 16 <= g.len; j += 16) {
      float16 wg = vload16(0, dy + j);
      if (hw) wg *= vload16(0, wp + j);
      cs_add16(&h1, &l1, wg);
      cs_add16(&h2, &l2, wg * (vload16(0, xr + j) - mu) * rs);
    }
    float2 c1 = cs_lanes16(h1, l1), c2 = cs_lanes16(h2, l2);
    for (long t = j; t < g.len; t++) {
      float wg = dy[t] * (hw ? wp[t] : 1.0f);
      c1 = cs_add(c1, wg);
      c2 = cs_add(c2, wg * (xr[t] - mu) * rs);
    }
    float s1 = cs_val(c1), s2 = cs_val(c2);
    j = 0;
    for (; j + 16 <= g.len; j += 16) {
      float16 wg = vload16(0, dy + j);
      if (hw) wg *= vload16(0, wp + j);
      float16 xh = (vload16(0, xr + j) - mu) * rs;
      vstore16(rs * (wg - inv_n * s1 - xh * inv_n * s2), 0, gr + j);
    }
    for (; j < g.len; j++) {
      float wg = dy[j] * (hw ? wp[j] : 1.0f);
      float xh = (xr[j] - mu) * rs;
      gr[j] = rs * (wg - inv_n * s1 - xh * inv_n * s2);
    }
  }
}

/* Work-item = 16 adjacent columns (len % 16 == 0), rows in order. Buffers as
 * layer_norm_bwd_params. */
__kernel void layer_norm_bwd_params_c(__global float* gw, __global float* gb, __global const float* go,
                                      __global const float* x, __global const float* mean,
                                      __global const float* rstd, ocl_rows g) {
  long j = get_global_id(0) * 16;
  if (j >= g.len) return;
  float16 hw = (float16)(0.0f), lw = hw, hb = hw, lb = hw;
  for (long r = 0; r < g.rows; r++) {
    float16 dy = vload16(0, go + g.off[2] + r * g.len + j);
    float16 xh = (vload16(0, x + g.off[3] + r * g.len + j) - mean[g.off[4] + r]) * rstd[g.off[5] + r];
    cs_add16(&hw, &lw, dy * xh);
    cs_add16(&hb, &lb, dy);
  }
  if (g.flags & 1) vstore16(select(hw + lw, hw, (as_int16(hw) & 0x7f800000) == 0x7f800000), 0, gw + g.off[0] + j);
  if (g.flags & 2) vstore16(select(hb + lb, hb, (as_int16(hb) & 0x7f800000) == 0x7f800000), 0, gb + g.off[1] + j);
}

/* Rows contiguous (inner == 1). op as softmax_fwd. */
__kernel void softmax_fwd_c(__global float* out, __global const float* in, ocl_rows g, long chunk) {
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, g.rows);
  for (long r = r0; r < r1; r++) {
    __global const float* x = in + g.off[1] + r * g.len;
    __global float* y = out + g.off[0] + r * g.len;
    float16 mv = (float16)(-INFINITY);
    long j = 0;
    for (; j + 16 <= g.len; j += 16) mv = fmax(mv, vload16(0, x + j));
    float m = hmax16(mv);
    for (long t = j; t < g.len; t++) m = fmax(m, x[t]);
    float16 hi = (float16)(0.0f), lo = hi;
    for (j = 0; j + 16 <= g.len; j += 16) cs_add16(&hi, &lo, exp(vload16(0, x + j) - m));
    float2 cs = cs_lanes16(hi, lo);
    for (long t = j; t < g.len; t++) cs = cs_add(cs, exp(x[t] - m));
    float s = cs_val(cs);
    int dead = g.op == 2 && m == -INFINITY;
    float ls = log(s);
    for (j = 0; j + 16 <= g.len; j += 16) {
      float16 v = vload16(0, x + j) - m;
      vstore16(dead ? (float16)(0.0f) : g.op == 1 ? v - ls : exp(v) / s, 0, y + j);
    }
    for (; j < g.len; j++) {
      float v = x[j] - m;
      y[j] = dead ? 0.0f : g.op == 1 ? v - ls : exp(v) / s;
    }
  }
}

/* Rows contiguous (inner == 1). op as softmax_bwd. */
__kernel void softmax_bwd_c(__global float* gi, __global const float* go, __global const float* yv, ocl_rows g,
                            long chunk) {
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, g.rows);
  for (long r = r0; r < r1; r++) {
    __global const float* dy = go + g.off[1] + r * g.len;
    __global const float* y = yv + g.off[2] + r * g.len;
    __global float* dx = gi + g.off[0] + r * g.len;
    float16 hi = (float16)(0.0f), lo = hi;
    long j = 0;
    for (; j + 16 <= g.len; j += 16) {
      float16 d = vload16(0, dy + j);
      cs_add16(&hi, &lo, g.op ? d : d * vload16(0, y + j));
    }
    float2 cs = cs_lanes16(hi, lo);
    for (long t = j; t < g.len; t++) cs = cs_add(cs, g.op ? dy[t] : dy[t] * y[t]);
    float s = cs_val(cs);
    for (j = 0; j + 16 <= g.len; j += 16) {
      float16 d = vload16(0, dy + j), yy = vload16(0, y + j);
      vstore16(g.op ? d - exp(yy) * s : yy * (d - s), 0, dx + j);
    }
    for (; j < g.len; j++) dx[j] = g.op ? dy[j] - exp(y[j]) * s : y[j] * (dy[j] - s);
  }
}
