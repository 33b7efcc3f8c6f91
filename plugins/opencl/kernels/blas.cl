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
