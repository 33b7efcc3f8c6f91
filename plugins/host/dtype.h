/*
 * dtype.h -- the single source of truth for dtype dispatch in the host plugin.
 *
 * HOST_DTYPES(X, ...) lists every dtype the plugin computes on, once, as
 *   X(NAME, storage type, compute type, kind, ...)
 * NAME pastes onto RAL_DTYPE_<NAME>, HOST_TO_<NAME>() (storage -> compute) and
 * HOST_FROM_<NAME>() (compute -> storage). kind is kbool, kint or kflt (floating;
 * float16/bfloat16 compute in float). The HOST_FOR_* selectors filter the list by kind so
 * a kernel family can be instantiated for exactly the dtypes it serves.
 * Complex dtypes are storage-only (byte copies), so they are not listed here.
 */
#ifndef HOST_DTYPE_H
#define HOST_DTYPE_H

#include <stdint.h>
#include <string.h>

#include "ral_half.h"
#include "ral_plugin.h"

#define HOST_DTYPES(X, ...)                                \
  X(BOOL, uint8_t, int, kbool, __VA_ARGS__)                    \
  X(UINT8, uint8_t, uint8_t, kint, __VA_ARGS__)               \
  X(INT8, int8_t, int8_t, kint, __VA_ARGS__)                  \
  X(INT16, int16_t, int16_t, kint, __VA_ARGS__)               \
  X(INT32, int32_t, int32_t, kint, __VA_ARGS__)               \
  X(INT64, int64_t, int64_t, kint, __VA_ARGS__)               \
  X(FLOAT16, uint16_t, float, kflt, __VA_ARGS__)              \
  X(BFLOAT16, uint16_t, float, kflt, __VA_ARGS__)             \
  X(FLOAT32, float, float, kflt, __VA_ARGS__)                 \
  X(FLOAT64, double, double, kflt, __VA_ARGS__)

/* Kind selectors: HOST_FOR_<SET>(G, ...) calls G(NAME, ST, CT, ...) for the dtypes of SET. */
#define HOST_SEL_(SET, N, ST, CT, K, G, ...) HOST_SEL_##SET##_##K(G, N, ST, CT, __VA_ARGS__)
#define HOST_EMIT_(G, N, ST, CT, ...) G(N, ST, CT, __VA_ARGS__)
#define HOST_SKIP_(...)
#define HOST_SEL_ALL_kbool HOST_EMIT_
#define HOST_SEL_ALL_kint HOST_EMIT_
#define HOST_SEL_ALL_kflt HOST_EMIT_
#define HOST_SEL_FLT_kbool HOST_SKIP_
#define HOST_SEL_FLT_kint HOST_SKIP_
#define HOST_SEL_FLT_kflt HOST_EMIT_
#define HOST_SEL_INT_kbool HOST_SKIP_
#define HOST_SEL_INT_kint HOST_EMIT_
#define HOST_SEL_INT_kflt HOST_SKIP_
#define HOST_SEL_NUM_kbool HOST_SKIP_
#define HOST_SEL_NUM_kint HOST_EMIT_
#define HOST_SEL_NUM_kflt HOST_EMIT_
#define HOST_SEL_BOOL_kbool HOST_EMIT_
#define HOST_SEL_BOOL_kint HOST_SKIP_
#define HOST_SEL_BOOL_kflt HOST_SKIP_
#define HOST_PICK_ALL(N, ST, CT, K, G, ...) HOST_SEL_(ALL, N, ST, CT, K, G, __VA_ARGS__)
#define HOST_PICK_FLT(N, ST, CT, K, G, ...) HOST_SEL_(FLT, N, ST, CT, K, G, __VA_ARGS__)
#define HOST_PICK_INT(N, ST, CT, K, G, ...) HOST_SEL_(INT, N, ST, CT, K, G, __VA_ARGS__)
#define HOST_PICK_NUM(N, ST, CT, K, G, ...) HOST_SEL_(NUM, N, ST, CT, K, G, __VA_ARGS__)
#define HOST_PICK_BOOL(N, ST, CT, K, G, ...) HOST_SEL_(BOOL, N, ST, CT, K, G, __VA_ARGS__)
/*! every computable dtype */
#define HOST_FOR_ALL(G, ...) HOST_DTYPES(HOST_PICK_ALL, G, __VA_ARGS__)
/*! float32, float64, float16, bfloat16 */
#define HOST_FOR_FLT(G, ...) HOST_DTYPES(HOST_PICK_FLT, G, __VA_ARGS__)
/*! the integer dtypes (not bool) */
#define HOST_FOR_INT(G, ...) HOST_DTYPES(HOST_PICK_INT, G, __VA_ARGS__)
/*! integer and floating dtypes (not bool) */
#define HOST_FOR_NUM(G, ...) HOST_DTYPES(HOST_PICK_NUM, G, __VA_ARGS__)
/*! bool only */
#define HOST_FOR_BOOL(G, ...) HOST_DTYPES(HOST_PICK_BOOL, G, __VA_ARGS__)

/* ---- float16 / bfloat16 <-> float: ral_half.h (shared with the jit's generated kernels) ---- */

/* ---- storage <-> compute conversions, one pair per HOST_DTYPES name ---- */
#define HOST_TO_BOOL(v) ((int)(v))
#define HOST_FROM_BOOL(v) ((uint8_t)((v) != 0))
#define HOST_TO_UINT8(v) (v)
#define HOST_FROM_UINT8(v) ((uint8_t)(v))
#define HOST_TO_INT8(v) (v)
#define HOST_FROM_INT8(v) ((int8_t)(v))
#define HOST_TO_INT16(v) (v)
#define HOST_FROM_INT16(v) ((int16_t)(v))
#define HOST_TO_INT32(v) (v)
#define HOST_FROM_INT32(v) ((int32_t)(v))
#define HOST_TO_INT64(v) (v)
#define HOST_FROM_INT64(v) ((int64_t)(v))
#define HOST_TO_FLOAT16(v) ral_h2f(v)
#define HOST_FROM_FLOAT16(v) ral_f2h(v)
#define HOST_TO_BFLOAT16(v) ral_bf2f(v)
#define HOST_FROM_BFLOAT16(v) ral_f2bf(v)
#define HOST_TO_FLOAT32(v) (v)
#define HOST_FROM_FLOAT32(v) ((float)(v))
#define HOST_TO_FLOAT64(v) (v)
#define HOST_FROM_FLOAT64(v) ((double)(v))

/*! Bytes per element of a ral_dtype code (0 for an unknown code). */
static inline int64_t host_dtype_size(int32_t dtype) {
  static const int8_t sizes[RAL_DTYPE_COUNT] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16};
  return dtype >= 0 && dtype < RAL_DTYPE_COUNT ? sizes[dtype] : 0;
}

/*! 1 for float16/bfloat16/float32/float64. */
static inline int host_dtype_is_float(int32_t dtype) {
  return dtype >= RAL_DTYPE_FLOAT16 && dtype <= RAL_DTYPE_FLOAT64;
}

/*! 1 for dtypes the kernels compute on (everything but complex). */
static inline int host_dtype_is_computable(int32_t dtype) {
  return dtype >= 0 && dtype < RAL_DTYPE_COMPLEX64;
}

/*! Lower-case name for error messages. */
const char* host_dtype_name(int32_t dtype);

#endif /* HOST_DTYPE_H */
