/*
 * index.c -- embedding (+ dense backward), gather, scatter, index_select, cat, tril/triu,
 * constant_pad_nd and slice_backward. Geometry is passed per dim (never coalesced:
 * these kernels need the real dims).
 */
#include <string.h>

#include "ocl.h"

/* A geometry over t's shape with operand k's strides/offset/dtype taken from ts[k]. */
static void raw_geom(ocl_geom* g, const ral_tensor* shape, const ral_tensor* const* ts, int nt) {
  memset(g, 0, sizeof *g);
  g->ndim = shape->ndim ? shape->ndim : 1;
  g->size[0] = 1;
  for (int d = 0; d < shape->ndim; d++) g->size[d] = shape->sizes[d];
  g->n = ocl_numel(shape);
  for (int k = 0; k < nt; k++) {
    for (int d = 0; d < ts[k]->ndim && d < OCL_MAXR; d++) g->st[k][d] = ts[k]->strides[d];
    g->off[k] = ocl_elem_off(ts[k]);
    g->dt[k] = ts[k]->dtype;
  }
  g->cfl = ocl_dtype_is_float(ts[0]->dtype);
}

/* Launch one of the element-per-work-item index kernels over g->n items; `checked`
 * kernels take the stream's fault record as a last argument (bounds-checked indices). */
static ral_status launch_geom_ex(const ral_kernel_call* c, int kid, const ral_tensor* const* bufs, int nb,
                                 ocl_geom* g, int checked) {
  if (g->n == 0) return RAL_OK;
  ocl_arg args[5];
  for (int i = 0; i < nb; i++) args[i] = ocl_mem(bufs[i]);
  args[nb] = OCL_VAL(*g);
  if (checked) args[nb + 1] = ocl_stream_err_arg(c);
  size_t global = (size_t)g->n, local = ocl_flat_local(c, kid);
  ral_status st = ocl_enqueue(c, kid, nb + 1 + checked, args, 1, &global, &local);
  if (st == RAL_OK && checked) ocl_stream_arm(c);
  return st;
}

static ral_status launch_geom(const ral_kernel_call* c, int kid, const ral_tensor* const* bufs, int nb, ocl_geom* g) {
  return launch_geom_ex(c, kid, bufs, nb, g, 0);
}

/* 0-d tensors index like 1-d tensors of one element (as in PyTorch's gather/scatter). */
static int rank1(const ral_tensor* t) { return t->ndim ? t->ndim : 1; }
static int64_t size1(const ral_tensor* t, int dim) { return t->ndim ? t->sizes[dim] : 1; }

static int index_dtype_ok(const ral_tensor* t) {
  return t->dtype == RAL_DTYPE_INT64 || t->dtype == RAL_DTYPE_INT32;
}

/* embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse) */
ral_status ocl_embedding(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *w = ocl_in(c, 0), *idx = ocl_in(c, 1);
  int wide = w->dtype == RAL_DTYPE_FLOAT32, half = ocl_is_half(w->dtype);
  if (w->ndim != 2 || !(wide || half) || out->dtype != w->dtype || !ocl_is_contiguous(w) || !ocl_is_contiguous(idx) ||
      !index_dtype_ok(idx))
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED,
                    "needs a contiguous float32/float16/bfloat16 [V, D] weight and int64/int32 indices");
  ocl_rows g;
  memset(&g, 0, sizeof g);
  g.rows = ocl_numel(idx);
  g.len = w->sizes[1];
  g.flags = idx->dtype;
  g.op = wide ? 4 : 2;
  g.off[0] = ocl_elem_off(out);
  g.off[1] = ocl_elem_off(w);
  g.off[2] = ocl_elem_off(idx);
  g.li1 = w->sizes[0];
  if (g.rows * g.len == 0) return RAL_OK;
  ocl_arg args[5] = {ocl_mem(out), ocl_mem(w), ocl_mem(idx), OCL_VAL(g), ocl_stream_err_arg(c)};
  size_t global = (size_t)(g.rows * g.len), local = ocl_flat_local(c, OCL_K_embedding_fwd);
  st = ocl_enqueue(c, OCL_K_embedding_fwd, 5, args, 1, &global, &local);
  if (st == RAL_OK) ocl_stream_arm(c);
  return st;
}

/* embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq) */
ral_status ocl_embedding_dense_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 3);
  if (st != RAL_OK) return st;
  const ral_tensor *gw = ocl_out(c, 0), *go = ocl_in(c, 0), *idx = ocl_in(c, 1);
  if (gw->dtype != RAL_DTYPE_FLOAT32 || go->dtype != RAL_DTYPE_FLOAT32 || !ocl_is_contiguous(go) ||
      !ocl_is_contiguous(idx) || !index_dtype_ok(idx))
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "needs contiguous float32 grads and int64/int32 indices");
  st = ocl_zero_tensor(c, gw);
  if (st != RAL_OK) return st;
  ocl_rows g;
  memset(&g, 0, sizeof g);
  g.rows = ocl_numel(idx);
  g.len = gw->ndim == 2 ? gw->sizes[1] : 1;
  g.li0 = ocl_scalar_i(c, 1, -1);
  g.op = idx->dtype;
  g.flags = ocl_scalar_i(c, 2, 0) ? 1 : 0;
  g.off[0] = ocl_elem_off(gw);
  g.off[1] = ocl_elem_off(go);
  g.off[2] = ocl_elem_off(idx);
  g.li1 = gw->ndim >= 1 ? gw->sizes[0] : 1;
  if (g.rows == 0 || g.len == 0) return RAL_OK;
  ocl_arg args[5] = {ocl_mem(gw), ocl_mem(go), ocl_mem(idx), OCL_VAL(g), ocl_stream_err_arg(c)};
  size_t global = (size_t)g.len, local = 64;
  st = ocl_enqueue(c, OCL_K_embedding_bwd, 5, args, 1, &global, &local);
  if (st == RAL_OK) ocl_stream_arm(c);
  return st;
}

/* gather(self, dim, index, sparse_grad): outputs [out]; inputs [self, index]. */
ral_status ocl_gather(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 1);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *self = ocl_in(c, 0), *index = ocl_in(c, 1);
  int dim = ocl_wrap_dim(ocl_scalar_i(c, 0, 0), self->ndim);
  /* An empty index reads nothing: CPU's gather/scatter accept it of any integer dtype and rank
   * (a gather's backward scatters through the forward's empty uint8 index). */
  if (dim >= 0 && ocl_numel(index) == 0) return RAL_OK; /* an empty result */
  if (dim < 0 || !index_dtype_ok(index) || rank1(index) != rank1(self))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim or index for gather");
  const ral_tensor* ts[3] = {out, self, index};
  ocl_geom g;
  raw_geom(&g, index, ts, 3);
  g.li[0] = dim;
  g.li[1] = size1(self, dim);
  return launch_geom_ex(c, OCL_K_gather_k, ts, 3, &g, 1);
}

/* index_select(self, dim, index): index is 1-D. */
ral_status ocl_index_select(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 1);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *self = ocl_in(c, 0), *index = ocl_in(c, 1);
  int dim = ocl_wrap_dim(ocl_scalar_i(c, 0, 0), self->ndim);
  if (dim < 0 || !index_dtype_ok(index) || index->ndim > 1 || self->ndim == 0)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "index_select needs a 1-D int64/int32 index and rank >= 1");
  const ral_tensor* ts[3] = {out, self, index};
  ocl_geom g;
  raw_geom(&g, out, ts, 3);
  g.st[2][0] = index->ndim ? index->strides[0] : 0;
  g.li[0] = dim;
  g.li[1] = self->sizes[dim];
  if (ocl_inline_index_select(c, &g, ts, &st)) return st;
  return launch_geom_ex(c, OCL_K_index_select_k, ts, 3, &g, 1);
}

/* scatter.src / scatter_add(self, dim, index, src): out = self, then one pass per line. */
static ral_status scatter_run(const ral_kernel_call* c, int add) {
  ral_status st = ocl_check_arity(c, 1, 3, 1);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *self = ocl_in(c, 0), *index = ocl_in(c, 1), *src = ocl_in(c, 2);
  int dim = ocl_wrap_dim(ocl_scalar_i(c, 0, 0), self->ndim);
  if (dim >= 0 && ocl_numel(index) == 0) return ocl_copy_tensor(c, out, self); /* CPU: any rank */
  if (dim < 0 || !index_dtype_ok(index) || rank1(index) != rank1(self) || rank1(src) != rank1(self))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim, index or src for scatter");
  st = ocl_copy_tensor(c, out, self);
  if (st != RAL_OK) return st;
  const ral_tensor* ts[3] = {out, index, src};
  ocl_geom g;
  raw_geom(&g, index, ts, 3);
  g.li[0] = dim;
  g.li[1] = size1(index, dim);
  g.li[2] = size1(out, dim);
  g.n = g.li[1] ? g.n / g.li[1] : 0;
  g.size[dim] = 1;
  g.op = add;
  return launch_geom_ex(c, OCL_K_scatter_k, ts, 3, &g, 1);
}
ral_status ocl_scatter_src(const ral_kernel_call* c) { return scatter_run(c, 0); }
ral_status ocl_scatter_add(const ral_kernel_call* c) { return scatter_run(c, 1); }

/* cat(tensors, dim): each input is copied into its slice of the output. */
ral_status ocl_cat(const ral_kernel_call* c) {
  if (c->n_outputs != 1) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "cat has one output");
  const ral_tensor* out = ocl_out(c, 0);
  int64_t dim_arg = ocl_scalar_i(c, 1, 0);
  int dim = ocl_wrap_dim(dim_arg, out->ndim);
  if (dim < 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dim %lld out of range", (long long)dim_arg);
  int64_t at = 0;
  for (int i = 0; i < c->n_inputs; i++) {
    const ral_tensor* in = ocl_in(c, i);
    if (in->ndim == 1 && in->sizes[0] == 0 && out->ndim != 1) continue; /* legacy empty inputs */
    if (in->ndim != out->ndim)
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input %d has rank %d, output %d", i, in->ndim, out->ndim);
    ocl_view slice;
    slice.t = *out;
    memcpy(slice.sizes, out->sizes, sizeof(int64_t) * (size_t)out->ndim);
    memcpy(slice.strides, out->strides, sizeof(int64_t) * (size_t)out->ndim);
    slice.sizes[dim] = in->sizes[dim];
    slice.t.sizes = slice.sizes;
    slice.t.strides = slice.strides;
    slice.t.byte_offset += (uint64_t)(at * out->strides[dim] * ocl_dtype_size(out->dtype));
    ral_status st = ocl_copy_tensor(c, &slice.t, in);
    if (st != RAL_OK) return st;
    at += in->sizes[dim];
  }
  return RAL_OK;
}

static ral_status tri_run(const ral_kernel_call* c, int upper) {
  ral_status st = ocl_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *in = ocl_in(c, 0);
  if (in->ndim < 2 || !ocl_is_contiguous(in) || !ocl_is_contiguous(out))
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "tril/triu need contiguous tensors of rank >= 2");
  const ral_tensor* ts[2] = {out, in};
  ocl_geom g;
  raw_geom(&g, out, ts, 2);
  g.li[0] = in->sizes[in->ndim - 2];
  g.li[1] = in->sizes[in->ndim - 1];
  g.li[2] = ocl_scalar_i(c, 0, 0);
  g.op = upper;
  if (ocl_on_cpu(c) && in->dtype == RAL_DTYPE_FLOAT32 && out->dtype == RAL_DTYPE_FLOAT32 &&
      out->data != in->data && g.n > 0) {
    ocl_arg args[4] = {ocl_mem(out), ocl_mem(in), OCL_VAL(g)};
    int64_t cols = g.li[1] > 0 ? g.li[1] : 1;
    return ocl_enqueue_chunked(c, OCL_K_tri_c, 3, args, g.n / cols, (4096 + cols - 1) / cols);
  }
  return launch_geom(c, OCL_K_tri_k, ts, 2, &g);
}
/* tril(self, diagonal) */
ral_status ocl_tril(const ral_kernel_call* c) { return tri_run(c, 0); }
/* triu(self, diagonal) */
ral_status ocl_triu(const ral_kernel_call* c) { return tri_run(c, 1); }

/* constant_pad_nd(self, pad, value): pad pairs run from the last dim backwards. */
ral_status ocl_constant_pad_nd(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 1);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *in = ocl_in(c, 0);
  int np;
  const int64_t* pad = ocl_scalar_list(c, 0, &np);
  if (np % 2 || np / 2 > in->ndim) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad pad list");
  const ral_tensor* ts[2] = {out, in};
  ocl_geom g;
  raw_geom(&g, out, ts, 2);
  for (int d = 0; d < in->ndim; d++) {
    int k = in->ndim - 1 - d; /* pair index for dim d */
    g.st[2][d] = k < np / 2 ? pad[2 * k] : 0;
    g.st[3][d] = in->sizes[d];
  }
  double f = 0;
  int64_t v = 0;
  ocl_scalar_num(c, 1, &f, &v);
  g.lf[1] = (float)f;
  g.li[3] = v;
  if (out->dtype == RAL_DTYPE_FLOAT64) memcpy(&g.li[3], &f, sizeof f); /* pad_k reads the double's bits */
  return launch_geom(c, OCL_K_pad_k, ts, 2, &g);
}

/* slice_backward(grad_output, input_sizes, dim, start, end, step) */
ral_status ocl_slice_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 5);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *grad = ocl_in(c, 0);
  int dim = ocl_wrap_dim(ocl_scalar_i(c, 1, 0), out->ndim);
  if (dim < 0 || out->ndim == 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim");
  int64_t n = out->sizes[dim], start = ocl_scalar_i(c, 2, 0), end = ocl_scalar_i(c, 3, n), step = ocl_scalar_i(c, 4, 1);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = start < 0 ? 0 : start > n ? n : start;
  end = end < start ? start : end > n ? n : end;
  if (step < 1) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "step must be positive");
  const ral_tensor* ts[2] = {out, grad};
  ocl_geom g;
  raw_geom(&g, out, ts, 2);
  g.li[0] = dim;
  g.li[1] = start;
  g.li[2] = end;
  g.flags = (int32_t)step;
  return launch_geom(c, OCL_K_slice_bwd_k, ts, 2, &g);
}
