/*
 * bn.c -- native_batch_norm and native_batch_norm_backward over contiguous [N, C, *]
 * operands (the manifest asks for contiguous ones), float32, float16 and bfloat16 (read and
 * written through float rows; per-channel tensors may be float32 or the input's dtype, as
 * the vendor tier types save_mean/save_invstd like CPU: tiers/vendor.py _bn_stat_spec);
 * statistics in double. One pool task per channel, so every
 * channel's sums run in one fixed order whatever the thread budget.
 */
#include <math.h>
#include <stdlib.h>

#include "host.h"
#include "pool.h"

typedef struct {
  const ral_tensor *x, *g, *w, *b, *rm, *rv, *mean, *invstd;
  const ral_tensor *out, *o_mean, *o_invstd, *gi, *gw, *gb;
  int64_t N, C, S;
  int training;
  double momentum, eps;
  int failed;
} bn_job;

static const ral_tensor* opt(const ral_tensor* t) { return host_tensor_absent(t) ? NULL : t; }

static double ld(const ral_tensor* t, int64_t i) {
  return host_load_f64(host_ptr(t) + i * host_dtype_size(t->dtype), t->dtype);
}

static void st(const ral_tensor* t, int64_t i, double v) {
  if (t && host_numel(t) > i) host_store_value(host_ptr(t) + i * host_dtype_size(t->dtype), t->dtype, v, 0);
}

/* Row (n, c) of a contiguous [N, C, S] tensor, as float. */
static void row_in(const ral_tensor* t, int64_t n, int64_t c, int64_t C, int64_t S, float* dst) {
  host_load_float(dst, host_ptr(t) + (n * C + c) * S * host_dtype_size(t->dtype), t->dtype, S);
}

static void row_out(const ral_tensor* t, int64_t n, int64_t c, int64_t C, int64_t S, const float* src) {
  host_store_float(host_ptr(t) + (n * C + c) * S * host_dtype_size(t->dtype), t->dtype, src, S);
}

/* The channel's mean and 1/sqrt(var + eps): batch statistics (training) or running ones. */
static void channel_stats(const bn_job* j, int64_t c, float* row, double* mean, double* invstd, double* var) {
  if (!j->training) {
    *mean = j->rm ? ld(j->rm, c) : 0.0;
    *var = j->rv ? ld(j->rv, c) : 1.0;
    *invstd = 1.0 / sqrt(*var + j->eps);
    return;
  }
  double s = 0, ss = 0;
  for (int64_t n = 0; n < j->N; n++) {
    row_in(j->x, n, c, j->C, j->S, row);
    for (int64_t i = 0; i < j->S; i++) s += row[i];
  }
  double cnt = (double)(j->N * j->S);
  *mean = cnt > 0 ? s / cnt : 0.0;
  for (int64_t n = 0; n < j->N; n++) { /* two passes: no cancellation in E[x^2] - E[x]^2 */
    row_in(j->x, n, c, j->C, j->S, row);
    for (int64_t i = 0; i < j->S; i++) ss += (row[i] - *mean) * (row[i] - *mean);
  }
  *var = cnt > 0 ? ss / cnt : 0.0;
  *invstd = 1.0 / sqrt(*var + j->eps);
}

static void forward_channels(int64_t c0, int64_t c1, void* arg) {
  bn_job* j = arg;
  float* row = malloc((size_t)(j->S ? j->S : 1) * sizeof(float));
  if (!row) {
    j->failed = 1;
    return;
  }
  for (int64_t c = c0; c < c1; c++) {
    double mean, invstd, var;
    channel_stats(j, c, row, &mean, &invstd, &var);
    double scale = (j->w ? ld(j->w, c) : 1.0) * invstd, shift = (j->b ? ld(j->b, c) : 0.0) - mean * scale;
    for (int64_t n = 0; n < j->N; n++) {
      row_in(j->x, n, c, j->C, j->S, row);
      for (int64_t i = 0; i < j->S; i++) row[i] = (float)(row[i] * scale + shift);
      row_out(j->out, n, c, j->C, j->S, row);
    }
    if (j->training) {
      st(j->o_mean, c, mean);
      st(j->o_invstd, c, invstd);
      double cnt = (double)(j->N * j->S), m = j->momentum;
      if (j->rm) st(j->rm, c, (1 - m) * ld(j->rm, c) + m * mean);
      if (j->rv) st(j->rv, c, (1 - m) * ld(j->rv, c) + m * (cnt > 1 ? var * cnt / (cnt - 1) : var));
    }
  }
  free(row);
}

static ral_status check(const ral_kernel_call* c, const ral_tensor* x) {
  ral_status s = host_check_float32_or_half(c, 1);
  if (s != RAL_OK) return s;
  if (x->ndim < 2) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input must have a channel dimension");
  return RAL_OK;
}

static void shape_of(bn_job* j, const ral_tensor* x) {
  j->N = x->sizes[0];
  j->C = x->sizes[1];
  j->S = 1;
  for (int d = 2; d < x->ndim; d++) j->S *= x->sizes[d];
}

static ral_status per_channel_ok(const ral_kernel_call* c, const bn_job* j, const ral_tensor* const* ts, int n) {
  for (int k = 0; k < n; k++)
    if (ts[k] && host_numel(ts[k]) != j->C)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "a per-channel tensor has %lld elements, expected %lld",
                       (long long)host_numel(ts[k]), (long long)j->C);
  return RAL_OK;
}

/* native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum,
 * eps) -> (out, save_mean, save_invstd); running stats are updated in place in training. */
ral_status host_batch_norm(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 3, 5, 3);
  if (s != RAL_OK) return s;
  bn_job j = {.x = host_in(c, 0), .w = opt(host_in(c, 1)), .b = opt(host_in(c, 2)), .rm = opt(host_in(c, 3)),
              .rv = opt(host_in(c, 4)), .out = host_out(c, 0), .o_mean = host_out(c, 1), .o_invstd = host_out(c, 2)};
  if ((s = check(c, j.x)) != RAL_OK) return s;
  shape_of(&j, j.x);
  const ral_tensor* pc[] = {j.w, j.b, j.rm, j.rv};
  if ((s = per_channel_ok(c, &j, pc, 4)) != RAL_OK) return s;
  if (!host_same_shape(j.out, j.x)) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output shape differs from input");
  int64_t unused;
  j.training = (int)host_scalar_int(c, 0, 1);
  j.momentum = 0.1;
  j.eps = 1e-5;
  host_scalar_num(c, 1, &j.momentum, &unused);
  host_scalar_num(c, 2, &j.eps, &unused);
  if (!j.training && (!j.rm || !j.rv))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "running_mean and running_var are needed in eval mode");
  host_parallel_for(j.C, 1, forward_channels, &j);
  return j.failed ? host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a row") : RAL_OK;
}

static void backward_channels(int64_t c0, int64_t c1, void* arg) {
  bn_job* j = arg;
  float* xr = malloc((size_t)(j->S ? j->S : 1) * sizeof(float));
  float* gr = malloc((size_t)(j->S ? j->S : 1) * sizeof(float));
  if (!xr || !gr) {
    j->failed = 1;
  } else {
    for (int64_t c = c0; c < c1; c++) {
      double mean, invstd;
      if (j->training) {
        mean = ld(j->mean, c);
        invstd = ld(j->invstd, c);
      } else {
        mean = j->rm ? ld(j->rm, c) : 0.0;
        invstd = 1.0 / sqrt((j->rv ? ld(j->rv, c) : 1.0) + j->eps);
      }
      double sg = 0, sgx = 0; /* sum of g, sum of g * xhat */
      for (int64_t n = 0; n < j->N; n++) {
        row_in(j->x, n, c, j->C, j->S, xr);
        row_in(j->g, n, c, j->C, j->S, gr);
        for (int64_t i = 0; i < j->S; i++) {
          sg += gr[i];
          sgx += gr[i] * (xr[i] - mean) * invstd;
        }
      }
      st(j->gw, c, sgx);
      st(j->gb, c, sg);
      if (!j->gi) continue;
      double w = j->w ? ld(j->w, c) : 1.0, cnt = (double)(j->N * j->S);
      double mg = j->training && cnt > 0 ? sg / cnt : 0.0, mgx = j->training && cnt > 0 ? sgx / cnt : 0.0;
      for (int64_t n = 0; n < j->N; n++) {
        row_in(j->x, n, c, j->C, j->S, xr);
        row_in(j->g, n, c, j->C, j->S, gr);
        for (int64_t i = 0; i < j->S; i++) {
          double xhat = (xr[i] - mean) * invstd;
          xr[i] = (float)(w * invstd * (gr[i] - mg - xhat * mgx));
        }
        row_out(j->gi, n, c, j->C, j->S, xr);
      }
    }
  }
  free(xr);
  free(gr);
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
 * save_mean?, save_invstd?, train, eps, output_mask) -> (grad_input, grad_weight,
 * grad_bias); an output the mask leaves out arrives absent. */
ral_status host_batch_norm_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 3, 7, 3);
  if (s != RAL_OK) return s;
  int nmask;
  const int64_t* mask = host_scalar_list(c, 2, &nmask);
  const ral_tensor* o[3];
  for (int k = 0; k < 3; k++) o[k] = opt(host_out(c, k)) && !(nmask == 3 && !mask[k]) ? host_out(c, k) : NULL;
  bn_job j = {.g = host_in(c, 0), .x = host_in(c, 1), .w = opt(host_in(c, 2)), .rm = opt(host_in(c, 3)),
              .rv = opt(host_in(c, 4)), .mean = opt(host_in(c, 5)), .invstd = opt(host_in(c, 6)),
              .gi = o[0], .gw = o[1], .gb = o[2]};
  if ((s = check(c, j.x)) != RAL_OK) return s;
  shape_of(&j, j.x);
  const ral_tensor* pc[] = {j.w, j.rm, j.rv, j.gw, j.gb};
  if ((s = per_channel_ok(c, &j, pc, 5)) != RAL_OK) return s;
  if (!host_same_shape(j.g, j.x) || (j.gi && !host_same_shape(j.gi, j.x)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_output/grad_input shape differs from input");
  int64_t unused;
  j.training = (int)host_scalar_int(c, 0, 1);
  j.eps = 1e-5;
  host_scalar_num(c, 1, &j.eps, &unused);
  if (j.training && (!j.mean || !j.invstd || host_numel(j.mean) != j.C || host_numel(j.invstd) != j.C))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "save_mean and save_invstd are needed in training");
  if (!j.training && (!j.rm || !j.rv))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "running_mean and running_var are needed in eval mode");
  host_parallel_for(j.C, 1, backward_channels, &j);
  return j.failed ? host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a row") : RAL_OK;
}
