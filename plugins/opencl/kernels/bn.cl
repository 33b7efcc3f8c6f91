/* bn.cl -- batch norm over contiguous [N, C, S] (bn.c): per-channel statistics (one
 * work-item per channel, compensated sums, two passes for the variance) and per-row
 * application (`chunk` rows (n, c) per work-item). Buffers are addressed in BN_* order
 * through g.off / g.dt; an absent one is not read (its bit in g.has is clear). */
#define BN_HAS(i) ((g.has >> (i)) & 1)
#define BN_LD(p, i, e) ld_f(p, g.off[i] + (e), g.dt[i])

/* ms[c] = mean, ms[C + c] = invstd: the batch's (training; save_mean/save_invstd written and
 * the running statistics updated in place) or the running ones (eval). */
__kernel void bn_stats(__global float* ms, gcbuf x, gbuf rm, gbuf rv, gbuf sm, gbuf si, ocl_bn g) {
  long c = get_global_id(0);
  if (c >= g.C) return;
  float mean, var;
  if (!g.training) {
    mean = BN_LD(rm, BN_RM, c);
    var = BN_LD(rv, BN_RV, c);
  } else {
    float2 s = (float2)(0.0f, 0.0f), q = (float2)(0.0f, 0.0f);
    for (long n = 0; n < g.N; n++) {
      long b = (n * g.C + c) * g.S;
      for (long i = 0; i < g.S; i++) s = cs_add(s, BN_LD(x, BN_X, b + i));
    }
    float cnt = (float)(g.N * g.S);
    mean = g.N * g.S > 0 ? cs_val(s) / cnt : 0.0f;
    for (long n = 0; n < g.N; n++) { /* two passes: no cancellation in E[x^2] - E[x]^2 */
      long b = (n * g.C + c) * g.S;
      for (long i = 0; i < g.S; i++) {
        float d = BN_LD(x, BN_X, b + i) - mean;
        q = cs_add(q, d * d);
      }
    }
    var = g.N * g.S > 0 ? cs_val(q) / cnt : 0.0f;
    float m = g.momentum;
    if (BN_HAS(BN_SM)) st_f(sm, g.off[BN_SM] + c, g.dt[BN_SM], mean);
    if (BN_HAS(BN_SI)) st_f(si, g.off[BN_SI] + c, g.dt[BN_SI], 1.0f / sqrt(var + g.eps));
    if (BN_HAS(BN_RM)) st_f(rm, g.off[BN_RM] + c, g.dt[BN_RM], (1.0f - m) * BN_LD(rm, BN_RM, c) + m * mean);
    if (BN_HAS(BN_RV)) {
      float unbiased = g.N * g.S > 1 ? var * cnt / (cnt - 1.0f) : var;
      st_f(rv, g.off[BN_RV] + c, g.dt[BN_RV], (1.0f - m) * BN_LD(rv, BN_RV, c) + m * unbiased);
    }
  }
  ms[c] = mean;
  ms[g.C + c] = 1.0f / sqrt(var + g.eps);
}

/* y = (x - mean) * invstd * w + b over rows (n, c). */
__kernel void bn_apply(gbuf y, gcbuf x, __global const float* ms, gcbuf w, gcbuf b, ocl_bn g, long chunk) {
  long rows = g.N * g.C, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  for (long r = r0; r < r1; r++) {
    long c = r % g.C;
    float mean = ms[c], invstd = ms[g.C + c];
    float wv = BN_HAS(BN_W) ? BN_LD(w, BN_W, c) : 1.0f, bv = BN_HAS(BN_B) ? BN_LD(b, BN_B, c) : 0.0f;
    for (long i = r * g.S; i < (r + 1) * g.S; i++)
      st_f(y, g.off[BN_Y] + i, g.dt[BN_Y], (BN_LD(x, BN_X, i) - mean) * invstd * wv + bv);
  }
}

/* Backward statistics per channel: ms[c] = mean, ms[C + c] = invstd (saved in training,
 * running in eval), ms[2C + c] = sum of grad, ms[3C + c] = sum of grad * xhat; those sums
 * are grad_bias and grad_weight. */
__kernel void bn_bwd_stats(__global float* ms, gcbuf go, gcbuf x, gcbuf rm, gcbuf rv, gcbuf sm, gcbuf si,
                           gbuf gw, gbuf gb, ocl_bn g) {
  long c = get_global_id(0);
  if (c >= g.C) return;
  float mean, invstd;
  if (g.training) {
    mean = BN_LD(sm, BN_SM, c);
    invstd = BN_LD(si, BN_SI, c);
  } else {
    mean = BN_LD(rm, BN_RM, c);
    invstd = 1.0f / sqrt(BN_LD(rv, BN_RV, c) + g.eps);
  }
  float2 sg = (float2)(0.0f, 0.0f), sgx = (float2)(0.0f, 0.0f);
  for (long n = 0; n < g.N; n++) {
    long b = (n * g.C + c) * g.S;
    for (long i = b; i < b + g.S; i++) {
      float gv = BN_LD(go, BN_G, i);
      sg = cs_add(sg, gv);
      sgx = cs_add(sgx, gv * (BN_LD(x, BN_X, i) - mean) * invstd);
    }
  }
  ms[c] = mean;
  ms[g.C + c] = invstd;
  ms[2 * g.C + c] = cs_val(sg);
  ms[3 * g.C + c] = cs_val(sgx);
  if (BN_HAS(BN_GW)) st_f(gw, g.off[BN_GW] + c, g.dt[BN_GW], cs_val(sgx));
  if (BN_HAS(BN_GB)) st_f(gb, g.off[BN_GB] + c, g.dt[BN_GB], cs_val(sg));
}

/* grad_input = w * invstd * (grad - mean(grad) - xhat * mean(grad * xhat)) in training,
 * w * invstd * grad in eval, over rows (n, c). */
__kernel void bn_bwd_apply(gbuf gi, gcbuf go, gcbuf x, __global const float* ms, gcbuf w, ocl_bn g, long chunk) {
  long rows = g.N * g.C, r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  float cnt = (float)(g.N * g.S);
  for (long r = r0; r < r1; r++) {
    long c = r % g.C;
    float mean = ms[c], invstd = ms[g.C + c];
    float mg = g.training ? ms[2 * g.C + c] / cnt : 0.0f, mgx = g.training ? ms[3 * g.C + c] / cnt : 0.0f;
    float k = (BN_HAS(BN_W) ? BN_LD(w, BN_W, c) : 1.0f) * invstd;
    for (long i = r * g.S; i < (r + 1) * g.S; i++) {
      float xhat = (BN_LD(x, BN_X, i) - mean) * invstd;
      st_f(gi, g.off[BN_Y] + i, g.dt[BN_Y], k * (BN_LD(go, BN_G, i) - mg - xhat * mgx));
    }
  }
}
