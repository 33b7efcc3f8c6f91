/*
 * nn.c -- softmax / log_softmax (+ backward, _safe_softmax), layer norm (+ backward) and
 * nll_loss (+ backward). The row math lives in nn_impl.h, instantiated here for float
 * and double; the manifest asks for contiguous operands for all of these.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <tgmath.h>

#include "fastmath.h"
#include "host.h"
#include "pool.h"

typedef enum {
  NN_SOFTMAX,
  NN_LOG_SOFTMAX,
  NN_SAFE_SOFTMAX,
  NN_SOFTMAX_BW,
  NN_LOG_SOFTMAX_BW
} nn_kind;

#define T float
#define TDT RAL_DTYPE_FLOAT32
#define NN(name) name##_f
#include "nn_impl.h"
#undef T
#undef TDT
#undef NN
#define T double
#define TDT RAL_DTYPE_FLOAT64
#define NN(name) name##_d
#include "nn_impl.h"
#undef T
#undef TDT
#undef NN

/* float64 anywhere => compute in double, else float. */
static int wants_double(const ral_kernel_call* c) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++)
    if (c->tensors[i].dtype == RAL_DTYPE_FLOAT64) return 1;
  return 0;
}

static ral_status check_float_tensors(const ral_kernel_call* c) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (!host_tensor_absent(t) && !host_dtype_is_float(t->dtype))
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "tensor %d has dtype %s, expected floating", i,
                       host_dtype_name(t->dtype));
    if (!host_tensor_absent(t) && !host_is_contiguous(t))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d must be contiguous", i);
  }
  return RAL_OK;
}

/* ---------------------------------------------------------------- softmax family */
static ral_status softmax_kernel(const ral_kernel_call* c, int n_in, nn_kind kind) {
  ral_status st = host_check_arity(c, 1, n_in, 1);
  if (st == RAL_OK) st = check_float_tensors(c);
  if (st != RAL_OK) return st;
  const ral_tensor *out = host_out(c, 0), *x = host_in(c, 0), *y = n_in > 1 ? host_in(c, 1) : NULL;
  int dim = host_wrap_dim(host_scalar_int(c, 0, -1), x->ndim);
  if (dim < 0 || !host_same_shape(out, x) || (y && !host_same_shape(y, x)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim or mismatched shapes");
  st = wants_double(c) ? softmax_run_d(out, x, y, x->ndim ? dim : 0, kind)
                       : softmax_run_f(out, x, y, x->ndim ? dim : 0, kind);
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

ral_status host_softmax(const ral_kernel_call* c) { return softmax_kernel(c, 1, NN_SOFTMAX); }
ral_status host_log_softmax(const ral_kernel_call* c) { return softmax_kernel(c, 1, NN_LOG_SOFTMAX); }
ral_status host_safe_softmax(const ral_kernel_call* c) { return softmax_kernel(c, 1, NN_SAFE_SOFTMAX); }
ral_status host_softmax_backward(const ral_kernel_call* c) {
  return softmax_kernel(c, 2, NN_SOFTMAX_BW);
}
ral_status host_log_softmax_backward(const ral_kernel_call* c) {
  return softmax_kernel(c, 2, NN_LOG_SOFTMAX_BW);
}

/* ---------------------------------------------------------------- layer norm */
/* Rows M and row length N from normalized_shape (scalar 0), checked against x. */
static ral_status norm_rows(const ral_kernel_call* c, const ral_tensor* x, int64_t* M, int64_t* N) {
  int n;
  const int64_t* shape = host_scalar_list(c, 0, &n);
  if (n > x->ndim) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "normalized_shape too long");
  *N = 1;
  for (int k = 0; k < n; k++) {
    if (shape[k] != x->sizes[x->ndim - n + k])
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "normalized_shape does not match input");
    *N *= shape[k];
  }
  *M = *N ? host_numel(x) / *N : 0;
  return RAL_OK;
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd) */
ral_status host_layer_norm(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 3, 3, 2);
  if (st == RAL_OK) st = check_float_tensors(c);
  if (st != RAL_OK) return st;
  const ral_tensor* x = host_in(c, 0);
  const ral_tensor* w = host_tensor_absent(host_in(c, 1)) ? NULL : host_in(c, 1);
  const ral_tensor* b = host_tensor_absent(host_in(c, 2)) ? NULL : host_in(c, 2);
  int64_t M, N;
  if ((st = norm_rows(c, x, &M, &N)) != RAL_OK) return st;
  if ((w && host_numel(w) != N) || (b && host_numel(b) != N) || host_numel(host_out(c, 0)) != M * N ||
      host_numel(host_out(c, 1)) != M || host_numel(host_out(c, 2)) != M)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "weight/bias/output sizes do not match");
  double eps = 1e-5;
  int64_t unused;
  host_scalar_num(c, 1, &eps, &unused);
  const ral_tensor* o[3] = {host_out(c, 0), host_out(c, 1), host_out(c, 2)};
  if (M == 0 || N == 0) return RAL_OK;
  st = wants_double(c) ? layer_norm_run_d(o, x, w, b, M, N, eps)
                       : layer_norm_run_f(o, x, w, b, M, N, eps);
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
 * output_mask) -> (grad_input, grad_weight, grad_bias) */
ral_status host_layer_norm_backward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 3, 6, 1);
  if (st == RAL_OK) st = check_float_tensors(c);
  if (st != RAL_OK) return st;
  const ral_tensor *g = host_in(c, 0), *x = host_in(c, 1), *mean = host_in(c, 2), *rstd = host_in(c, 3);
  const ral_tensor* w = host_tensor_absent(host_in(c, 4)) ? NULL : host_in(c, 4);
  int64_t M, N;
  if ((st = norm_rows(c, x, &M, &N)) != RAL_OK) return st;
  int nmask;
  const int64_t* mask = host_scalar_list(c, 1, &nmask);
  const ral_tensor* o[3];
  for (int k = 0; k < 3; k++) {
    const ral_tensor* t = host_out(c, k);
    o[k] = host_tensor_absent(t) || (nmask == 3 && !mask[k]) ? NULL : t;
    if (o[k] && host_numel(o[k]) != (k ? N : M * N))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output %d has the wrong size", k);
  }
  if (!host_same_shape(g, x) || host_numel(mean) != M || host_numel(rstd) != M ||
      (w && host_numel(w) != N))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input sizes do not match");
  if (M == 0 || N == 0) {
    for (int k = 1; k < 3; k++)
      if (o[k]) host_fill(o[k], 0, 0);
    return RAL_OK;
  }
  st = wants_double(c) ? layer_norm_bw_run_d(o, g, x, mean, rstd, w, M, N)
                       : layer_norm_bw_run_f(o, g, x, mean, rstd, w, M, N);
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

/* ---------------------------------------------------------------- nll_loss */
enum { RED_NONE = 0, RED_MEAN = 1, RED_SUM = 2 };

typedef struct {
  const ral_tensor *self, *target, *weight;
  int64_t N, C, reduction, ignore;
} nll_args;

/* inputs: self [N, C] or [C], target [N] or [], weight? ; scalars: reduction, ignore_index */
static ral_status nll_parse(const ral_kernel_call* c, int self_at, nll_args* a) {
  a->self = host_in(c, self_at);
  a->target = host_in(c, self_at + 1);
  a->weight = host_tensor_absent(host_in(c, self_at + 2)) ? NULL : host_in(c, self_at + 2);
  a->reduction = host_scalar_int(c, 0, RED_MEAN);
  a->ignore = host_scalar_int(c, 1, -100);
  if (a->self->ndim < 1 || a->self->ndim > 2 || !host_dtype_is_float(a->self->dtype))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "self must be a 1-d or 2-d floating tensor");
  if (a->target->dtype != RAL_DTYPE_INT64 && a->target->dtype != RAL_DTYPE_INT32)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "target must be int64");
  a->N = a->self->ndim == 2 ? a->self->sizes[0] : 1;
  a->C = a->self->sizes[a->self->ndim - 1];
  if (host_numel(a->target) != a->N || (a->weight && host_numel(a->weight) != a->C))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "target/weight sizes do not match self");
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++)
    if (!host_tensor_absent(&c->tensors[i]) && !host_is_contiguous(&c->tensors[i]))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d must be contiguous", i);
  return RAL_OK;
}

/* Class of sample i, its weight; -1 for an ignored sample, -2 when out of range. */
static int64_t nll_class(const nll_args* a, int64_t i, double* w) {
  const char* tp = host_ptr(a->target);
  int64_t t = a->target->dtype == RAL_DTYPE_INT64 ? ((const int64_t*)tp)[i] : ((const int32_t*)tp)[i];
  if (t == a->ignore) return -1;
  if (t < 0 || t >= a->C) return -2;
  int64_t ew = host_dtype_size(a->weight ? a->weight->dtype : 0);
  *w = a->weight ? host_load_f64(host_ptr(a->weight) + t * ew, a->weight->dtype) : 1.0;
  return t;
}

static ral_status nll_bad_target(const ral_kernel_call* c, const nll_args* a, int64_t i) {
  const char* tp = host_ptr(a->target);
  int64_t t = a->target->dtype == RAL_DTYPE_INT64 ? ((const int64_t*)tp)[i] : ((const int32_t*)tp)[i];
  return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "target %lld is out of bounds for %lld classes",
                   (long long)t, (long long)a->C);
}

/* nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight) */
ral_status host_nll_loss_forward(const ral_kernel_call* c) {
  nll_args a;
  ral_status st = host_check_arity(c, 2, 3, 2);
  if (st == RAL_OK) st = nll_parse(c, 0, &a);
  if (st != RAL_OK) return st;
  const ral_tensor *out = host_out(c, 0), *tw = host_out(c, 1);
  int64_t es = host_dtype_size(a.self->dtype), eo = host_dtype_size(out->dtype);
  double total = 0, wsum = 0;
  for (int64_t i = 0; i < a.N; i++) {
    double w = 0;
    int64_t t = nll_class(&a, i, &w);
    if (t == -2) return nll_bad_target(c, &a, i);
    double v = t < 0 ? 0 : -w * host_load_f64(host_ptr(a.self) + (i * a.C + t) * es, a.self->dtype);
    if (a.reduction == RED_NONE) host_store_value(host_ptr(out) + i * eo, out->dtype, v, 0);
    total += v;
    if (t >= 0) wsum += w;
  }
  if (a.reduction != RED_NONE)
    host_store_value(host_ptr(out), out->dtype, a.reduction == RED_MEAN ? total / wsum : total, 0);
  host_store_value(host_ptr(tw), tw->dtype, a.reduction == RED_NONE ? 0.0 : wsum, 0);
  return RAL_OK;
}

/* nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index,
 * total_weight) -> grad_input */
ral_status host_nll_loss_backward(const ral_kernel_call* c) {
  nll_args a;
  ral_status st = host_check_arity(c, 1, 5, 2);
  if (st == RAL_OK) st = nll_parse(c, 1, &a);
  if (st != RAL_OK) return st;
  const ral_tensor *gi = host_out(c, 0), *go = host_in(c, 0), *tw = host_in(c, 4);
  if (!host_same_shape(gi, a.self))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input must have self's shape");
  host_fill(gi, 0, 0);
  int64_t eg = host_dtype_size(go->dtype), ei = host_dtype_size(gi->dtype);
  double scale = host_load_f64(host_ptr(go), go->dtype);
  if (a.reduction == RED_MEAN) scale /= host_load_f64(host_ptr(tw), tw->dtype);
  for (int64_t i = 0; i < a.N; i++) {
    double w = 0;
    int64_t t = nll_class(&a, i, &w);
    if (t == -2) return nll_bad_target(c, &a, i);
    if (t < 0) continue;
    double g = a.reduction == RED_NONE ? host_load_f64(host_ptr(go) + i * eg, go->dtype) : scale;
    host_store_value(host_ptr(gi) + (i * a.C + t) * ei, gi->dtype, -w * g, 0);
  }
  return RAL_OK;
}
