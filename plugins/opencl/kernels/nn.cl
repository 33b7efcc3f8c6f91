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
    __global const float* kj = kb + j * g.sk[2];
    float s = 0.0f;
    for (long e = 0; e < g.E; e++) s = fma(qr[e], kj[e * g.sk[3]], s);
    s *= g.scale;
    if (g.has_mask == 1) s += mi[j * g.sm[3]];
    if (g.has_mask == 2 && !bi[j * g.sm[3]]) continue; /* bool mask: False = not attended */
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
