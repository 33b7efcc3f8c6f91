/*
 * pool2d.c -- 2-d pooling and its backward over [N, C, H, W] or [C, H, W] operands of any
 * strides, float32/float16/bfloat16 (computed in float): max_pool2d_with_indices,
 * adaptive_max_pool2d, avg_pool2d, _adaptive_avg_pool2d. One pool task per block of whole planes (planes.h);
 * windows, index, NaN and divisor rules follow ATen's CPU kernels, so values and indices
 * match CPU's; the average-pooling plane math is plugins/common/resample.c (shared with the
 * OpenCL plugin's host path).
 */
#include <math.h>
#include <stdlib.h>

#include "planes.h"
#include "pool.h"
#include "resample.h"

typedef struct {
  plane_operand x, y, idx; /* the larger and smaller planes' operands (input/output, or grad_input/grad_output), indices */
  int64_t kh, kw, sh, sw, ph, pw, dh, dw, divisor;
  int count_include_pad, adaptive;
  int bad_index; /* an index outside its plane (backward) */
} pool_job;

/* A two-entry int list at scalar `at` (one entry repeats; empty gives `dflt`). */
static int pair(const ral_kernel_call* c, int at, int64_t dflt, int64_t* a, int64_t* b) {
  int n;
  const int64_t* v = host_scalar_list(c, at, &n);
  if (n == 0) {
    *a = *b = dflt;
    return 1;
  }
  if (n != 1 && n != 2) return 0;
  *a = v[0];
  *b = v[n - 1];
  return 1;
}

/* kernel_size, stride (empty: the kernel size), padding[, dilation] from scalar 0 on. */
static ral_status window(const ral_kernel_call* c, pool_job* j, int with_dilation) {
  if (!pair(c, 0, 0, &j->kh, &j->kw) || !pair(c, 1, 0, &j->sh, &j->sw) || !pair(c, 2, 0, &j->ph, &j->pw))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "kernel_size, stride and padding need 1 or 2 entries");
  if (j->sh == 0 && j->sw == 0) j->sh = j->kh, j->sw = j->kw;
  j->dh = j->dw = 1;
  if (with_dilation && !pair(c, 3, 1, &j->dh, &j->dw))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dilation needs 1 or 2 entries");
  if (j->kh < 1 || j->kw < 1 || j->sh < 1 || j->sw < 1 || j->dh < 1 || j->dw < 1 || j->ph < 0 || j->pw < 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "kernel_size, stride and dilation must be >= 1, padding >= 0");
  if (j->ph > j->kh / 2 || j->pw > j->kw / 2)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "padding should be at most half of the kernel size");
  return RAL_OK;
}

/* Operands as planes; every one of the same N and C, `a` and `b` the input/output roles. */
static ral_status operands(const ral_kernel_call* c, pool_job* j, plane_operand* a, const ral_tensor* ta,
                           plane_operand* b, const ral_tensor* tb) {
  const ral_tensor* ts[] = {ta, tb};
  for (int k = 0; k < 2; k++)
    if (ts[k]->dtype != RAL_DTYPE_FLOAT32 && ts[k]->dtype != RAL_DTYPE_FLOAT16 && ts[k]->dtype != RAL_DTYPE_BFLOAT16)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s; float32/float16/bfloat16 only", host_dtype_name(ts[k]->dtype));
  if (ta->dtype != tb->dtype) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and output dtypes differ");
  if (!plane_operand_of(a, ta) || !plane_operand_of(b, tb) || ta->ndim != tb->ndim)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 3-d or 4-d operands of one rank");
  if (a->n != b->n || a->c != b->c) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "batch or channel sizes differ");
  return RAL_OK;
}

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---------------------------------------------------------------- max pooling */

/* The window of output (oh, ow) and its argmax, as CPU picks it (first maximum, NaN wins);
 * adaptive: the window floor(o * I / O) .. ceil((o + 1) * I / O) (adaptive_max_pool2d,
 * whose job has unit strides and dilation). */
static void max_window(const pool_job* j, const float* x, int64_t H, int64_t W, int64_t oh, int64_t ow, float* v,
                       int64_t* arg) {
  int64_t h0 = oh * j->sh - j->ph, w0 = ow * j->sw - j->pw;
  int64_t h1 = imin(h0 + (j->kh - 1) * j->dh + 1, H), w1 = imin(w0 + (j->kw - 1) * j->dw + 1, W);
  if (j->adaptive) {
    int64_t OH = j->y.h, OW = j->y.w;
    h0 = oh * H / OH, h1 = ((oh + 1) * H + OH - 1) / OH;
    w0 = ow * W / OW, w1 = ((ow + 1) * W + OW - 1) / OW;
  }
  while (h0 < 0) h0 += j->dh;
  while (w0 < 0) w0 += j->dw;
  int64_t best = h0 * W + w0;
  float m = -INFINITY;
  for (int64_t h = h0; h < h1; h += j->dh)
    for (int64_t w = w0; w < w1; w += j->dw) {
      float e = x[h * W + w];
      if (e > m || isnan(e)) {
        m = e;
        best = h * W + w;
      }
    }
  *v = m;
  *arg = best;
}

/* Index (n, c, h, w) of the int64 indices operand. */
static int64_t* index_at(const pool_job* j, int64_t n, int64_t c, int64_t h, int64_t w) {
  const plane_operand* p = &j->idx;
  return (int64_t*)(host_ptr(p->t) + 8 * (n * p->sn + c * p->sc + h * p->sh + w * p->sw));
}

static void max_forward(void* job, int64_t n, int64_t c0, int64_t cb, const float* x, float* y) {
  pool_job* j = job;
  int64_t H = j->x.h, W = j->x.w, OH = j->y.h, OW = j->y.w;
  for (int64_t c = 0; c < cb; c++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++)
        max_window(j, x + c * H * W, H, W, oh, ow, &y[(c * OH + oh) * OW + ow], index_at(j, n, c0 + c, oh, ow));
}

static void max_backward(void* job, int64_t n, int64_t c0, int64_t cb, const float* g, float* gi) {
  pool_job* j = job;
  int64_t HW = j->x.h * j->x.w, OH = j->y.h, OW = j->y.w;
  for (int64_t c = 0; c < cb; c++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t i = *index_at(j, n, c0 + c, oh, ow);
        if (i < 0 || i >= HW) j->bad_index = 1;
        else gi[c * HW + i] += g[(c * OH + oh) * OW + ow];
      }
}

/* Forward runs from x to y, backward from y (grad_output) to x (grad_input). */
static ral_status run(const ral_kernel_call* c, pool_job* j, int backward, plane_body body) {
  plane_run r = {.src = backward ? &j->y : &j->x, .dst = backward ? &j->x : &j->y, .body = body, .job = j,
                 .accumulate = backward};
  if (!plane_run_all(&r)) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a plane block");
  if (j->bad_index) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "an index lies outside its input plane");
  return RAL_OK;
}

static int int64_operand(const ral_tensor* t) { return t->dtype == RAL_DTYPE_INT64; }

/* Max pooling's forward (plain: the window from scalars 0..3, or adaptive): the operands,
 * then the windows' maxima and their indices; the output sizes come with the outputs. */
static ral_status max_pool(const ral_kernel_call* c, int adaptive) {
  ral_status s = host_check_arity(c, 2, 1, adaptive ? 0 : 4);
  if (s != RAL_OK) return s;
  pool_job j = {.adaptive = adaptive, .dh = 1, .dw = 1};
  if (!int64_operand(host_out(c, 1))) return host_fail(c, RAL_ERROR_UNSUPPORTED, "indices must be int64");
  if (!plane_operand_of(&j.idx, host_out(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 3-d or 4-d operands");
  if ((!adaptive && (s = window(c, &j, 1)) != RAL_OK) ||
      (s = operands(c, &j, &j.x, host_in(c, 0), &j.y, host_out(c, 0))) != RAL_OK)
    return s;
  if (!host_same_shape(host_out(c, 1), host_out(c, 0)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices and output shapes differ");
  if (adaptive && (j.x.h == 0 || j.x.w == 0) && j.y.h * j.y.w > 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input has an empty spatial dimension");
  return run(c, &j, 0, max_forward);
}

/* Max pooling's backward (grad_output, self, indices; n_scalars window scalars): each
 * gradient goes to its saved index, in output order. */
static ral_status max_pool_backward(const ral_kernel_call* c, int n_scalars) {
  ral_status s = host_check_arity(c, 1, 3, n_scalars);
  if (s != RAL_OK) return s;
  pool_job j = {0};
  const ral_tensor* idx = host_in(c, 2);
  if (!int64_operand(idx)) return host_fail(c, RAL_ERROR_UNSUPPORTED, "indices must be int64");
  if (!plane_operand_of(&j.idx, idx)) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 3-d or 4-d operands");
  if ((s = operands(c, &j, &j.x, host_out(c, 0), &j.y, host_in(c, 0))) != RAL_OK) return s;
  if (!host_same_shape(idx, host_in(c, 0)) || !host_same_shape(host_out(c, 0), host_in(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices/grad_output or grad_input/self shapes differ");
  return run(c, &j, 1, max_backward);
}

/* max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) ->
 * (out, indices); ceil_mode is in the output sizes. */
ral_status host_max_pool2d(const ral_kernel_call* c) { return max_pool(c, 0); }

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
 * dilation, ceil_mode, indices) -> grad_input. */
ral_status host_max_pool2d_backward(const ral_kernel_call* c) { return max_pool_backward(c, 4); }

/* adaptive_max_pool2d(self, output_size) -> (out, indices): max pooling's rules over the
 * adaptive windows; indices flat per plane, as CPU's. */
ral_status host_adaptive_max_pool2d(const ral_kernel_call* c) { return max_pool(c, 1); }

/* adaptive_max_pool2d_backward(grad_output, self, indices) -> grad_input. */
ral_status host_adaptive_max_pool2d_backward(const ral_kernel_call* c) { return max_pool_backward(c, 0); }

/* ---------------------------------------------------------------- average pooling */

/* The shared plane math (plugins/common/resample.c) for this job's planes. */
static ral_avg_pool avg_geom(const pool_job* j) {
  return (ral_avg_pool){.H = j->x.h, .W = j->x.w, .OH = j->y.h, .OW = j->y.w, .kh = j->kh, .kw = j->kw,
                        .sh = j->sh, .sw = j->sw, .ph = j->ph, .pw = j->pw, .divisor = j->divisor,
                        .count_include_pad = j->count_include_pad, .adaptive = j->adaptive};
}

/* Forward averages x's planes into y's; backward spreads y's gradient over x's (zeroed) planes. */
static void avg_windows(pool_job* j, int64_t cb, float* x, float* y, int backward) {
  ral_avg_pool g = avg_geom(j);
  for (int64_t cc = 0; cc < cb; cc++) {
    if (backward) ral_avg_pool_plane_backward(&g, x + cc * g.H * g.W, y + cc * g.OH * g.OW);
    else ral_avg_pool_plane(&g, x + cc * g.H * g.W, y + cc * g.OH * g.OW);
  }
}

static void avg_forward(void* job, int64_t n, int64_t c0, int64_t cb, const float* x, float* y) {
  avg_windows(job, cb, (float*)x, y, 0);
}

static void avg_backward(void* job, int64_t n, int64_t c0, int64_t cb, const float* g, float* gi) {
  avg_windows(job, cb, gi, (float*)g, 1);
}

/* count_include_pad and divisor_override at scalars 4 and 5. */
static ral_status avg_options(const ral_kernel_call* c, pool_job* j) {
  ral_status s = window(c, j, 0);
  return s != RAL_OK ? s : plane_avg_options(c, &j->count_include_pad, &j->divisor);
}

/* avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override) -> out. */
ral_status host_avg_pool2d(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 5);
  if (s != RAL_OK) return s;
  pool_job j = {0};
  if ((s = avg_options(c, &j)) != RAL_OK || (s = operands(c, &j, &j.x, host_in(c, 0), &j.y, host_out(c, 0))) != RAL_OK)
    return s;
  return run(c, &j, 0, avg_forward);
}

/* avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override) -> grad_input. */
ral_status host_avg_pool2d_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 2, 5);
  if (s != RAL_OK) return s;
  pool_job j = {0};
  if ((s = avg_options(c, &j)) != RAL_OK || (s = operands(c, &j, &j.x, host_out(c, 0), &j.y, host_in(c, 0))) != RAL_OK)
    return s;
  if (!host_same_shape(host_out(c, 0), host_in(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  return run(c, &j, 1, avg_backward);
}

/* _adaptive_avg_pool2d(self, output_size) -> out (the size comes with the output). */
ral_status host_adaptive_avg_pool2d(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 0);
  if (s != RAL_OK) return s;
  pool_job j = {.adaptive = 1};
  if ((s = operands(c, &j, &j.x, host_in(c, 0), &j.y, host_out(c, 0))) != RAL_OK) return s;
  return run(c, &j, 0, avg_forward);
}

/* _adaptive_avg_pool2d_backward(grad_output, self) -> grad_input. */
ral_status host_adaptive_avg_pool2d_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 2, 0);
  if (s != RAL_OK) return s;
  pool_job j = {.adaptive = 1};
  if ((s = operands(c, &j, &j.x, host_out(c, 0), &j.y, host_in(c, 0))) != RAL_OK) return s;
  if (!host_same_shape(host_out(c, 0), host_in(c, 1)))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  return run(c, &j, 1, avg_backward);
}
