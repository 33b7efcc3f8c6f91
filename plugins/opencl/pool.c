/*
 * pool.c -- 2-d pooling and its backward over [C, H, W] or [N, C, H, W] float32, float16 or bfloat16:
 * max_pool2d_with_indices, avg_pool2d and _adaptive_avg_pool2d; 3-d max_pool3d_with_indices,
 * adaptive_max_pool3d, avg_pool3d and _adaptive_avg_pool3d over [C, D, H, W] or [N, C, D, H, W] (inline_pool.c's host path,
 * kernels/pool.cl's *3d_* kernels); operands of any strides
 * (so outputs take CPU's layout, channels_last included); kernels/pool.cl, or on a CPU runtime with host-unified buffers the
 * host loops (inline_cnn.c, inline_pool.c). The output size comes from the output tensor,
 * so ceil_mode needs no code here.
 */
#include <string.h>

#include "ocl.h"

/* An int[2] scalar; a one-entry list is repeated, an empty one gives `dflt`. */
static int pair(const ral_kernel_call* c, int at, const int64_t* dflt, int64_t out[2]) {
  int n;
  const int64_t* v = ocl_scalar_list(c, at, &n);
  if (!v || n == 0) {
    out[0] = dflt[0], out[1] = dflt[1];
    return 1;
  }
  if (n != 1 && n != 2) return 0;
  out[0] = v[0], out[1] = v[n - 1];
  return 1;
}

/* Element strides of a 3-d or 4-d operand over (n, c, h, w); a 3-d one has one sample. */
static void plane_strides(const ral_tensor* t, int64_t s[4]) {
  int r = t->ndim;
  s[0] = r == 4 ? t->strides[0] : 0;
  for (int i = 1; i < 4; i++) s[i] = t->strides[r - 4 + i];
}

/* Whether a and b have the same rank and sizes. */
static int same_sizes(const ral_tensor* a, const ral_tensor* b) {
  if (a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->sizes[i] != b->sizes[i]) return 0;
  return 1;
}

/* Plane geometry from input-side x and output-side y (sizes, offsets, strides); every
 * tensor of the call x's dtype, float32, float16 or bfloat16 (the kernels take one dtype:
 * g->dt; int64: indices), and contiguous unless `strided`. */
static ral_status planes(const ral_kernel_call* c, const char* op, const ral_tensor* x, const ral_tensor* y,
                         ocl_pool* g, int strided) {
  memset(g, 0, sizeof *g);
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (ocl_absent(t)) continue;
    if (t->dtype != RAL_DTYPE_INT64 && (!ocl_cnn_dtype(t->dtype) || t->dtype != x->dtype))
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "%s takes float32/float16/bfloat16 of one dtype, tensor %d is %s", op,
                      i, ocl_dtype_name(t->dtype));
    if (!strided && !ocl_is_contiguous(t)) return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "tensor %d must be contiguous", i);
  }
  if ((x->ndim != 3 && x->ndim != 4) || y->ndim != x->ndim)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 3-d or 4-d input, got %d-d", x->ndim);
  int r = x->ndim;
  g->H = x->sizes[r - 2], g->W = x->sizes[r - 1], g->OH = y->sizes[r - 2], g->OW = y->sizes[r - 1];
  g->B = 1;
  for (int i = 0; i < r - 2; i++) {
    if (x->sizes[i] != y->sizes[i]) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and output batch/channels differ");
    g->B *= x->sizes[i];
  }
  g->C = x->sizes[r - 3];
  plane_strides(x, g->xs);
  plane_strides(y, g->ys);
  g->dt = x->dtype;
  g->off_x = ocl_elem_off(x);
  g->off_y = ocl_elem_off(y);
  return RAL_OK;
}

/* kernel_size, stride (empty: the kernel size), padding[, dilation] from scalar 0 on. */
static ral_status window(const ral_kernel_call* c, ocl_pool* g, int with_dilation) {
  int64_t k[2], s[2], p[2], d[2] = {1, 1}, zero[2] = {0, 0}, one[2] = {1, 1};
  if (!pair(c, 0, one, k) || !pair(c, 1, k, s) || !pair(c, 2, zero, p) || (with_dilation && !pair(c, 3, one, d)))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "kernel_size/stride/padding/dilation must have 1 or 2 entries");
  if (k[0] < 1 || k[1] < 1 || s[0] < 1 || s[1] < 1 || d[0] < 1 || d[1] < 1 || p[0] < 0 || p[1] < 0 ||
      2 * p[0] > k[0] || 2 * p[1] > k[1])
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "invalid kernel_size/stride/padding/dilation");
  g->kh = k[0], g->kw = k[1], g->sh = s[0], g->sw = s[1], g->ph = p[0], g->pw = p[1], g->dh = d[0], g->dw = d[1];
  return RAL_OK;
}

/* Max pooling forward (plain: window scalars 0..3; adaptive: unit dilation, windows from the
 * sizes) -> (out, indices), indices flat per plane as CPU's. */
static ral_status max_pool(const ral_kernel_call* c, int adaptive) {
  ral_status st = ocl_check_arity(c, 2, 1, adaptive ? 0 : 4);
  if (st != RAL_OK) return st;
  const ral_tensor *y = ocl_out(c, 0), *idx = ocl_out(c, 1), *x = ocl_in(c, 0);
  ocl_pool g;
  if ((st = planes(c, "max pooling", x, y, &g, 1)) != RAL_OK || (!adaptive && (st = window(c, &g, 1)) != RAL_OK))
    return st;
  if (idx->dtype != RAL_DTYPE_INT64 || !same_sizes(idx, y))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices must be int64 of the output's shape");
  if (ocl_numel(y) == 0) return RAL_OK;
  if (g.H == 0 || g.W == 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "empty input plane");
  if (adaptive) g.adaptive = 1, g.dh = g.dw = 1;
  g.off_i = ocl_elem_off(idx);
  plane_strides(idx, g.is);
  if (ocl_inline_maxpool(c, &g, x, idx, y, 0, &st)) return st; /* a CPU runtime with host-unified buffers */
  ocl_arg a[5] = {ocl_mem(y), ocl_mem(idx), ocl_mem(x), OCL_VAL(g)};
  int64_t win = adaptive ? (g.H / g.OH + 1) * (g.W / g.OW + 1) : g.kh * g.kw;
  return ocl_enqueue_rows(c, OCL_K_maxpool2d_fwd, 4, a, g.B * g.OH, g.OW * win);
}

/* Max pooling backward (grad_output, self, indices) -> grad_input: each input element sums
 * the gradients of the outputs whose index names it. */
static ral_status max_pool_backward(const ral_kernel_call* c, int adaptive) {
  ral_status st = ocl_check_arity(c, 1, 3, adaptive ? 0 : 4);
  if (st != RAL_OK) return st;
  const ral_tensor *gi = ocl_out(c, 0), *go = ocl_in(c, 0), *x = ocl_in(c, 1), *idx = ocl_in(c, 2);
  ocl_pool g;
  /* the geometry of grad_input (x's sizes, its own strides) against grad_output */
  if (!same_sizes(gi, x)) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input does not match the input");
  if ((st = planes(c, "max pooling", gi, go, &g, 1)) != RAL_OK || (!adaptive && (st = window(c, &g, 1)) != RAL_OK))
    return st;
  if (idx->dtype != RAL_DTYPE_INT64 || !same_sizes(idx, go))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices do not match grad_output");
  if (ocl_numel(gi) == 0) return RAL_OK;
  if (adaptive) g.adaptive = 1, g.dh = g.dw = 1;
  g.off_i = ocl_elem_off(idx);
  plane_strides(idx, g.is);
  if (ocl_inline_maxpool(c, &g, gi, idx, go, 1, &st)) return st; /* a CPU runtime with host-unified buffers */
  /* out-of-plane indices: IndexError at the next sync (the kernel's fault record) */
  ocl_arg a[6] = {ocl_mem(gi), ocl_mem(go), ocl_mem(idx), OCL_VAL(g), ocl_stream_err_arg(c)};
  int64_t win = adaptive ? (g.OH / g.H + 1) * (g.OW / g.W + 1) : 1;
  st = ocl_enqueue_rows(c, OCL_K_maxpool2d_bwd, 5, a, g.B * g.H, g.W * win);
  if (st == RAL_OK) ocl_stream_arm(c);
  return st;
}

/* max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices) */
ral_status ocl_max_pool2d_with_indices(const ral_kernel_call* c) { return max_pool(c, 0); }

/* max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
 * dilation, ceil_mode, indices) -> grad_input */
ral_status ocl_max_pool2d_with_indices_backward(const ral_kernel_call* c) { return max_pool_backward(c, 0); }

/* adaptive_max_pool2d(self, output_size) -> (out, indices) */
ral_status ocl_adaptive_max_pool2d(const ral_kernel_call* c) { return max_pool(c, 1); }

/* adaptive_max_pool2d_backward(grad_output, self, indices) -> grad_input */
ral_status ocl_adaptive_max_pool2d_backward(const ral_kernel_call* c) { return max_pool_backward(c, 1); }

/* ---------------------------------------------------------------- average pooling */
/* Forward (big = x, small = y) or backward (big = grad_input, small = grad_output) of an
 * average pooling whose geometry g holds everything but the offsets. */
static ral_status avg_run(const ral_kernel_call* c, ocl_pool* g, const ral_tensor* big, const ral_tensor* small,
                          int backward) {
  if (ocl_numel(backward ? big : small) == 0) return RAL_OK;
  if (!backward && (g->H == 0 || g->W == 0)) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "empty input plane");
  g->off_x = ocl_elem_off(big);
  g->off_y = ocl_elem_off(small);
  if (ocl_inline_avgpool(c, g, big, small, backward)) return RAL_OK; /* a CPU runtime with host-unified buffers */
  int64_t win = g->adaptive ? (g->H / (g->OH ? g->OH : 1) + 1) * (g->W / (g->OW ? g->OW : 1) + 1) : g->kh * g->kw;
  ocl_arg a[4] = {ocl_mem(backward ? big : small), ocl_mem(backward ? small : big), OCL_VAL(*g)};
  if (backward) return ocl_enqueue_rows(c, OCL_K_avgpool2d_bwd, 3, a, g->B * g->H, g->W * win);
  return ocl_enqueue_rows(c, OCL_K_avgpool2d_fwd, 3, a, g->B * g->OH, g->OW * win);
}

/* Window, count_include_pad (scalar 4) and divisor_override (scalar 5, None: 0). */
static ral_status avg_options(const ral_kernel_call* c, ocl_pool* g) {
  ral_status st = window(c, g, 0);
  if (st != RAL_OK) return st;
  double f;
  int64_t v = 0;
  g->count_include_pad = ocl_scalar_i(c, 4, 1) != 0;
  if (ocl_scalar_num(c, 5, &f, &v) && v == 0)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "divisor must be not zero");
  g->divisor = v;
  return RAL_OK;
}

/* avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override) -> out */
ral_status ocl_avg_pool2d(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 5);
  if (st != RAL_OK) return st;
  ocl_pool g;
  if ((st = planes(c, "avg_pool2d", ocl_in(c, 0), ocl_out(c, 0), &g, 1)) != RAL_OK ||
      (st = avg_options(c, &g)) != RAL_OK)
    return st;
  return avg_run(c, &g, ocl_in(c, 0), ocl_out(c, 0), 0);
}

/* avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override) -> grad_input */
ral_status ocl_avg_pool2d_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 5);
  if (st != RAL_OK) return st;
  ocl_pool g;
  if ((st = planes(c, "avg_pool2d_backward", ocl_out(c, 0), ocl_in(c, 0), &g, 1)) != RAL_OK ||
      (st = avg_options(c, &g)) != RAL_OK)
    return st;
  if (ocl_numel(ocl_out(c, 0)) != ocl_numel(ocl_in(c, 1)))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  return avg_run(c, &g, ocl_out(c, 0), ocl_in(c, 0), 1);
}

/* _adaptive_avg_pool2d(self, output_size) -> out (the size comes with the output) */
ral_status ocl_adaptive_avg_pool2d(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  ocl_pool g;
  if ((st = planes(c, "_adaptive_avg_pool2d", ocl_in(c, 0), ocl_out(c, 0), &g, 1)) != RAL_OK) return st;
  g.adaptive = 1;
  return avg_run(c, &g, ocl_in(c, 0), ocl_out(c, 0), 0);
}

/* _adaptive_avg_pool2d_backward(grad_output, self) -> grad_input */
ral_status ocl_adaptive_avg_pool2d_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  ocl_pool g;
  if ((st = planes(c, "_adaptive_avg_pool2d_backward", ocl_out(c, 0), ocl_in(c, 0), &g, 1)) != RAL_OK) return st;
  if (ocl_numel(ocl_out(c, 0)) != ocl_numel(ocl_in(c, 1)))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  g.adaptive = 1;
  return avg_run(c, &g, ocl_out(c, 0), ocl_in(c, 0), 1);
}

/* ---------------------------------------------------------------- 3-d pooling */
/* An int[3] scalar; a one-entry list is repeated, an empty one gives `dflt`. */
static int triple(const ral_kernel_call* c, int at, const int64_t* dflt, int64_t out[3]) {
  int n;
  const int64_t* v = ocl_scalar_list(c, at, &n);
  if (!v || n == 0) {
    for (int a = 0; a < 3; a++) out[a] = dflt[a];
    return 1;
  }
  if (n != 1 && n != 3) return 0;
  for (int a = 0; a < 3; a++) out[a] = v[n == 1 ? 0 : a];
  return 1;
}

/* Element strides of a 4-d or 5-d operand over (n, c, d, h, w); a 4-d one has one sample. */
static void volume_strides(const ral_tensor* t, int64_t s[5]) {
  int r = t->ndim;
  s[0] = r == 5 ? t->strides[0] : 0;
  for (int i = 1; i < 5; i++) s[i] = t->strides[r - 5 + i];
}

/* Volume geometry of x (input or grad_input) and y (output or grad_output), one float dtype,
 * and the window: VOL_ADAPTIVE none (windows from the sizes), VOL_AVG scalars 0..2, VOL_MAX
 * with the dilation at 3. */
enum { VOL_ADAPTIVE, VOL_AVG, VOL_MAX };
static ral_status volumes(const ral_kernel_call* c, const ral_tensor* x, const ral_tensor* y, ocl_pool3* g,
                          int win) {
  static const int64_t zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  memset(g, 0, sizeof *g);
  if (!ocl_cnn_dtype(x->dtype) || y->dtype != x->dtype)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "3-d pooling takes float32/float16/bfloat16 of one dtype, got %s and %s",
                    ocl_dtype_name(x->dtype), ocl_dtype_name(y->dtype));
  if ((x->ndim != 4 && x->ndim != 5) || y->ndim != x->ndim)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 4-d or 5-d operands of one rank, got %d-d", x->ndim);
  int r = x->ndim;
  g->B = 1;
  for (int i = 0; i < r - 3; i++) {
    if (x->sizes[i] != y->sizes[i]) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and output batch/channels differ");
    g->B *= x->sizes[i];
  }
  g->C = x->sizes[r - 4];
  for (int a = 0; a < 3; a++)
    g->I[a] = x->sizes[r - 3 + a], g->O[a] = y->sizes[r - 3 + a], g->d[a] = g->k[a] = g->s[a] = 1;
  g->adaptive = win == VOL_ADAPTIVE;
  if (win != VOL_ADAPTIVE && (!triple(c, 0, one, g->k) || !triple(c, 1, g->k, g->s) || !triple(c, 2, zero, g->p) ||
      (win == VOL_MAX && !triple(c, 3, one, g->d))))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "kernel_size/stride/padding/dilation must have 1 or 3 entries");
  for (int a = 0; a < 3; a++)
    if (g->k[a] < 1 || g->s[a] < 1 || g->d[a] < 1 || g->p[a] < 0 || 2 * g->p[a] > g->k[a])
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "invalid kernel_size/stride/padding/dilation");
  volume_strides(x, g->xs);
  volume_strides(y, g->ys);
  g->dt = x->dtype;
  g->off_x = ocl_elem_off(x);
  g->off_y = ocl_elem_off(y);
  return RAL_OK;
}

/* The int64 indices operand of y's shape. */
static ral_status volume_indices(const ral_kernel_call* c, const ral_tensor* idx, const ral_tensor* y, ocl_pool3* g) {
  if (idx->dtype != RAL_DTYPE_INT64 || !same_sizes(idx, y))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices must be int64 of the output's shape");
  g->off_i = ocl_elem_off(idx);
  volume_strides(idx, g->is);
  return RAL_OK;
}

/* 3-d max pooling forward (plain: the window from scalars 0..3; adaptive: from the sizes)
 * -> (out, indices). */
static ral_status max3_forward(const ral_kernel_call* c, int adaptive) {
  ral_status st = ocl_check_arity(c, 2, 1, adaptive ? 0 : 4);
  if (st != RAL_OK) return st;
  const ral_tensor *y = ocl_out(c, 0), *idx = ocl_out(c, 1), *x = ocl_in(c, 0);
  ocl_pool3 g;
  if ((st = volumes(c, x, y, &g, adaptive ? VOL_ADAPTIVE : VOL_MAX)) != RAL_OK ||
      (st = volume_indices(c, idx, y, &g)) != RAL_OK)
    return st;
  if (ocl_numel(y) == 0) return RAL_OK;
  if (g.I[0] * g.I[1] * g.I[2] == 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "empty input volume");
  if (ocl_inline_pool3(c, &g, x, idx, y, 0, &st)) return st; /* a CPU runtime with host-unified buffers */
  ocl_arg a[5] = {ocl_mem(y), ocl_mem(idx), ocl_mem(x), OCL_VAL(g)};
  int64_t win = 1; /* a window's work: its size, or an adaptive one's (about I / O + 1 per axis) */
  for (int k = 0; k < 3; k++) win *= adaptive ? g.I[k] / g.O[k] + 1 : g.k[k];
  return ocl_enqueue_rows(c, OCL_K_maxpool3d_fwd, 4, a, g.B * g.O[0] * g.O[1], g.O[2] * win);
}

/* 3-d max pooling backward (grad_output, self, [window scalars,] indices) -> grad_input: a
 * gather in output order; an index outside its volume raises IndexError (the host path
 * before writing, the queued kernel at the next sync). */
static ral_status max3_backward(const ral_kernel_call* c, int adaptive) {
  ral_status st = ocl_check_arity(c, 1, 3, adaptive ? 0 : 4);
  if (st != RAL_OK) return st;
  const ral_tensor *gi = ocl_out(c, 0), *go = ocl_in(c, 0), *x = ocl_in(c, 1), *idx = ocl_in(c, 2);
  ocl_pool3 g;
  if (!same_sizes(gi, x)) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input does not match the input");
  if ((st = volumes(c, gi, go, &g, adaptive ? VOL_ADAPTIVE : VOL_MAX)) != RAL_OK ||
      (st = volume_indices(c, idx, go, &g)) != RAL_OK)
    return st;
  if (ocl_numel(gi) == 0) return RAL_OK;
  if (ocl_inline_pool3(c, &g, gi, idx, go, 1, &st)) return st;
  ocl_arg a[6] = {ocl_mem(gi), ocl_mem(go), ocl_mem(idx), OCL_VAL(g), ocl_stream_err_arg(c)};
  int64_t win = 1; /* the outputs whose window may hold one input element */
  for (int k = 0; k < 3; k++) win *= adaptive ? g.O[k] / (g.I[k] ? g.I[k] : 1) + 1 : 1;
  st = ocl_enqueue_rows(c, OCL_K_maxpool3d_bwd, 5, a, g.B * g.I[0] * g.I[1], g.I[2] * win);
  if (st == RAL_OK) ocl_stream_arm(c);
  return st;
}

/* max_pool3d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices) */
ral_status ocl_max_pool3d_with_indices(const ral_kernel_call* c) { return max3_forward(c, 0); }

/* max_pool3d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
 * ceil_mode, indices) -> grad_input */
ral_status ocl_max_pool3d_with_indices_backward(const ral_kernel_call* c) { return max3_backward(c, 0); }

/* adaptive_max_pool3d(self, output_size) -> (out, indices): max pooling's rules over the
 * adaptive windows; indices flat per volume, as CPU's. */
ral_status ocl_adaptive_max_pool3d(const ral_kernel_call* c) { return max3_forward(c, 1); }

/* adaptive_max_pool3d_backward(grad_output, self, indices) -> grad_input */
ral_status ocl_adaptive_max_pool3d_backward(const ral_kernel_call* c) { return max3_backward(c, 1); }

/* Forward (big = x, small = y) or backward (big = grad_input, small = grad_output) of a 3-d
 * average pooling whose geometry g is complete: the host path, else the queued kernel. */
static ral_status avg3_run(const ral_kernel_call* c, ocl_pool3* g, const ral_tensor* big, const ral_tensor* small,
                           int backward) {
  ral_status st = RAL_OK;
  if (ocl_numel(backward ? big : small) == 0) return RAL_OK;
  if (!backward && g->I[0] * g->I[1] * g->I[2] == 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "empty input volume");
  if (ocl_inline_pool3(c, g, big, NULL, small, backward, &st)) return st;
  /* a window's work: its size, or an adaptive one's (about I / O + 1 per axis) */
  int64_t win = 1;
  for (int a = 0; a < 3; a++) win *= g->adaptive ? g->I[a] / (g->O[a] ? g->O[a] : 1) + 1 : g->k[a];
  ocl_arg a[4] = {ocl_mem(backward ? big : small), ocl_mem(backward ? small : big), OCL_VAL(*g)};
  if (backward) return ocl_enqueue_rows(c, OCL_K_avgpool3d_bwd, 3, a, g->B * g->I[0] * g->I[1], g->I[2] * win);
  return ocl_enqueue_rows(c, OCL_K_avgpool3d_fwd, 3, a, g->B * g->O[0] * g->O[1], g->O[2] * win);
}

/* count_include_pad (scalar 4) and divisor_override (scalar 5, None: 0). */
static ral_status avg3_options(const ral_kernel_call* c, ocl_pool3* g) {
  double f;
  int64_t v = 0;
  g->count_include_pad = ocl_scalar_i(c, 4, 1) != 0;
  if (ocl_scalar_num(c, 5, &f, &v) && v == 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "divisor must be not zero");
  g->divisor = v;
  return RAL_OK;
}

/* avg_pool3d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override) -> out */
ral_status ocl_avg_pool3d(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 5);
  if (st != RAL_OK) return st;
  const ral_tensor *x = ocl_in(c, 0), *y = ocl_out(c, 0);
  ocl_pool3 g;
  if ((st = volumes(c, x, y, &g, VOL_AVG)) != RAL_OK || (st = avg3_options(c, &g)) != RAL_OK) return st;
  return avg3_run(c, &g, x, y, 0);
}

/* avg_pool3d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override) -> grad_input */
ral_status ocl_avg_pool3d_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 5);
  if (st != RAL_OK) return st;
  const ral_tensor *gi = ocl_out(c, 0), *go = ocl_in(c, 0);
  ocl_pool3 g;
  if (!same_sizes(gi, ocl_in(c, 1))) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  if ((st = volumes(c, gi, go, &g, VOL_AVG)) != RAL_OK || (st = avg3_options(c, &g)) != RAL_OK) return st;
  return avg3_run(c, &g, gi, go, 1);
}

/* _adaptive_avg_pool3d(self, output_size) -> out (the size comes with the output) */
ral_status ocl_adaptive_avg_pool3d(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  ocl_pool3 g;
  if ((st = volumes(c, ocl_in(c, 0), ocl_out(c, 0), &g, VOL_ADAPTIVE)) != RAL_OK) return st;
  return avg3_run(c, &g, ocl_in(c, 0), ocl_out(c, 0), 0);
}

/* _adaptive_avg_pool3d_backward(grad_output, self) -> grad_input */
ral_status ocl_adaptive_avg_pool3d_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  const ral_tensor *gi = ocl_out(c, 0), *go = ocl_in(c, 0);
  ocl_pool3 g;
  if (!same_sizes(gi, ocl_in(c, 1))) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_input and self shapes differ");
  if ((st = volumes(c, gi, go, &g, VOL_ADAPTIVE)) != RAL_OK) return st;
  return avg3_run(c, &g, gi, go, 1);
}
