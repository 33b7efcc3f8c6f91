/*
 * dnnl_matmul.h -- matrix products through oneDNN's matmul primitive (dnnl_matmul.c), for every
 * plugin whose tensors live in host memory the CPU can address. Plugins route the 16-bit float
 * types here: on CPUs with AMX or AVX512-BF16 oneDNN runs bfloat16 products natively, 5-7x the
 * rate of widening to float32 and calling sgemm (docs/performance.md).
 */
#ifndef RAL_DNNL_MATMUL_H
#define RAL_DNNL_MATMUL_H

#include "dnnl_lib.h"

/* The operands of one call, in this order. */
enum { RAL_DNNL_MM_C, RAL_DNNL_MM_A, RAL_DNNL_MM_B, RAL_DNNL_MM_N_OPERANDS };

/*! C = alpha * (A @ B) + beta * C, accumulated in float32 and rounded once into C's dtype.
 *  t[] describes C, A and B: rank 2 ([M, N] = [M, K] @ [K, N]) or rank 3 (one batch dim first,
 *  equal in all three), any strides oneDNN can address (no stride-0 broadcast), one dtype for
 *  all (float32, bfloat16 or float16); host[] is the host address of each one's first element.
 *  C holds the addend when beta != 0 (beta == 0 ignores C, NaNs included). Runs with an OpenMP
 *  team of `team` threads: DONE; DECLINED (nothing written: oneDNN refused the call or offers
 *  only reference code for it; the caller runs its own GEMM); FAILED (C touched: an error). */
int ral_dnnl_matmul(const ral_tensor* const t[RAL_DNNL_MM_N_OPERANDS], void* const host[RAL_DNNL_MM_N_OPERANDS],
                    double alpha, double beta, int team);

/*! Whether oneDNN runs products of `dtype` natively here (a non-reference primitive for a
 *  small row-major product; probed once per dtype): a caller that must prepare operands for
 *  ral_dnnl_matmul (write an addend into C) asks first. */
int ral_dnnl_matmul_takes(int32_t dtype);

#endif /* RAL_DNNL_MATMUL_H */
