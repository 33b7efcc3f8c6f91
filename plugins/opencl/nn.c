/*
 * nn.c -- softmax family, layer norm and nll_loss. Inputs are contiguous float32 (the
 * manifest asks the router for contiguous tensors); rows map to work-groups.
 */
#include <math.h>
#include <string.h>

#include "ocl.h"

static ral_status require_f32_contiguous(const ral_kernel_call* c) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (ocl_absent(t)) continue;
    int index_arg = t->dtype == RAL_DTYPE_INT64; /* targets */
    if ((!index_arg && t->dtype != RAL_DTYPE_FLOAT32) || !ocl_is_contiguous(t))
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "tensor %d must be contiguous float32 (is %s%s)", i,
                      ocl_dtype_name(t->dtype), ocl_is_contiguous(t) ? "" : ", strided");
  }
  return RAL_OK;
}

/* Point buffer i at bufs[i] (offsets into g, handles into args) and append g itself. */
static void bind_rows(ocl_rows* g, const ral_tensor* const* bufs, int n, ocl_arg* args) {
  for (int i = 0; i < n; i++) {
    g->off[i] = ocl_elem_off(bufs[i]);
    args[i] = ocl_mem(bufs[i]);
  }
  args[n] = OCL_VAL(*g);
}

/* Work-group size for rows of `len` elements. */
static size_t row_local(const ral_kernel_call* c, int kid, int64_t len) {
  if (ocl_on_cpu(c)) return 1;
  size_t want = 1;
  while (want < (size_t)len && want < OCL_MAX_LOCAL) want *= 2;
  return ocl_local_size(ocl_device_get(c->device), kid, want);
}

/* Rows per work-item of a CPU-shaped row kernel: a few thousand elements each at least. */
static int64_t rows_per_item(int64_t len) { return len >= 4096 ? 1 : (4096 + len - 1) / (len > 0 ? len : 1); }

/* rows/len/inner of a reduction along `dim` of t. */
static ral_status rows_along(const ral_kernel_call* c, const ral_tensor* t, int64_t dim, ocl_rows* g) {
  memset(g, 0, sizeof *g);
  int d = ocl_wrap_dim(dim, t->ndim);
  if (d < 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dim %lld out of range", (long long)dim);
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < t->ndim; k++) {
    if (k < d) outer *= t->sizes[k];
    if (k > d) inner *= t->sizes[k];
  }
  g->len = t->ndim ? t->sizes[d] : 1;
  g->inner = inner;
  g->rows = outer * inner;
  return RAL_OK;
}

static ral_status softmax_fwd(const ral_kernel_call* c, int op) {
  ral_status st = ocl_check_arity(c, 1, 1, 1);
  if (st == RAL_OK) st = require_f32_contiguous(c);
  ocl_rows g;
  if (st == RAL_OK) st = rows_along(c, ocl_in(c, 0), ocl_scalar_i(c, 0, -1), &g);
  if (st != RAL_OK) return st;
  if (g.rows == 0 || g.len == 0) return RAL_OK;
  g.op = op;
  g.off[0] = ocl_elem_off(ocl_out(c, 0));
  g.off[1] = ocl_elem_off(ocl_in(c, 0));
  ocl_arg args[4] = {ocl_mem(ocl_out(c, 0)), ocl_mem(ocl_in(c, 0)), OCL_VAL(g)};
  if (ocl_on_cpu(c) && g.inner == 1)
    return ocl_enqueue_chunked(c, OCL_K_softmax_fwd_c, 3, args, g.rows, rows_per_item(g.len));
  size_t local = row_local(c, OCL_K_softmax_fwd, g.len), global = (size_t)g.rows * local;
  return ocl_enqueue(c, OCL_K_softmax_fwd, 3, args, 1, &global, &local);
}

/* _softmax(self, dim, half_to_float) */
static ral_status softmax_f32(const ral_kernel_call* c) { return softmax_fwd(c, 0); }
ral_status ocl_softmax(const ral_kernel_call* c) { return ocl_half_via_f32(c, softmax_f32); }
/* _log_softmax(self, dim, half_to_float) */
static ral_status log_softmax_f32(const ral_kernel_call* c) { return softmax_fwd(c, 1); }
ral_status ocl_log_softmax(const ral_kernel_call* c) { return ocl_half_via_f32(c, log_softmax_f32); }
/* _safe_softmax(self, dim, dtype?) */
static ral_status safe_softmax_f32(const ral_kernel_call* c) { return softmax_fwd(c, 2); }
ral_status ocl_safe_softmax(const ral_kernel_call* c) { return ocl_half_via_f32(c, safe_softmax_f32); }

static ral_status softmax_bwd(const ral_kernel_call* c, int op) {
  ral_status st = ocl_check_arity(c, 1, 2, 1);
  if (st == RAL_OK) st = require_f32_contiguous(c);
  ocl_rows g;
  if (st == RAL_OK) st = rows_along(c, ocl_in(c, 0), ocl_scalar_i(c, 0, -1), &g);
  if (st != RAL_OK) return st;
  if (g.rows == 0 || g.len == 0) return RAL_OK;
  g.op = op;
  for (int i = 0; i < 3; i++) g.off[i] = ocl_elem_off(&c->tensors[i]);
  ocl_arg args[5] = {ocl_mem(ocl_out(c, 0)), ocl_mem(ocl_in(c, 0)), ocl_mem(ocl_in(c, 1)), OCL_VAL(g)};
  if (ocl_on_cpu(c) && g.inner == 1)
    return ocl_enqueue_chunked(c, OCL_K_softmax_bwd_c, 4, args, g.rows, rows_per_item(g.len));
  size_t local = row_local(c, OCL_K_softmax_bwd, g.len), global = (size_t)g.rows * local;
  return ocl_enqueue(c, OCL_K_softmax_bwd, 4, args, 1, &global, &local);
}

/* _softmax_backward_data(grad_output, output, dim, input_dtype) */
static ral_status softmax_backward_f32(const ral_kernel_call* c) { return softmax_bwd(c, 0); }
ral_status ocl_softmax_backward(const ral_kernel_call* c) { return ocl_half_via_f32(c, softmax_backward_f32); }
/* _log_softmax_backward_data(grad_output, output, dim, input_dtype) */
static ral_status log_softmax_backward_f32(const ral_kernel_call* c) { return softmax_bwd(c, 1); }
ral_status ocl_log_softmax_backward(const ral_kernel_call* c) { return ocl_half_via_f32(c, log_softmax_backward_f32); }

/* rows x len split of a layer norm input by normalized_shape (scalars[0]). */
static ral_status norm_rows(const ral_kernel_call* c, const ral_tensor* x, ocl_rows* g) {
  memset(g, 0, sizeof *g);
  int nn;
  const int64_t* shape = ocl_scalar_list(c, 0, &nn);
  if (!shape || nn > x->ndim) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad normalized_shape");
  g->len = 1;
  g->rows = 1;
  for (int k = 0; k < x->ndim; k++) {
    if (k < x->ndim - nn)
      g->rows *= x->sizes[k];
    else
      g->len *= x->sizes[k];
  }
  g->inner = 1;
  return RAL_OK;
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd) */
static ral_status layer_norm_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 3, 3, 2);
  if (st == RAL_OK) st = require_f32_contiguous(c);
  ocl_rows g;
  if (st == RAL_OK) st = norm_rows(c, ocl_in(c, 0), &g);
  if (st != RAL_OK) return st;
  if (g.rows == 0) return RAL_OK;
  g.eps = (float)ocl_scalar_f(c, 1, 1e-5);
  g.flags = (ocl_absent(ocl_in(c, 1)) ? 0 : 1) | (ocl_absent(ocl_in(c, 2)) ? 0 : 2);
  const ral_tensor* bufs[6] = {ocl_out(c, 0), ocl_out(c, 1), ocl_out(c, 2), ocl_in(c, 0), ocl_in(c, 1), ocl_in(c, 2)};
  for (int i = 4; i < 6; i++)
    if (ocl_absent(bufs[i])) bufs[i] = bufs[0];
  ocl_arg args[8];
  bind_rows(&g, bufs, 6, args);
  if (ocl_on_cpu(c))
    return ocl_enqueue_chunked(c, OCL_K_layer_norm_fwd_c, 7, args, g.rows, rows_per_item(g.len));
  size_t local = row_local(c, OCL_K_layer_norm_fwd, g.len), global = (size_t)g.rows * local;
  return ocl_enqueue(c, OCL_K_layer_norm_fwd, 7, args, 1, &global, &local);
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
 * output_mask) -> (grad_input, grad_weight, grad_bias); masked-off outputs may be absent. */
static ral_status layer_norm_backward_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 3, 6, 2);
  if (st == RAL_OK) st = require_f32_contiguous(c);
  ocl_rows g;
  if (st == RAL_OK) st = norm_rows(c, ocl_in(c, 1), &g);
  if (st != RAL_OK) return st;
  int nm;
  const int64_t* mask = ocl_scalar_list(c, 1, &nm);
  int want[3];
  for (int i = 0; i < 3; i++) want[i] = !ocl_absent(ocl_out(c, i)) && (!mask || i >= nm || mask[i]);
  const ral_tensor *go = ocl_in(c, 0), *x = ocl_in(c, 1), *mean = ocl_in(c, 2), *rstd = ocl_in(c, 3);
  const ral_tensor* w = ocl_in(c, 4);
  if (want[0] && g.rows > 0) {
    ocl_rows gi = g;
    gi.flags = ocl_absent(w) ? 0 : 1;
    const ral_tensor* bufs[6] = {ocl_out(c, 0), go, x, mean, rstd, ocl_absent(w) ? go : w};
    ocl_arg args[8];
    bind_rows(&gi, bufs, 6, args);
    size_t local = row_local(c, OCL_K_layer_norm_bwd_input, g.len), global = (size_t)g.rows * local;
    st = ocl_on_cpu(c)
             ? ocl_enqueue_chunked(c, OCL_K_layer_norm_bwd_input_c, 7, args, g.rows, rows_per_item(g.len))
             : ocl_enqueue(c, OCL_K_layer_norm_bwd_input, 7, args, 1, &global, &local);
    if (st != RAL_OK) return st;
  }
  if (!want[1] && !want[2]) return RAL_OK;
  ocl_rows gp = g;
  gp.flags = (want[1] ? 1 : 0) | (want[2] ? 2 : 0);
  const ral_tensor* gw = want[1] ? ocl_out(c, 1) : go;
  const ral_tensor* gb = want[2] ? ocl_out(c, 2) : go;
  const ral_tensor* bufs[6] = {gw, gb, go, x, mean, rstd};
  ocl_arg args[7];
  bind_rows(&gp, bufs, 6, args);
  size_t local = 64, global = (size_t)g.len;
  if (ocl_on_cpu(c) && g.len % 16 == 0) { /* 16 columns per work-item */
    local = 1;
    global = (size_t)(g.len / 16);
    return ocl_enqueue(c, OCL_K_layer_norm_bwd_params_c, 7, args, 1, &global, &local);
  }
  return ocl_enqueue(c, OCL_K_layer_norm_bwd_params, 7, args, 1, &global, &local);
}

/* rows (N) and classes (C) of an nll_loss input [N, C] or [C]; target must be int64. */
static ral_status nll_rows(const ral_kernel_call* c, const ral_tensor* x, const ral_tensor* target, ocl_rows* g) {
  memset(g, 0, sizeof *g);
  if (x->ndim < 1 || x->ndim > 2 || target->dtype != RAL_DTYPE_INT64)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "nll_loss takes [N, C] or [C] input and int64 target");
  g->rows = x->ndim == 2 ? x->sizes[0] : 1;
  g->len = x->sizes[x->ndim - 1];
  g->inner = 1;
  return RAL_OK;
}

/* nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight) */
static ral_status nll_loss_forward_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 2, 3, 2);
  if (st == RAL_OK) st = require_f32_contiguous(c);
  ocl_rows g;
  if (st == RAL_OK) st = nll_rows(c, ocl_in(c, 0), ocl_in(c, 1), &g);
  if (st != RAL_OK) return st;
  g.op = (int32_t)ocl_scalar_i(c, 0, 1);
  g.li0 = ocl_scalar_i(c, 1, -100);
  const ral_tensor* w = ocl_in(c, 2);
  g.flags = ocl_absent(w) ? 0 : 1;
  const ral_tensor* bufs[5] = {ocl_out(c, 0), ocl_out(c, 1), ocl_in(c, 0), ocl_in(c, 1), ocl_absent(w) ? ocl_in(c, 0) : w};
  ocl_arg args[7];
  bind_rows(&g, bufs, 5, args);
  args[6] = ocl_stream_err_arg(c); /* out-of-range targets: IndexError at the next sync */
  size_t local = row_local(c, OCL_K_nll_fwd, g.rows), global = local;
  st = ocl_enqueue(c, OCL_K_nll_fwd, 7, args, 1, &global, &local);
  if (st == RAL_OK) ocl_stream_arm(c);
  return st;
}

/* nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight) */
static ral_status nll_loss_backward_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 5, 2);
  if (st == RAL_OK) st = require_f32_contiguous(c);
  ocl_rows g;
  if (st == RAL_OK) st = nll_rows(c, ocl_in(c, 1), ocl_in(c, 2), &g);
  if (st != RAL_OK) return st;
  g.op = (int32_t)ocl_scalar_i(c, 0, 1);
  g.li0 = ocl_scalar_i(c, 1, -100);
  const ral_tensor* w = ocl_in(c, 3);
  g.flags = ocl_absent(w) ? 0 : 1;
  const ral_tensor* bufs[5] = {ocl_out(c, 0), ocl_in(c, 0), ocl_in(c, 2), ocl_absent(w) ? ocl_in(c, 0) : w, ocl_in(c, 4)};
  ocl_arg args[6];
  bind_rows(&g, bufs, 5, args);
  size_t local = ocl_flat_local(c, OCL_K_nll_bwd), global = (size_t)(g.rows * g.len);
  return ocl_enqueue(c, OCL_K_nll_bwd, 6, args, 1, &global, &local);
}

/* Element strides of t viewed as [B, H, rows, cols] (t->ndim <= 4, right-aligned, size-1
 * or missing dims broadcast with stride 0); 0 if t does not broadcast to that shape. */
static int bcast_strides4(const ral_tensor* t, const int64_t want[4], g_i64 st[4]) {
  if (t->ndim > 4) return 0;
  for (int k = 0; k < 4; k++) {
    int src = k - (4 - t->ndim);
    if (src < 0) {
      st[k] = 0;
      continue;
    }
    if (t->sizes[src] == want[k])
      st[k] = want[k] == 1 ? 0 : t->strides[src];
    else if (t->sizes[src] == 1)
      st[k] = 0;
    else
      return 0;
  }
  return 1;
}

/* sdpa_fwd_c's shape: head sizes a multiple of 16 up to 128, unit stride along them, and
 * 16-float-aligned row starts are not needed (vload16 takes any float alignment). */
static int sdpa_vector_ok(const ocl_sdpa* g, const ral_tensor* q, const ral_tensor* k, const ral_tensor* v,
                          const ral_tensor* o) {
  if (g->E % 16 || g->Ev % 16 || g->E == 0 || g->Ev == 0 || g->E > 128 || g->Ev > 128) return 0;
  return q->strides[3] == 1 && k->strides[3] == 1 && v->strides[3] == 1 && o->strides[3] == 1;
}

/* _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *,
 * attn_mask?, scale?) -> (output, logsumexp): one launch, any strides, float32 4-D q/k/v
 * with equal batch and heads, a mask broadcastable to [B, H, L, S]: float32 (added to the
 * scores) or bool (False = not attended). */
static ral_status sdpa_forward_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 2, 4, 3);
  if (st != RAL_OK) return st;
  const ral_tensor *o = ocl_out(c, 0), *ls = ocl_out(c, 1), *q = ocl_in(c, 0), *k = ocl_in(c, 1), *v = ocl_in(c, 2);
  const ral_tensor* mk = ocl_in(c, 3);
  int has_mask = !ocl_absent(mk);
  if (ocl_scalar_f(c, 0, 0.0) != 0.0)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention has no dropout (dropout_p=%g)", ocl_scalar_f(c, 0, 0.0));
  const ral_tensor* all[6] = {o, ls, q, k, v, mk};
  if (has_mask && mk->dtype == RAL_DTYPE_BOOL) has_mask = 2;
  for (int t = 0; t < 6; t++)
    if (!(t == 5 && has_mask != 1) && all[t]->dtype != RAL_DTYPE_FLOAT32)
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention tensor %d must be float32 (is %s)", t,
                      ocl_dtype_name(all[t]->dtype));
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || o->ndim != 4 || ls->ndim != 3)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention needs 4-D query/key/value");
  ocl_sdpa g;
  memset(&g, 0, sizeof g);
  g.B = q->sizes[0], g.H = q->sizes[1], g.L = q->sizes[2], g.E = q->sizes[3];
  g.S = k->sizes[2], g.Ev = v->sizes[3];
  if (k->sizes[0] != g.B || v->sizes[0] != g.B || k->sizes[1] != g.H || v->sizes[1] != g.H ||
      k->sizes[3] != g.E || v->sizes[2] != g.S || o->sizes[0] != g.B || o->sizes[1] != g.H ||
      o->sizes[2] != g.L || o->sizes[3] != g.Ev || ls->sizes[0] != g.B || ls->sizes[1] != g.H || ls->sizes[2] != g.L)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention shapes disagree (query, key, value, heads)");
  if (g.E > OCL_SDPA_MAXE || g.Ev > OCL_SDPA_MAXE)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention head size %lld > %d",
                    (long long)(g.E > g.Ev ? g.E : g.Ev), OCL_SDPA_MAXE);
  for (int d = 0; d < 4; d++) {
    g.sq[d] = q->strides[d], g.sk[d] = k->strides[d], g.sv[d] = v->strides[d], g.so[d] = o->strides[d];
    if (d < 3) g.sl[d] = ls->strides[d];
  }
  int64_t mshape[4] = {g.B, g.H, g.L, g.S};
  if (has_mask && !bcast_strides4(mk, mshape, g.sm))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "attn_mask does not broadcast to [B, H, L, S]");
  g.off_q = ocl_elem_off(q), g.off_k = ocl_elem_off(k), g.off_v = ocl_elem_off(v);
  g.off_o = ocl_elem_off(o), g.off_l = ocl_elem_off(ls), g.off_m = has_mask ? ocl_elem_off(mk) : 0;
  g.has_mask = has_mask;
  g.causal = ocl_scalar_i(c, 1, 0) != 0;
  g.scale = (float)ocl_scalar_f(c, 2, g.E > 0 ? 1.0 / sqrt((double)g.E) : 1.0);
  size_t rows = (size_t)(g.B * g.H * g.L);
  if (rows == 0) return RAL_OK;
  ocl_device* d = ocl_device_get(c->device);
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  ocl_arg args[9] = {ocl_mem(o),  ocl_mem(ls), ocl_mem(q), ocl_mem(k), ocl_mem(v), ocl_mem(has_mask == 1 ? mk : q),
                     ocl_mem(has_mask == 2 ? mk : q), OCL_VAL(g)};
  if (d->cpu && sdpa_vector_ok(&g, q, k, v, o)) {
    /* About 128 work-items of consecutive query rows of one head (K and V stay in cache). */
    int64_t rows_per = (int64_t)rows / 128;
    if (rows_per < 1) rows_per = 1;
    if (rows_per > g.L) rows_per = g.L;
    size_t global = (size_t)(g.B * g.H * ((g.L + rows_per - 1) / rows_per)), local = 1;
    args[8] = OCL_VAL(rows_per);
    return ocl_enqueue(c, OCL_K_sdpa_fwd_c, 9, args, 1, &global, &local);
  }
  size_t local = d->cpu ? 1 : ocl_local_size(d, OCL_K_sdpa_fwd, 64);
  size_t global = (rows + local - 1) / local * local;
  return ocl_enqueue(c, OCL_K_sdpa_fwd, 8, args, 1, &global, &local);
}

/* float16/bfloat16 calls widen to float32 and round each output once (half.c), as CPU. */
ral_status ocl_layer_norm(const ral_kernel_call* c) { return ocl_half_via_f32(c, layer_norm_f32); }
ral_status ocl_layer_norm_backward(const ral_kernel_call* c) { return ocl_half_via_f32(c, layer_norm_backward_f32); }
ral_status ocl_nll_loss_forward(const ral_kernel_call* c) { return ocl_half_via_f32(c, nll_loss_forward_f32); }
ral_status ocl_nll_loss_backward(const ral_kernel_call* c) { return ocl_half_via_f32(c, nll_loss_backward_f32); }
ral_status ocl_sdpa_forward(const ral_kernel_call* c) { return ocl_half_via_f32(c, sdpa_forward_f32); }
