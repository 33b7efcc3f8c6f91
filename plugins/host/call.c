/*
 * call.c -- reading a ral_kernel_call (tensors, tagged scalars) and reporting errors
 * through the thread-local last-error text.
 */
#include <stdarg.h>
#include <stdio.h>

#define RAL_SDK_IMPLEMENT_ERROR

#include "host.h"

ral_status host_error(ral_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ral_sdk_vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

ral_status host_fail(const ral_kernel_call* c, ral_status status, const char* fmt, ...) {
  char reason[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return host_error(status, "%s: %s", c && c->op_name ? c->op_name : "?", reason);
}

const char* host_last_error(void) { return ral_sdk_last_error(); }

const char* host_dtype_name(int32_t dtype) { return ral_sdk_dtype_name(dtype); }

int64_t host_numel(const ral_tensor* t) { return ral_sdk_numel(t); }

int host_is_contiguous(const ral_tensor* t) { return ral_sdk_is_contiguous(t); }

int host_same_shape(const ral_tensor* a, const ral_tensor* b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d]) return 0;
  return 1;
}

int host_is_single_value(const ral_tensor* t) {
  if (host_numel(t) < 1) return 0;
  for (int d = 0; d < t->ndim; d++)
    if (t->sizes[d] > 1 && t->strides[d] != 0) return 0;
  return 1;
}

ral_status host_check_arity(const ral_kernel_call* c, int n_out, int n_in, int n_scalars) {
  if (c->n_outputs != n_out || c->n_inputs != n_in || c->n_scalars < n_scalars)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                     "expected %d outputs, %d inputs, %d scalars; got %d, %d, %d", n_out, n_in,
                     n_scalars, c->n_outputs, c->n_inputs, c->n_scalars);
  return RAL_OK;
}

int host_scalar_num(const ral_kernel_call* c, int i, double* f, int64_t* v) {
  return ral_sdk_call_scalar_num(c, i, f, v);
}

int host_scalar_is_none(const ral_kernel_call* c, int i) {
  return i >= c->n_scalars || c->scalars[i].tag == RAL_SCALAR_NONE;
}

int64_t host_scalar_int(const ral_kernel_call* c, int i, int64_t dflt) {
  double f;
  int64_t v;
  return host_scalar_num(c, i, &f, &v) ? v : dflt;
}

const int64_t* host_scalar_list(const ral_kernel_call* c, int i, int* n) {
  return ral_sdk_call_scalar_list(c, i, n);
}

int host_wrap_dim(int64_t dim, int ndim) {
  int d;
  return ral_sdk_wrap_dim(dim, ndim, &d) == RAL_OK ? d : -1;
}

void host_view_contiguous(host_view* v, void* data, int32_t dtype, int ndim,
                          const int64_t* sizes) {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    v->sizes[d] = sizes[d];
    v->strides[d] = stride;
    stride *= sizes[d];
  }
  v->t = (ral_tensor){data, 0, dtype, ndim, v->sizes, v->strides};
}

void host_view_of(host_view* v, const ral_tensor* t) {
  for (int d = 0; d < t->ndim; d++) {
    v->sizes[d] = t->sizes[d];
    v->strides[d] = t->strides[d];
  }
  v->t = *t;
  v->t.sizes = v->sizes;
  v->t.strides = v->strides;
}

int host_view_expand(host_view* v, const ral_tensor* t, int ndim, const int64_t* sizes) {
  if (t->ndim > ndim) return 0;
  v->t = *t;
  v->t.ndim = ndim;
  v->t.sizes = v->sizes;
  v->t.strides = v->strides;
  for (int d = ndim - 1, s = t->ndim - 1; d >= 0; d--, s--) {
    int64_t n = s >= 0 ? t->sizes[s] : 1;
    if (n != sizes[d] && n != 1) return 0;
    v->sizes[d] = sizes[d];
    v->strides[d] = n == sizes[d] && s >= 0 ? t->strides[s] : 0;
  }
  return 1;
}

ral_status host_check_float32_or_half(const ral_kernel_call* c, int contiguous) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (host_tensor_absent(t)) continue;
    if (t->dtype != RAL_DTYPE_FLOAT32 && t->dtype != RAL_DTYPE_FLOAT16 && t->dtype != RAL_DTYPE_BFLOAT16)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "tensor %d has dtype %s; float32/float16/bfloat16 only", i,
                       host_dtype_name(t->dtype));
    if (contiguous && !host_is_contiguous(t))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d must be contiguous", i);
  }
  return RAL_OK;
}
