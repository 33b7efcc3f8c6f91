/*
 * ral_plugin_sdk.h -- optional, header-only helpers for plugin authors.
 *
 * Everything here is static inline over ral_plugin.h: it adds no symbol, no data layout and
 * no ABI of its own, so a plugin that uses it loads exactly like one that does not, and the
 * frozen ABI is untouched. Plugins may copy or ignore it. What it saves a plugin from writing
 * again: the thread-local error buffer, element counts and contiguity checks, typed data
 * pointers, scalar accessors, dimension wrapping, and the struct_size rule.
 *
 * Use: in exactly one translation unit of the plugin,
 *     #define RAL_SDK_IMPLEMENT_ERROR
 *     #include "ral_plugin_sdk.h"
 * and in the others just include it. Return ral_sdk_last_error from the api table's
 * last_error entry.
 */
#ifndef RAL_PLUGIN_SDK_H_
#define RAL_PLUGIN_SDK_H_

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ral_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief Capacity of the thread-local error message (bytes, NUL included). A plugin that
 *  reports long texts (compiler logs) defines a larger value before including this header,
 *  the same in every translation unit. */
#ifndef RAL_SDK_ERROR_CAPACITY
#define RAL_SDK_ERROR_CAPACITY 512
#endif

/*! \brief The plugin's thread-local last-error buffer (defined by RAL_SDK_IMPLEMENT_ERROR). */
extern _Thread_local char ral_sdk_error[RAL_SDK_ERROR_CAPACITY];

#ifdef RAL_SDK_IMPLEMENT_ERROR
_Thread_local char ral_sdk_error[RAL_SDK_ERROR_CAPACITY];
#endif

/*! \brief ral_sdk_fail with a va_list, for a plugin's own variadic error helpers. */
static inline ral_status ral_sdk_vfail(ral_status status, const char* fmt, va_list ap) {
  vsnprintf(ral_sdk_error, sizeof ral_sdk_error, fmt, ap);
  return status;
}

/*!
 * \brief Record a printf-style message for this thread and return `status`.
 * \param status the status the caller will return (never RAL_OK).
 * \param fmt printf format; name the op (call->op_name) and the reason.
 * \return `status`, so `return ral_sdk_fail(RAL_ERROR_..., "...")` reads naturally.
 */
static inline ral_status ral_sdk_fail(ral_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ral_sdk_vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

/*! \brief The api table's last_error entry: this thread's last message ("" if none). */
static inline const char* ral_sdk_last_error(void) { return ral_sdk_error; }

/*!
 * \brief Fill a caller-provided struct the ABI way: write only the fields both sides know.
 * The caller sets struct_size to the size it knows; the plugin copies n = min(that, its
 * own sizeof) bytes of its filled copy and sets struct_size to n, telling the caller how
 * much was written (an older caller gets a prefix, a newer one keeps its zero-filled tail).
 * \param dst the caller's struct (its first field is uint32_t struct_size).
 * \param src the plugin's fully filled copy.
 * \param src_size sizeof the plugin's copy.
 */
static inline void ral_sdk_fill_struct(void* dst, const void* src, uint32_t src_size) {
  uint32_t dst_size;
  memcpy(&dst_size, dst, sizeof dst_size);
  uint32_t n = dst_size < src_size ? dst_size : src_size;
  memcpy(dst, src, n);
  memcpy(dst, &n, sizeof n);
}

/*! \brief The ABI name of a dtype code ("float32", ...), or "absent" (RAL_DTYPE_COUNT). */
static inline const char* ral_sdk_dtype_name(int32_t dtype) {
  static const char* const names[RAL_DTYPE_COUNT] = {
      "bool",    "uint8",    "int8",    "int16",   "int32",     "int64",
      "float16", "bfloat16", "float32", "float64", "complex64", "complex128"};
  return dtype >= 0 && dtype < RAL_DTYPE_COUNT ? names[dtype] : "absent";
}

/*! \brief Number of elements of a tensor descriptor (1 for rank 0). */
static inline int64_t ral_sdk_numel(const ral_tensor* t) {
  int64_t n = 1;
  for (int k = 0; k < t->ndim; k++) n *= t->sizes[k];
  return n;
}

/*! \brief 1 if the descriptor is row-major contiguous (size-1 dims may have any stride). */
static inline int ral_sdk_is_contiguous(const ral_tensor* t) {
  int64_t expected = 1;
  for (int k = t->ndim - 1; k >= 0; k--) {
    if (t->sizes[k] != 1 && t->strides[k] != expected) return 0;
    expected *= t->sizes[k];
  }
  return 1;
}

/*! \brief Address of element 0 of a host-addressable tensor (data + byte_offset). */
static inline void* ral_sdk_data(const ral_tensor* t) { return (char*)t->data + t->byte_offset; }

/*!
 * \brief A numeric scalar as double.
 * \param s the scalar (INT, BOOL or FLOAT; anything else yields `fallback`).
 * \param fallback value for NONE and non-numeric tags.
 */
static inline double ral_sdk_scalar_f64(const ral_scalar* s, double fallback) {
  if (s->tag == RAL_SCALAR_INT || s->tag == RAL_SCALAR_BOOL) return (double)s->v.i;
  if (s->tag == RAL_SCALAR_FLOAT) return s->v.f;
  return fallback;
}

/*! \brief A numeric scalar as int64 (FLOAT is truncated); `fallback` for other tags. */
static inline int64_t ral_sdk_scalar_i64(const ral_scalar* s, int64_t fallback) {
  if (s->tag == RAL_SCALAR_INT || s->tag == RAL_SCALAR_BOOL || s->tag == RAL_SCALAR_DTYPE) return s->v.i;
  if (s->tag == RAL_SCALAR_FLOAT) return (int64_t)s->v.f;
  return fallback;
}

/*!
 * \brief Scalar `i` of a call as both double and int64, the way aten ops read a Scalar.
 * \param c the call; `i` may be past `c->n_scalars` (the op's trailing defaults).
 * \param f,v the value (FLOAT truncates into `v`).
 * \return 1 for an INT, BOOL or FLOAT scalar; 0 for NONE, a list, a dtype or a missing index.
 */
static inline int ral_sdk_call_scalar_num(const ral_kernel_call* c, int i, double* f, int64_t* v) {
  if (i >= c->n_scalars) return 0;
  const ral_scalar* s = &c->scalars[i];
  if (s->tag == RAL_SCALAR_INT || s->tag == RAL_SCALAR_BOOL) {
    *f = (double)s->v.i;
    *v = s->v.i;
    return 1;
  }
  if (s->tag != RAL_SCALAR_FLOAT) return 0;
  *f = s->v.f;
  *v = (int64_t)s->v.f;
  return 1;
}

/*!
 * \brief Scalar `i` of a call as an int list (`int[2] stride`, `int[] dims`).
 * \param n set to the list's length (0 when absent).
 * \return the elements; a bare INT counts as a one-element list, as aten accepts `int[1]`
 *   given as an int; NULL for other tags and missing indices.
 */
static inline const int64_t* ral_sdk_call_scalar_list(const ral_kernel_call* c, int i, int* n) {
  *n = 0;
  if (i >= c->n_scalars) return NULL;
  const ral_scalar* s = &c->scalars[i];
  if (s->tag == RAL_SCALAR_INT) {
    *n = 1;
    return &s->v.i;
  }
  if (s->tag != RAL_SCALAR_INT_LIST) return NULL;
  *n = s->count;
  return s->v.list;
}

/*!
 * \brief Convert an integer Scalar to an integer tensor's element type as PyTorch does when
 * an op takes a Scalar in the tensor's dtype (clamp's bounds, fill's value): values that
 * overflow the type are refused, and a negative value for an unsigned type wraps
 * (uint8 accepts -255..255; -3 becomes 253), as c10::checked_convert does.
 * \param v the scalar as the op received it.
 * \param dtype an integer or bool RAL_DTYPE_*; other dtypes leave v unchanged.
 * \param out the value in that type, sign-extended (or zero-extended) to int64.
 * \return 1 when converted, 0 when v overflows the type (the caller fails the call with
 *   "value cannot be converted to type <name> without overflow").
 */
static inline int ral_sdk_int_to_dtype(int64_t v, int32_t dtype, int64_t* out) {
  int64_t lo, hi;
  switch (dtype) {
    case RAL_DTYPE_BOOL: *out = v != 0; return 1;
    case RAL_DTYPE_UINT8: lo = -255, hi = 255; break;
    case RAL_DTYPE_INT8: lo = INT8_MIN, hi = INT8_MAX; break;
    case RAL_DTYPE_INT16: lo = INT16_MIN, hi = INT16_MAX; break;
    case RAL_DTYPE_INT32: lo = INT32_MIN, hi = INT32_MAX; break;
    default: *out = v; return 1;
  }
  if (v < lo || v > hi) return 0;
  *out = dtype == RAL_DTYPE_UINT8 ? (int64_t)(uint8_t)v : v;
  return 1;
}

/*!
 * \brief Wrap a possibly negative dimension index like PyTorch (dim -1 = last).
 * \param dim the index as the op received it.
 * \param ndim the tensor's rank (a rank-0 tensor accepts dims -1 and 0).
 * \param out the wrapped index in [0, max(ndim, 1)).
 * \return RAL_OK, or RAL_ERROR_INVALID_ARGUMENT (the caller adds the op name to the message).
 */
static inline ral_status ral_sdk_wrap_dim(int64_t dim, int ndim, int* out) {
  int n = ndim > 0 ? ndim : 1;
  if (dim < -n || dim >= n) return RAL_ERROR_INVALID_ARGUMENT;
  *out = (int)(dim < 0 ? dim + n : dim);
  return RAL_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* RAL_PLUGIN_SDK_H_ */
