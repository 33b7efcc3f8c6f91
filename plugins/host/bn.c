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

/* Row (n, c) of a contiguous [N, C, S] tensor as float: the tensor's own memory when it is
 * float32 (no copy), else widened into buf. */
static const float* row_in(const ral_tensor* t, int64_t n, int64_t c, int64_t C, int64_t S, float* buf) {
  const char* src = host_ptr(t) + (n * C + c) * S * host_dtype_size(t->dtype);
  if (t->dtype == RAL_DTYPE_FLOAT32) return (const float*)src;
  host_load_float(buf, src, t->dtype, S);
  return buf;
}

/* Where row (n, c) of an output is computed: in place for float32, else in buf. */
static float* row_dst(const ral_tensor* t, int64_t n, int64_t c, int64_t C, int64_t S, float* buf) {
  char* dst = host_ptr(t) + (n * C + c) * S * host_dtype_size(t->dtype);
  return t->dtype == RAL_DTYPE_FLOAT32 ? (float*)dst : buf;
}

static void row_out(const ral_tensor* t, int64_t n, int64_t c, int64_t C, int64_t S, const float* src) {
  if (t->dtype == RAL_DTYPE_FLOAT32) return; /* computed in place */
  host_store_float(host_ptr(t) + (n * C + c) * S * host_dtype_size(t->dtype), t->dtype, src, S);
}

/* Row sums in BN_LANES float lanes (vectorizable, one fixed order), each block of
 * BN_BLOCK elements flushed into double, so long rows keep double's accuracy. */
#define BN_LANES 16
#define BN_BLOCK 512

/* 16 float lanes, unaligned: GCC's vector extension, AVX-512/AVX2/SSE per clone. */
typedef float bn_vec __attribute__((vector_size(BN_LANES * sizeof(float)), aligned(4)));

/* With b NULL: sum of a[i] - m and of (a[i] - m)^2; else: sum of b[i] and of b[i] * (a[i] - m). */
HOST_SIMD_CLONES static void row_sums(const float* a, const float* b, int64_t n, float m, double* s1, double* s2) {
  double d1 = 0, d2 = 0;
  bn_vec mv = (bn_vec){0} + m;
  for (int64_t b0 = 0; b0 < n; b0 += BN_BLOCK) {
    int64_t e = b0 + BN_BLOCK < n ? b0 + BN_BLOCK : n, i = b0;
    bn_vec l1 = {0}, l2 = {0};
    for (; i + BN_LANES <= e; i += BN_LANES) {
      bn_vec d = *(const bn_vec*)(a + i) - mv, v = b ? *(const bn_vec*)(b + i) : d;
      l1 += v;
      l2 += v * d;
    }
    float t1 = 0, t2 = 0;
    for (int k = 0; k < BN_LANES; k++) {
      t1 += l1[k];
      t2 += l2[k];
    }
    for (; i < e; i++) {
      float d = a[i] - m, v = b ? b[i] : d;
      t1 += v;
      t2 += v * d;
    }
    d1 += t1;
    d2 += t2;
  }
  *s1 = d1;
  *s2 = d2;
}

/* y = x * s + b over a row. */
HOST_SIMD_CLONES static void row_affine(float* y, const float* x, int64_t n, float s, float b) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * s + b;
}

/* gi = a * g - bx * (x - m) - am over a row (gi may be x's buffer: elementwise). */
HOST_SIMD_CLONES static void row_grad(float* gi, const float* g, const float* x, int64_t n, float a, float bx,
                                      float m, float am) {
  for (int64_t i = 0; i < n; i++) gi[i] = a * g[i] - bx * (x[i] - m) - am;
}

/* The channel's mean and 1/sqrt(var + eps): batch statistics (training) or running ones. */
static void channel_stats(const bn_job* j, int64_t c, float* row, double* mean, double* invstd, double* var) {
  if (!j->training) {
    *mean = j->rm ? ld(j->rm, c) : 0.0;
    *var = j->rv ? ld(j->rv, c) : 1.0;
    *invstd = 1.0 / sqrt(*var + j->eps);
    return;
  }
  /* a shift near the mean (the first element) keeps the float lane sums small; the second
   * pass around the mean itself gives the variance without E[x^2] - E[x]^2 cancellation */
  double s = 0, ss = 0, d1, d2;
  float shift = 0;
  if (j->N * j->S > 0) shift = row_in(j->x, 0, c, j->C, j->S, row)[0];
  for (int64_t n = 0; n < j->N; n++) {
    row_sums(row_in(j->x, n, c, j->C, j->S, row), NULL, j->S, shift, &d1, &d2);
    s += d1;
  }
  double cnt = (double)(j->N * j->S);
  *mean = cnt > 0 ? shift + s / cnt : 0.0;
  for (int64_t n = 0; n < j->N; n++) {
    row_sums(row_in(j->x, n, c, j->C, j->S, row), NULL, j->S, (float)*mean, &d1, &d2);
    ss += d2;
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
    float fs = (float)scale, fb = (float)shift;
    for (int64_t n = 0; n < j->N; n++) {
      const float* x = row_in(j->x, n, c, j->C, j->S, row);
      float* y = row_dst(j->out, n, c, j->C, j->S, row);
      row_affine(y, x, j->S, fs, fb);
      row_out(j->out, n, c, j->C, j->S, y);
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
      double sg = 0, sgd = 0, d1, d2; /* sum of g, sum of g * (x - mean) */
      for (int64_t n = 0; n < j->N; n++) {
        row_sums(row_in(j->x, n, c, j->C, j->S, xr), row_in(j->g, n, c, j->C, j->S, gr), j->S, (float)mean, &d1,
                 &d2);
        sg += d1;
        sgd += d2;
      }
      double sgx = sgd * invstd; /* sum of g * xhat */
      st(j->gw, c, sgx);
      st(j->gb, c, sg);
      if (!j->gi) continue;
      double w = j->w ? ld(j->w, c) : 1.0, cnt = (double)(j->N * j->S);
      double mg = j->training && cnt > 0 ? sg / cnt : 0.0, mgx = j->training && cnt > 0 ? sgx / cnt : 0.0;
      /* gi = w * invstd * (g - mg - xhat * mgx) = a * g - b * (x - mean) - a * mg */
      float a = (float)(w * invstd), bx = (float)(w * invstd * invstd * mgx), am = (float)(w * invstd * mg);
      float fm = (float)mean;
      for (int64_t n = 0; n < j->N; n++) {
        const float* x = row_in(j->x, n, c, j->C, j->S, xr);
        const float* g = row_in(j->g, n, c, j->C, j->S, gr);
        float* gi = row_dst(j->gi, n, c, j->C, j->S, xr); /* xr: x is read before it is overwritten */
        row_grad(gi, g, x, j->S, a, bx, fm, am);
        row_out(j->gi, n, c, j->C, j->S, gi);
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
