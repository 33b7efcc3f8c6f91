/*
 * pool3d.c -- 3-d pooling and its backward over [N, C, D, H, W] or [C, D, H, W] operands of
 * any strides (NCDHW, channels_last_3d, sliced), float32/float16/bfloat16 (computed in float):
 * max_pool3d_with_indices, avg_pool3d, _adaptive_avg_pool3d and adaptive_max_pool3d. One task per block of whole volumes (planes.h with
 * a depth axis); the volume math is plugins/common/resample.c's ral_pool3 (shared with the
 * OpenCL plugin's host path), with ATen's CPU windows, index, NaN and divisor rules, so values
 * and indices match CPU's. The output sizes (ceil_mode) come with the output tensors.
 */
#include <stdlib.h>

#include "planes.h"
#include "resample.h"

typedef struct {
  plane_operand x, y, idx; /* the larger and smaller volumes (input/output, or grad_input/grad_output), indices */
  ral_pool3 g;
  int bad_index; /* an index outside its volume (max backward) */
} pool3_job;

/* A three-entry int list at scalar `at` (one entry repeats; empty gives `dflt`). */
static int triple(const ral_kernel_call* c, int at, const int64_t* dflt, int64_t out[3]) {
  int n;
  const int64_t* v = host_scalar_list(c, at, &n);
  if (n == 0) {
    for (int a = 0; a < 3; a++) out[a] = dflt[a];
    return 1;
  }
  if (n != 1 && n != 3) return 0;
  for (int a = 0; a < 3; a++) out[a] = v[n == 1 ? 0 : a];
  return 1;
}

/* kernel_size, stride (empty: the kernel size), padding[, dilation] from scalar 0 on. */
static ral_status window(const ral_kernel_call* c, ral_pool3* g, int with_dilation) {
  static const int64_t zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  for (int a = 0; a < 3; a++) g->dil[a] = 1;
  if (!triple(c, 0, one, g->k) || !triple(c, 1, g->k, g->s) || !triple(c, 2, zero, g->p) ||
      (with_dilation && !triple(c, 3, one, g->dil)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "kernel_size, stride, padding and dilation need 1 or 3 entries");
  for (int a = 0; a < 3; a++) {
    if (g->k[a] < 1 || g->s[a] < 1 || g->dil[a] < 1 || g->p[a] < 0)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "kernel_size, stride and dilation must be >= 1, padding >= 0");
    if (g->p[a] > g->k[a] / 2)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "padding should be at most half of the kernel size");
  }
  return RAL_OK;
}

/* Operands as volumes; both of one dtype, N and C; `a` and `b` the input/output roles. */
static ral_status operands(const ral_kernel_call* c, pool3_job* j, plane_operand* a, const ral_tensor* ta,
                           plane_operand* b, const ral_tensor* tb) {
  const ral_tensor* ts[] = {ta, tb};
  for (int k = 0; k < 2; k++)
    if (ts[k]->dtype != RAL_DTYPE_FLOAT32 && ts[k]->dtype != RAL_DTYPE_FLOAT16 && ts[k]->dtype != RAL_DTYPE_BFLOAT16)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s; float32/float16/bfloat16 only", host_dtype_name(ts[k]->dtype));
  if (ta->dtype != tb->dtype) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and output dtypes differ");
  if (!plane_operand_of3(a, ta) || !plane_operand_of3(b, tb) || ta->ndim != tb->ndim)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 4-d or 5-d operands of one rank");
  if (a->n != b->n || a->c != b->c) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "batch or channel sizes differ");
  j->g.in[0] = j->x.d, j->g.in[1] = j->x.h, j->g.in[2] = j->x.w;
  j->g.out[0] = j->y.d, j->g.out[1] = j->y.h, j->g.out[2] = j->y.w;
  return RAL_OK;
}

/* The int64 indices of volume (n, c) and their (d, h, w) strides. */
static int64_t* indices(const pool3_job* j, int64_t n, int64_t c, int64_t is[3]) {
  const plane_operand* p = &j->idx;
  is[0] = p->sd, is[1] = p->sh, is[2] = p->sw;
  return (int64_t*)(host_ptr(p->t) + 8 * (n * p->sn + c * p->sc));
}

/* Dense [D][H][W] strides of a float block's volume. */
static void dense(const plane_operand* p, int64_t st[3]) { st[0] = p->h * p->w, st[1] = p->w, st[2] = 1; }

static void max_forward(void* job, int64_t n, int64_t c0, int64_t cb, const float* x, float* y) {
  pool3_job* j = job;
  int64_t xs[3], ys[3], is[3], vx = j->x.d * j->x.h * j->x.w, vy = j->y.d * j->y.h * j->y.w;
  dense(&j->x, xs), dense(&j->y, ys);
  for (int64_t c = 0; c < cb; c++)
    ral_max_pool3_volume(&j->g, x + c * vx, xs, y + c * vy, ys, indices(j, n, c0 + c, is), is);
}

static void max_backward(void* job, int64_t n, int64_t c0, int64_t cb, const float* go, float* gi) {
  pool3_job* j = job;
  int64_t gs[3], os[3], is[3], vx = j->x.d * j->x.h * j->x.w, vy = j->y.d * j->y.h * j->y.w, bad;
  dense(&j->x, gs), dense(&j->y, os);
  for (int64_t c = 0; c < cb; c++) {
    const int64_t* ix = indices(j, n, c0 + c, is);
    if (ral_max_pool3_bad_index(&j->g, ix, is, &bad)) j->bad_index = 1;
    else ral_max_pool3_volume_backward(&j->g, gi + c * vx, gs, go + c * vy, os, ix, is);
  }
}

static void avg_forward(void* job, int64_t n, int64_t c0, int64_t cb, const float* x, float* y) {
  pool3_job* j = job;
  int64_t xs[3], ys[3], vx = j->x.d * j->x.h * j->x.w, vy = j->y.d * j->y.h * j->y.w;
  dense(&j->x, xs), dense(&j->y, ys);
  for (int64_t c = 0; c < cb; c++) ral_avg_pool3_volume(&j->g, x + c * vx, xs, y + c * vy, ys);
}

static void avg_backward(void* job, int64_t n, int64_t c0, int64_t cb, const float* go, float* gi) {
  pool3_job* j = job;
  int64_t gs[3], os[3], vx = j->x.d * j->x.h * j->x.w, vy = j->y.d * j->y.h * j->y.w;
  dense(&j->x, gs), dense(&j->y, os);
  for (int64_t c = 0; c < cb; c++) ral_avg_pool3_volume_backward(&j->g, gi + c * vx, gs, go + c * vy, os);
}

/* Forward runs from x to y, backward from y (grad_output) to x (grad_input). */
static ral_status run(const ral_kernel_call* c, pool3_job* j, int backward, plane_body body) {
  plane_run r = {.src = backward ? &j->y : &j->x, .dst = backward ? &j->x : &j->y, .body = body, .job = j,
                 .accumulate = backward};
  if (!plane_run_all(&r)) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a volume block");
  if (j->bad_index) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "an index lies outside its input volume");
  return RAL_OK;
}

/* The int64 indices operand, of `like`'s shape. */
static ral_status index_operand(const ral_kernel_call* c, pool3_job* j, const ral_tensor* idx, const ral_tensor* like) {
  if (idx->dtype != RAL_DTYPE_INT64) return host_fail(c, RAL_ERROR_UNSUPPORTED, "indices must be int64");
  if (!plane_operand_of3(&j->idx, idx) || !host_same_shape(idx, like))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices must have the output's shape");
  return RAL_OK;
}

/* Max pooling's forward (plain: the window from scalars 0..3; adaptive: from the sizes,
 * dilation 1) -> (out, indices); the output sizes (ceil_mode) come with the outputs. */
static ral_status max_pool(const ral_kernel_call* c, int adaptive) {
  ral_status s = host_check_arity(c, 2, 1, adaptive ? 0 : 4);
  if (s != RAL_OK) return s;
  pool3_job j = {.g = {.adaptive = adaptive, .k = {1, 1, 1}, .s = {1, 1, 1}, .dil = {1, 1, 1}}};
  if ((!adaptive && (s = window(c, &j.g, 1)) != RAL_OK) ||
      (s = operands(c, &j, &j.x, host_in(c, 0), &j.y, host_out(c, 0))) != RAL_OK ||
      (s = index_operand(c, &j, host_out(c, 1), host_out(c, 0))) != RAL_OK)
    return s;
  if (j.x.d * j.x.h * j.x.w == 0 && j.y.d * j.y.h * j.y.w > 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input has an empty spatial dimension");
  return run(c, &j, 0, max_forward);
}

/* Max pooling's backward (grad_output, self, [window scalars,] indices) -> grad_input: each
 * gradient goes to its saved index, in output order (CPU's); an index outside its volume
 * fails the call. */
static ral_status max_pool_backward(const ral_kernel_call* c, int adaptive) {
  ral_status s = host_check_arity(c, 1, 3, adaptive ? 0 : 4);
  if (s != RAL_OK) return s;
  pool3_job j = {.g = {.adaptive = adaptive, .k = {1, 1, 1}, .s = {1, 1, 1}, .dil = {1, 1, 1}}};
  if ((!adaptive && (s = window(c, &j.g, 1)) != RAL_OK) ||
      (s = operands(c, &j, &j.x, host_out(c, 0), &j.y, host_in(c, 0))) != RAL_OK ||
      (s = index_operand(c, &j, host_in(c, 2), host_in(c, 0))) != RAL_OK)
    return s;
  if (!host_same_shape(host_out(c, 0), host_in(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  return run(c, &j, 1, max_backward);
}

/* max_pool3d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices). */
ral_status host_max_pool3d(const ral_kernel_call* c) { return max_pool(c, 0); }

/* max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
 * dilation, ceil_mode, indices) -> grad_input. */
ral_status host_max_pool3d_backward(const ral_kernel_call* c) { return max_pool_backward(c, 0); }

/* adaptive_max_pool3d(self, output_size) -> (out, indices): max pooling's rules (first maximum,
 * NaN wins) over the adaptive windows; indices flat per volume, as CPU's. */
ral_status host_adaptive_max_pool3d(const ral_kernel_call* c) { return max_pool(c, 1); }

/* adaptive_max_pool3d_backward(grad_output, self, indices) -> grad_input. */
ral_status host_adaptive_max_pool3d_backward(const ral_kernel_call* c) { return max_pool_backward(c, 1); }

/* Window scalars 0..2, count_include_pad (scalar 4) and divisor_override (scalar 5). */
static ral_status avg_options(const ral_kernel_call* c, pool3_job* j) {
  ral_status s = window(c, &j->g, 0);
  return s != RAL_OK ? s : plane_avg_options(c, &j->g.count_include_pad, &j->g.divisor);
}

/* avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override) -> out. */
ral_status host_avg_pool3d(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 5);
  if (s != RAL_OK) return s;
  pool3_job j = {0};
  if ((s = avg_options(c, &j)) != RAL_OK || (s = operands(c, &j, &j.x, host_in(c, 0), &j.y, host_out(c, 0))) != RAL_OK)
    return s;
  return run(c, &j, 0, avg_forward);
}

/* avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override) -> grad_input. */
ral_status host_avg_pool3d_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 2, 5);
  if (s != RAL_OK) return s;
  pool3_job j = {0};
  if ((s = avg_options(c, &j)) != RAL_OK || (s = operands(c, &j, &j.x, host_out(c, 0), &j.y, host_in(c, 0))) != RAL_OK)
    return s;
  if (!host_same_shape(host_out(c, 0), host_in(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  return run(c, &j, 1, avg_backward);
}

/* _adaptive_avg_pool3d(self, output_size) -> out (the size comes with the output). */
ral_status host_adaptive_avg_pool3d(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 0);
  if (s != RAL_OK) return s;
  pool3_job j = {.g.adaptive = 1};
  if ((s = operands(c, &j, &j.x, host_in(c, 0), &j.y, host_out(c, 0))) != RAL_OK) return s;
  if (j.x.d * j.x.h * j.x.w == 0 && j.y.d * j.y.h * j.y.w > 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input has an empty spatial dimension");
  return run(c, &j, 0, avg_forward);
}

/* _adaptive_avg_pool3d_backward(grad_output, self) -> grad_input. */
ral_status host_adaptive_avg_pool3d_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 2, 0);
  if (s != RAL_OK) return s;
  pool3_job j = {.g.adaptive = 1};
  if ((s = operands(c, &j, &j.x, host_out(c, 0), &j.y, host_in(c, 0))) != RAL_OK) return s;
  if (!host_same_shape(host_out(c, 0), host_in(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  return run(c, &j, 1, avg_backward);
}
