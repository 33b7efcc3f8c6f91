/* call.c -- reading a ral_kernel_call and reporting errors through last_error. */
#include <stdarg.h>
#include <stdio.h>

#define RAL_SDK_IMPLEMENT_ERROR

#include "ocl.h"

ral_status ocl_error(ral_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ral_sdk_vfail(status, fmt, ap);
  va_end(ap);
  return status;
}

ral_status ocl_fail(const ral_kernel_call* c, ral_status status, const char* fmt, ...) {
  char reason[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(reason, sizeof reason, fmt, ap);
  va_end(ap);
  return ocl_error(status, "%s: %s", c && c->op_name ? c->op_name : "?", reason);
}

ral_status ocl_cl_fail(cl_int err, const char* what) {
  ral_status st = err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_HOST_MEMORY ||
                          err == CL_INVALID_BUFFER_SIZE
                      ? RAL_ERROR_OUT_OF_MEMORY
                  : err == CL_OUT_OF_RESOURCES ? RAL_ERROR_KERNEL_FAILED
                                               : RAL_ERROR_INTERNAL;
  return ocl_error(st, "%s failed: %s (%d)", what, ocl_cl_error_name(err), err);
}

const char* ocl_last_error(void) { return ral_sdk_last_error(); }

const char* ocl_dtype_name(int32_t dtype) { return ral_sdk_dtype_name(dtype); }

int ocl_dtype_size(int32_t dtype) {
  static const int sizes[RAL_DTYPE_COUNT] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16};
  return dtype >= 0 && dtype < RAL_DTYPE_COUNT ? sizes[dtype] : 0;
}

int ocl_dtype_is_float(int32_t dtype) {
  return dtype == RAL_DTYPE_FLOAT16 || dtype == RAL_DTYPE_FLOAT32 || dtype == RAL_DTYPE_FLOAT64 ||
         dtype == RAL_DTYPE_BFLOAT16;
}

int64_t ocl_numel(const ral_tensor* t) { return ral_sdk_numel(t); }

int ocl_is_contiguous(const ral_tensor* t) { return ral_sdk_is_contiguous(t); }

int64_t ocl_elem_off(const ral_tensor* t) {
  int es = ocl_dtype_size(t->dtype);
  return es ? (int64_t)(t->byte_offset / (uint64_t)es) : 0;
}

ral_status ocl_check_arity(const ral_kernel_call* c, int n_out, int n_in, int n_scalars) {
  if (c->n_outputs != n_out || c->n_inputs != n_in || c->n_scalars < n_scalars)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                    "expected %d outputs, %d inputs, %d scalars; got %d, %d, %d", n_out, n_in,
                    n_scalars, c->n_outputs, c->n_inputs, c->n_scalars);
  return RAL_OK;
}

ral_status ocl_check_rank(const ral_kernel_call* c) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (t->ndim > OCL_MAXR)
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "tensor %d has rank %d; OpenCL kernels take at most %d",
                      i, t->ndim, OCL_MAXR);
    if (!ocl_absent(t) && t->byte_offset % (uint64_t)(ocl_dtype_size(t->dtype) ? ocl_dtype_size(t->dtype) : 1))
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d: byte offset %llu is not aligned to its %s elements",
                      i, (unsigned long long)t->byte_offset, ocl_dtype_name(t->dtype));
  }
  return RAL_OK;
}

int ocl_scalar_num(const ral_kernel_call* c, int i, double* f, int64_t* v) {
  return ral_sdk_call_scalar_num(c, i, f, v);
}

double ocl_scalar_f(const ral_kernel_call* c, int i, double dflt) {
  double f;
  int64_t v;
  return ocl_scalar_num(c, i, &f, &v) ? f : dflt;
}

int64_t ocl_scalar_i(const ral_kernel_call* c, int i, int64_t dflt) {
  double f;
  int64_t v;
  return ocl_scalar_num(c, i, &f, &v) ? v : dflt;
}

const int64_t* ocl_scalar_list(const ral_kernel_call* c, int i, int* n) {
  return ral_sdk_call_scalar_list(c, i, n);
}

int ocl_wrap_dim(int64_t dim, int ndim) {
  int d;
  return ral_sdk_wrap_dim(dim, ndim, &d) == RAL_OK ? d : -1;
}
