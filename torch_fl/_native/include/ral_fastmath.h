/*
 * ral_fastmath.h -- float32 exp, log, tanh, erf, sigmoid that GCC vectorizes.
 *
 * Shared by the host plugin's kernels and the C kernels torch_fl.jit generates (codegen_c.py
 * includes it where it beats libmvec: erf and sigmoid), so a jit kernel computes the same
 * values as the vendor kernel it stands in for. Header-only, needs only the C library.
 *
 * glibc's expf/tanhf/erff are scalar calls with branches: a loop calling them cannot
 * vectorize, and tanhf alone cost more than all matmuls of a GPT-2 forward. These are
 * branch-free (every special case is a select at the end), so a loop over them becomes
 * SIMD code; with FMA (the x86-64-v3 and v4 clones) the polynomials fuse.
 *
 * Accuracy against the correctly rounded result, every 5th float32 bit pattern, both
 * clones: exp 1.01 ulp, log 0.82, tanh 1.33, erf 1.18, sigmoid 2.35; inf, nan,
 * signed zero, denormal inputs and results as glibc (tests/test_host_plugin.py re-checks
 * a dense sweep through torch). float64 keeps libm: these are float-only.
 *
 * Polynomials: exp and log from Cephes (S. Moshier), tanh's small range from Cephes,
 * erf from N. Juffa's minimax fits (max error ~1 ulp with FMA).
 */
#ifndef RAL_FASTMATH_H
#define RAL_FASTMATH_H

#include <math.h>
#include <stdint.h>

#include "ral_half.h" /* its float <-> bits casts */

#define RAL_FM_INLINE static inline __attribute__((always_inline))
#define ral_fm_bits_f ral_half_bits_f
#define ral_fm_f_bits ral_half_f_bits

/* Round to nearest integer (|v| < 2^22), without a libm call. */
RAL_FM_INLINE float ral_fm_rint(float v) { return (v + 0x1.8p23f) - 0x1.8p23f; }

RAL_FM_INLINE float ral_fm_copysign(float mag, float sgn) {
  return ral_fm_bits_f((ral_fm_f_bits(mag) & 0x7fffffffu) | (ral_fm_f_bits(sgn) & 0x80000000u));
}

/* The one e^t kernel the functions below share: t = n ln2 + r (ln2 split in two for an
 * exact product), e^r by a degree-7 polynomial on |r| <= ln2/2. Returns e^r; *n gets n. */
RAL_FM_INLINE float ral_fm_exp_reduced(float t, float* n_out) {
  float n = ral_fm_rint(t * 1.44269504088896341f);
  float r = t - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  *n_out = n;
  return p;
}

/* p * 2^n as two factors, so results in the denormal range and just below overflow need no
 * special case. */
RAL_FM_INLINE float ral_fm_scale2(float p, float n) {
  int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
  return p * ral_fm_bits_f((uint32_t)(n1 + 127) << 23) * ral_fm_bits_f((uint32_t)(n2 + 127) << 23);
}

/* e^x. */
RAL_FM_INLINE float ral_expf(float x) {
  float xc = x > 88.8f ? 88.8f : x < -104.0f ? -104.0f : x, n;
  float p = ral_fm_exp_reduced(xc, &n); /* own statement: argument order is unspecified */
  float y = ral_fm_scale2(p, n);
  y = x > 88.72283935546875f ? __builtin_inff() : y;
  y = x < -103.97208f ? 0.0f : y;
  return x != x ? x : y;
}

/* log(x): x = m * 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by a polynomial in m - 1. */
RAL_FM_INLINE float ral_logf(float x) {
  int denorm = x < 0x1p-126f;
  float xs = denorm ? x * 0x1p23f : x;
  uint32_t u = ral_fm_f_bits(xs);
  int32_t e = (int32_t)((u >> 23) & 0xff) - 126 - (denorm ? 23 : 0);
  float m = ral_fm_bits_f((u & 0x007fffffu) | 0x3f000000u); /* [0.5, 1) */
  int small = m < 0.707106781186547524f;
  e -= small;
  m = small ? m + m - 1.0f : m - 1.0f;
  float z = m * m;
  float p = 7.0376836292e-2f;
  p = p * m - 1.1514610310e-1f;
  p = p * m + 1.1676998740e-1f;
  p = p * m - 1.2420140846e-1f;
  p = p * m + 1.4249322787e-1f;
  p = p * m - 1.6668057665e-1f;
  p = p * m + 2.0000714765e-1f;
  p = p * m - 2.4999993993e-1f;
  p = p * m + 3.3333331174e-1f;
  float fe = (float)e;
  float y = m * z * p + fe * -2.12194440e-4f - 0.5f * z;
  y = m + y + fe * 0.693359375f;
  y = x == __builtin_inff() ? x : y;
  y = x == 0.0f ? -__builtin_inff() : y;
  return x < 0.0f || x != x ? __builtin_nanf("") : y;
}

/* e^t for t in [-87, 88] only: one 2^n factor, no range selects (callers clamp first). */
RAL_FM_INLINE float ral_fm_exp_mid(float t) {
  float n, p = ral_fm_exp_reduced(t, &n);
  return p * ral_fm_bits_f((uint32_t)((int32_t)n + 127) << 23);
}

/* |x| < 0.625: odd polynomial; else 1 - 2/(e^2|x| + 1) with |x| clamped to 9.1, where
 * tanh is 1.0f already (so e^2|x| cannot overflow and needs no special cases). */
RAL_FM_INLINE float ral_tanhf(float x) {
  float a = x < 0 ? -x : x, z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  float small = a + a * z * p;
  float ac = a < 9.1f ? a : 9.1f;
  float big = 1.0f - 2.0f / (ral_fm_exp_mid(ac + ac) + 1.0f);
  float y = ral_fm_copysign(a < 0.625f ? small : big, x);
  return x != x ? x : y;
}

/* |x| <= 0.927734375: odd polynomial; else 1 - e^r(|x|), with |x| clamped to 4.5 where erf
 * is 1.0f already (so r stays in [-21, 0] and e^r needs no range selects). */
RAL_FM_INLINE float ral_erff(float x) {
  float t0 = x < 0 ? -x : x;
  float t = t0 < 4.5f ? t0 : 4.5f, s = t * t; /* = x * x on the small branch */
  float r = -1.72853470e-5f * t + 3.83197126e-4f;
  float u = -3.88396438e-3f * t + 2.42546219e-2f;
  r = r * s + u;
  r = r * t - 1.06777877e-1f;
  r = r * t - 6.34846687e-1f;
  r = r * t - 1.28717512e-1f;
  r = r * t - t;
  float big = ral_fm_copysign(1.0f - ral_fm_exp_mid(r), x);
  float q = -5.96761703e-4f;
  q = q * s + 4.99119423e-3f;
  q = q * s - 2.67681349e-2f;
  q = q * s + 1.12819925e-1f;
  q = q * s - 3.76125336e-1f;
  q = q * s + 1.28379166e-1f;
  float small = q * x + x;
  float y = t0 > 0.927734375f ? big : small;
  return x != x ? x : y;
}

/* e^t for t <= 0 (NaN excepted): 2^n applied as two factors so denormal results keep their
 * accuracy; below -104 the result is 0. No overflow or NaN selects (sigmoid's only use). */
RAL_FM_INLINE float ral_fm_exp_neg(float t) {
  float xc = t < -104.0f ? -104.0f : t, n;
  float p = ral_fm_exp_reduced(xc, &n);
  return ral_fm_scale2(p, n);
}

/* Through e^-|x| so a tiny result for very negative x keeps its relative accuracy
 * instead of flushing to 0 when e^-x overflows. */
RAL_FM_INLINE float ral_sigmoidf(float x) {
  float e = ral_fm_exp_neg(x < 0 ? x : -x);
  float y = (x < 0 ? e : 1.0f) / (1.0f + e);
  return x != x ? x : y;
}

#endif /* RAL_FASTMATH_H */
