/*
 * host.h -- what the host plugin's source files share: error reporting, scalar
 * argument access, the strided N-d iterator, and the dtype-casting copy used by
 * every kernel that needs to materialise or convert data.
 */
#ifndef HOST_H
#define HOST_H

#include <stdint.h>

#include "dtype.h"
#include "kernels.h"
#include "ral_plugin.h"
/* Long enough for a compiler log; the same in every file of the plugin. */
#define RAL_SDK_ERROR_CAPACITY 4096
#include "ral_plugin_sdk.h"

#define HOST_HIDDEN __attribute__((visibility("hidden")))
/* Hot loops get AVX-512 (x86-64-v4) and AVX2+FMA (x86-64-v3) clones next to the x86-64-v2
 * baseline, picked at load time: two or four times the vector width (and fused polynomials)
 * where the CPU has it, while the library still runs on any x86-64-v2 machine. PyTorch's own
 * CPU kernels use AVX-512 where it exists; without the v4 clone tanh/exp over 4M floats took
 * 2.3x PyTorch's time on one thread here (4.0 vs 1.8 ms), with it 1.3x. */
#define HOST_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

/* Elementwise work below this many elements stays on the calling thread: an OpenMP
 * fork costs microseconds, more than a small op itself. */
#define HOST_GRAIN 32768
/* Same, for ops whose per-element cost is a transcendental (exp, erf, tanh...). */
#define HOST_GRAIN_HEAVY 4096

/*! Loads OpenBLAS with a kernel set matching this CPU (blas.c); 0 when it cannot. */
int host_blas_load(void);
/*! Row-major float GEMM on the calling thread (blas.c): C = alpha op(A) op(B) + beta C, op
 *  transposing when trans_a / trans_b is set; lda, ldb, ldc are row strides in elements. */
void host_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc);
/* Row-major y = alpha * op(A) x + beta * y, A m x n with leading dimension lda, unit-stride
 * x and y; op(A) = A^T when trans. On the calling thread (blas.c). */
void host_sgemv(int trans, int m, int n, float alpha, const float* a, int lda, const float* x, float beta, float* y);

/* ---------------------------------------------------------------- errors */
/*! Set this thread's last-error text (printf-style) and return `status`. */
ral_status host_error(ral_status status, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*! Kernel-side failure: the reason, prefixed by the op name. Returns `status`. */
ral_status host_fail(const ral_kernel_call* c, ral_status status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*! This thread's last-error text. */
const char* host_last_error(void);
/*! Name of a built-in kernel, or NULL for a function we do not know (error text only). */
const char* host_kernel_name(ral_kernel_fn fn);

/* ---------------------------------------------------------------- call access */
static inline const ral_tensor* host_out(const ral_kernel_call* c, int i) { return &c->tensors[i]; }
static inline const ral_tensor* host_in(const ral_kernel_call* c, int i) {
  return &c->tensors[c->n_outputs + i];
}
static inline int host_tensor_absent(const ral_tensor* t) { return t->dtype == RAL_DTYPE_COUNT; }
static inline char* host_ptr(const ral_tensor* t) { return (char*)t->data + t->byte_offset; }
int64_t host_numel(const ral_tensor* t);
int host_is_contiguous(const ral_tensor* t);
int host_same_shape(const ral_tensor* a, const ral_tensor* b);
/*! 1 if every element of t is one value: numel 1, or a broadcast (all-0-stride) scalar. */
int host_is_single_value(const ral_tensor* t);

/*! Check the call has n_outputs/n_inputs/at-least n_scalars as the kernel expects. */
ral_status host_check_arity(const ral_kernel_call* c, int n_out, int n_in, int n_scalars);
/*! Every present tensor is float32/float16/bfloat16 (and contiguous when asked). */
ral_status host_check_float32_or_half(const ral_kernel_call* c, int contiguous);
/*! Numeric scalar i (INT, FLOAT or BOOL) as double and int64; 0 if absent or not numeric. */
int host_scalar_num(const ral_kernel_call* c, int i, double* f, int64_t* v);
/*! 1 if scalar i is missing or NONE. */
int host_scalar_is_none(const ral_kernel_call* c, int i);
/*! Integer scalar i, or `dflt` if absent/NONE. */
int64_t host_scalar_int(const ral_kernel_call* c, int i, int64_t dflt);
/*! INT_LIST scalar i (count in *n), or NULL with *n = 0 for NONE or absent. */
const int64_t* host_scalar_list(const ral_kernel_call* c, int i, int* n);
/*! Wrap a possibly negative dim into [0, ndim); -1 if out of range. */
int host_wrap_dim(int64_t dim, int ndim);

/* ---------------------------------------------------------------- iterator */
#define HOST_MAX_OPERANDS 5

/*! Process n elements; p[k] is operand k's first element, s[k] its stride in bytes. */
typedef void (*host_row_fn)(int64_t n, char* const* p, const int64_t* s, const void* ctx);

/*! Operands of one shape, their dims coalesced and ordered by the first operand's
 *  strides (dim 0 innermost), strides in bytes. */
typedef struct {
  int nt, ndim;
  int64_t numel;
  int64_t sizes[RAL_MAX_RANK];
  int64_t strides[HOST_MAX_OPERANDS][RAL_MAX_RANK];
  char* base[HOST_MAX_OPERANDS];
} host_iter;

/*! Build an iterator over tensors that all have the shape of ts[0]. */
void host_iter_init(host_iter* it, const ral_tensor* const* ts, int nt);
/*! Run fn over every element, split across OpenMP threads when numel > grain. */
void host_iter_run(const host_iter* it, host_row_fn fn, const void* ctx, int64_t grain);

/* ---------------------------------------------------------------- copies */
/*! dst[...] = (dst dtype) src[...] for tensors of one shape; any strides, any dtypes. */
ral_status host_copy(const ral_tensor* dst, const ral_tensor* src);
/*! Fill every element of dst with a value given as double (floating dst) or int64. */
void host_fill(const ral_tensor* dst, double f, int64_t i);
/*! Read element 0 of a tensor as double and int64. */
void host_read_scalar(const ral_tensor* t, double* f, int64_t* i);
/*! Write one value (double for floating dtypes, int64 otherwise) at p. */
void host_store_value(char* p, int32_t dtype, double f, int64_t i);
/*! n elements at src (stride in bytes, any dtype) into a float (pivot FLOAT32) or double
 *  (pivot FLOAT64) array, and back. */
void host_load_row(void* dst, int32_t pivot, const char* src, int64_t stride, int32_t dtype,
                   int64_t n);
void host_store_row(char* dst, int64_t stride, int32_t dtype, const void* src, int32_t pivot,
                    int64_t n);
/*! One element as double. */
double host_load_f64(const char* p, int32_t dtype);
/*! Contiguous conversion of n elements between float and a dtype (for scratch rows). */
void host_load_float(float* dst, const char* src, int32_t dtype, int64_t n);
void host_store_float(char* dst, int32_t dtype, const float* src, int64_t n);

/*! A contiguous tensor descriptor over caller storage (sizes/strides arrays included). */
typedef struct {
  ral_tensor t;
  int64_t sizes[RAL_MAX_RANK];
  int64_t strides[RAL_MAX_RANK];
} host_view;
/*! A contiguous view of `data` with the given shape and dtype. */
void host_view_contiguous(host_view* v, void* data, int32_t dtype, int ndim, const int64_t* sizes);
/*! t broadcast (numpy rules, stride 0) to the given shape; 0 if it does not broadcast. */
int host_view_expand(host_view* v, const ral_tensor* t, int ndim, const int64_t* sizes);
/*! A copy of t's descriptor into owned arrays (to be reshaped/offset freely). */
void host_view_of(host_view* v, const ral_tensor* t);

#endif /* HOST_H */
