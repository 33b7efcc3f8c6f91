/*
 * ral_half.h -- float16 / bfloat16 <-> float32, bit-exact with c10::Half and c10::BFloat16.
 *
 * One copy for three users: the host plugin's kernels (plugins/host/dtype.h), the C kernels
 * torch_fl.jit generates, and the OpenCL C programs it generates (codegen_opencl.py pastes
 * this file into the program text, so it must stay valid OpenCL C as well as C11).
 *
 * Branch-free (selects only), so a loop over half data still vectorizes. The float16 method
 * is the FP16 library's (M. Dukhan): rounding to nearest even is done by the FPU, adding a
 * power of two that aligns the kept mantissa bits. Keep floating-point contraction off
 * around ral_f2h (the jit compiles fused kernels with -std=c11, which turns it off): an FMA
 * would skip the rounding of the scaled product that the method relies on.
 */
#ifndef RAL_HALF_H
#define RAL_HALF_H

#ifdef __OPENCL_VERSION__
typedef uint ral_u32;
typedef ushort ral_u16;
#define RAL_HALF_FN inline
#define ral_half_bits_f(u) as_float((ral_u32)(u))
#define ral_half_f_bits(f) as_uint((float)(f))
#define ral_half_fabs(f) fabs(f)
#else
#include <stdint.h>
#include <string.h>
typedef uint32_t ral_u32;
typedef uint16_t ral_u16;
#define RAL_HALF_FN static inline
RAL_HALF_FN float ral_half_bits_f(ral_u32 u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
RAL_HALF_FN ral_u32 ral_half_f_bits(float f) {
  ral_u32 u;
  memcpy(&u, &f, 4);
  return u;
}
#define ral_half_fabs(f) __builtin_fabsf(f)
#endif

/* float16 bits -> float (exact). */
RAL_HALF_FN float ral_h2f(ral_u16 h) {
  const ral_u32 w = (ral_u32)h << 16, sign = w & 0x80000000u, two_w = w + w;
  const float normalized = ral_half_bits_f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
  const float denormalized = ral_half_bits_f((two_w >> 17) | (126u << 23)) - 0.5f;
  const ral_u32 mag = two_w < (1u << 27) ? ral_half_f_bits(denormalized) : ral_half_f_bits(normalized);
  return ral_half_bits_f(sign | mag);
}

/* float -> float16 bits, rounding to nearest even; NaN becomes the quiet NaN 0x7E00. */
RAL_HALF_FN ral_u16 ral_f2h(float f) {
  const ral_u32 w = ral_half_f_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
  float base = (ral_half_fabs(f) * 0x1.0p+112f) * 0x1.0p-110f;
  ral_u32 bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = ral_half_bits_f((bias >> 1) + 0x07800000u) + base;
  const ral_u32 bits = ral_half_f_bits(base);
  const ral_u32 nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return (ral_u16)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

/* bfloat16 bits -> float (exact). */
RAL_HALF_FN float ral_bf2f(ral_u16 b) { return ral_half_bits_f((ral_u32)b << 16); }

/* float -> bfloat16 bits, rounding to nearest even; NaN becomes the quiet NaN 0x7FC0. The NaN
 * test is on the bits: PoCL 3.1 miscompiled a kernel that used isnan() here. */
RAL_HALF_FN ral_u16 ral_f2bf(float f) {
  const ral_u32 u = ral_half_f_bits(f);
  return (ral_u16)((u & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC0u : (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* A float rounded to the nearest float16 / bfloat16 value, kept as float: what an eager op
 * on half data stores, for the next op of a fused kernel to read. */
RAL_HALF_FN float ral_round_f16(float f) { return ral_h2f(ral_f2h(f)); }
RAL_HALF_FN float ral_round_bf16(float f) { return ral_bf2f(ral_f2bf(f)); }

#endif /* RAL_HALF_H */
