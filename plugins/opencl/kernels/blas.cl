/* blas.cl -- batched matmul tiled through local memory. Each 16x16 work-group computes
 * a 32x32 block of C (2x2 per work-item), so every loaded tile element is used 32 times. */
#define TS 16
#define BLK 32

__kernel __attribute__((reqd_work_group_size(TS, TS, 1)))
void matmul_tiled(__global float* C, __global const float* A, __global const float* B,
                  __global const float* I, ocl_mmgeom g) {
  __local float As[BLK][TS + 1];
  __local float Bs[TS][BLK + 1];
  int tx = get_local_id(0), ty = get_local_id(1);
  long n0 = get_group_id(0) * BLK, m0 = get_group_id(1) * BLK, b = get_global_id(2);
  __global const float* a = A + g.off_a + b * g.sa_b;
  __global const float* bb = B + g.off_b + b * g.sb_b;
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (long k0 = 0; k0 < g.K; k0 += TS) {
    for (int r = 0; r < 2; r++) {
      long m = m0 + ty + r * TS, k = k0 + tx;
      As[ty + r * TS][tx] = (m < g.M && k < g.K) ? a[m * g.sa_m + k * g.sa_k] : 0.0f;
      long kb = k0 + ty, n = n0 + tx + r * TS;
      Bs[ty][tx + r * TS] = (kb < g.K && n < g.N) ? bb[kb * g.sb_k + n * g.sb_n] : 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = 0; k < TS; k++) {
      float a0 = As[ty][k], a1 = As[ty + TS][k], b0 = Bs[k][tx], b1 = Bs[k][tx + TS];
      acc[0][0] += a0 * b0;
      acc[0][1] += a0 * b1;
      acc[1][0] += a1 * b0;
      acc[1][1] += a1 * b1;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  for (int r = 0; r < 2; r++) {
    for (int s = 0; s < 2; s++) {
      long m = m0 + ty + r * TS, n = n0 + tx + s * TS;
      if (m >= g.M || n >= g.N) continue;
      float v = g.alpha * acc[r][s];
      if (g.has_in) v += g.beta * I[g.off_i + b * g.si_b + m * g.si_m + n * g.si_n];
      C[g.off_c + b * g.sc_b + m * g.sc_m + n * g.sc_n] = v;
    }
  }
}

/* Register-tiled GEMM without local memory or barriers, on packed operands (gemm_pack):
 * each work-item computes a TM x VN block of C from one contiguous k-major panel of A
 * (TM values per k) and one of B (VN values per k, a single vector load). On a CPU runtime
 * (PoCL) a work-group runs on one core and the VN-wide vectors map onto SIMD registers;
 * the panels stream sequentially, so no TLB or cache-set thrashing on large strides.
 * Panels are zero-padded, so edge tiles only guard their stores. */
__kernel void gemm_pack(__global float* dst, __global const float* src, ocl_pack g) {
  long i = get_global_id(0);
  long per_b = g.P * g.K * g.V;
  if (i >= g.batch * per_b) return;
  long b = i / per_b, r = i % per_b;
  long p = r / (g.K * g.V), kj = r % (g.K * g.V), k = kj / g.V, j = kj % g.V;
  long o = p * g.V + j;
  dst[i] = o < g.outer ? src[g.off + b * g.s_b + o * g.s_o + k * g.s_k] : 0.0f;
}

/* CPU form of gemm_pack: work-item i packs panel rows (b, p, k) [i * chunk, (i + 1) * chunk)
 * of V values each, decoding (b, p, k) once and then stepping k (and p, b) in order. */
__kernel void gemm_packc(__global float* dst, __global const float* src, ocl_pack g, long chunk) {
  long rows = g.batch * g.P * g.K;
  long r0 = get_global_id(0) * chunk, r1 = min(r0 + chunk, rows);
  if (r0 >= r1) return;
  long k = r0 % g.K, bp = r0 / g.K, p = bp % g.P, b = bp / g.P;
  __global float* d = dst + r0 * g.V;
  for (long r = r0; r < r1; r++) {
    long o0 = p * g.V, base = g.off + b * g.s_b + k * g.s_k;
    if (o0 + g.V <= g.outer && g.s_o == 1 && g.V == 16) {
      vstore16(vload16(0, src + base + o0), 0, d); /* a row of B (or of A transposed) */
    } else if (o0 + g.V <= g.outer) {
      for (int j = 0; j < g.V; j++) d[j] = src[base + (o0 + j) * g.s_o];
    } else {
      for (int j = 0; j < g.V; j++) d[j] = o0 + j < g.outer ? src[base + (o0 + j) * g.s_o] : 0.0f;
    }
    d += g.V;
    if (++k == g.K) {
      k = 0;
      if (++p == g.P) p = 0, b++;
    }
  }
}

#define GEMM_REG(NAME, TM, VN, VT, VLOAD, VSTORE)                                             \
  __kernel void NAME(__global float* C, __global const float* Ap, __global const float* Bp,   \
                     __global const float* I, ocl_mmgeom g) {                                  \
    long pn = get_global_id(0), pm = get_global_id(1), b = get_global_id(2);                  \
    long n0 = pn * VN, m0 = pm * TM;                                                          \
    if (n0 >= g.N || m0 >= g.M) return;                                                       \
    long PN = (g.N + VN - 1) / VN, PM = (g.M + TM - 1) / TM;                                  \
    __global const float* ap = Ap + (b * PM + pm) * g.K * TM;                                 \
    __global const float* bp = Bp + (b * PN + pn) * g.K * VN;                                 \
    VT acc[TM];                                                                               \
    _Pragma("unroll") for (int r = 0; r < TM; r++) acc[r] = (VT)(0.0f);                       \
    for (long k = 0; k < g.K; k++) {                                                          \
      VT bv = VLOAD(k, bp);                                                                   \
      _Pragma("unroll") for (int r = 0; r < TM; r++) acc[r] = mad((VT)(ap[r]), bv, acc[r]);   \
      ap += TM;                                                                               \
    }                                                                                         \
    int full = n0 + VN <= g.N && g.sc_n == 1 && !g.has_in;                                    \
    for (int r = 0; r < TM; r++) {                                                            \
      long m = m0 + r;                                                                        \
      if (m >= g.M) break;                                                                    \
      __global float* c = C + g.off_c + b * g.sc_b + m * g.sc_m + n0 * g.sc_n;               \
      if (full) {                                                                             \
        VSTORE(g.alpha * acc[r], 0, c);                                                       \
        continue;                                                                             \
      }                                                                                       \
      float t[VN];                                                                            \
      VSTORE(acc[r], 0, t);                                                                   \
      for (int j = 0; j < VN && n0 + j < g.N; j++) {                                          \
        float v = g.alpha * t[j];                                                             \
        if (g.has_in) v += g.beta * I[g.off_i + b * g.si_b + m * g.si_m + (n0 + j) * g.si_n]; \
        c[j * g.sc_n] = v;                                                                    \
      }                                                                                       \
    }                                                                                         \
  }

GEMM_REG(gemm_r8x8, 8, 8, float8, vload8, vstore8)
GEMM_REG(gemm_r4x16, 4, 16, float16, vload16, vstore16)
GEMM_REG(gemm_r6x16, 6, 16, float16, vload16, vstore16)
GEMM_REG(gemm_r4x8, 4, 8, float8, vload8, vstore8)
GEMM_REG(gemm_r8x16, 8, 16, float16, vload16, vstore16)
GEMM_REG(gemm_r12x16, 12, 16, float16, vload16, vstore16)
GEMM_REG(gemm_r16x16, 16, 16, float16, vload16, vstore16)
