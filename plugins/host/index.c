/*
 * index.c -- kernels that move data by int64 indices: embedding (+ dense backward),
 * gather, scatter / scatter_add, index_select. An index out of range fails the kernel
 * with the offending value in the message (never reads out of bounds).
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"

static int64_t index_at(const ral_tensor* ix, int64_t off) {
  const char* p = host_ptr(ix);
  return ix->dtype == RAL_DTYPE_INT64 ? ((const int64_t*)p)[off] : ((const int32_t*)p)[off];
}

static ral_status check_index_dtype(const ral_kernel_call* c, const ral_tensor* ix) {
  if (ix->dtype != RAL_DTYPE_INT64 && ix->dtype != RAL_DTYPE_INT32)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "index must be int64, got %s",
                     host_dtype_name(ix->dtype));
  return RAL_OK;
}

/* Element offset of the row-major linear position l of `shape` under `strides`, leaving
 * out dim `skip` (-1: none). */
static int64_t offset_of(int64_t l, int ndim, const int64_t* shape, const int64_t* strides,
                         int skip) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; d--) {
    int64_t i = l % shape[d];
    l /= shape[d];
    if (d != skip) off += i * strides[d];
  }
  return off;
}

/* ---------------------------------------------------------------- embedding */
/* embedding(weight [V, D], indices, padding_idx, scale_grad_by_freq, sparse) -> [*, D] */
ral_status host_embedding(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 2, 0);
  const ral_tensor *out = host_out(c, 0), *w = host_in(c, 0), *ix = host_in(c, 1);
  if (st == RAL_OK) st = check_index_dtype(c, ix);
  if (st != RAL_OK) return st;
  if (w->ndim != 2 || out->dtype != w->dtype || !host_is_contiguous(w) || !host_is_contiguous(ix) ||
      !host_is_contiguous(out))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expects a contiguous 2-d weight and indices");
  int64_t V = w->sizes[0], D = w->sizes[1], n = host_numel(ix);
  if (host_numel(out) != n * D)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output size is not numel(indices) * dim");
  int64_t row = D * host_dtype_size(w->dtype), bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i++) {
    int64_t t = index_at(ix, i);
    if (t < 0 || t >= V) bad = i;
  }
  if (bad >= 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "index %lld is out of range for %lld rows",
                     (long long)index_at(ix, bad), (long long)V);
#pragma omp parallel for schedule(static) if (n * D > HOST_GRAIN)
  for (int64_t i = 0; i < n; i++)
    memcpy(host_ptr(out) + i * row, host_ptr(w) + index_at(ix, i) * row, (size_t)row);
  return RAL_OK;
}

/* grad rows added into acc rows, columns [d0, d1) only: each thread owns a column slice. */
#define EMB_ACCUMULATE(T, acc, g)                                                    \
  _Pragma("omp parallel if (n * D > HOST_GRAIN && D >= 64)") {                       \
    int nt = omp_get_num_threads(), tid = omp_get_thread_num();                      \
    int64_t d0 = D * tid / nt, d1 = D * (tid + 1) / nt;                              \
    for (int64_t i = 0; i < n; i++) {                                                \
      int64_t t = index_at(ix, i);                                                   \
      if (t == pad) continue;                                                        \
      T s = counts ? (T)1 / (T)counts[t] : (T)1;                                     \
      T* a = (acc) + t * D;                                                          \
      const T* gr = (g) + i * D;                                                     \
      for (int64_t d = d0; d < d1; d++) a[d] += gr[d] * s;                           \
    }                                                                                \
  }

/* embedding_dense_backward(grad [*, D], indices, num_weights, padding_idx,
 * scale_grad_by_freq) -> [num_weights, D] */
ral_status host_embedding_dense_backward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 2, 3);
  const ral_tensor *out = host_out(c, 0), *g = host_in(c, 0), *ix = host_in(c, 1);
  if (st == RAL_OK) st = check_index_dtype(c, ix);
  if (st != RAL_OK) return st;
  int64_t V = host_scalar_int(c, 0, 0), pad = host_scalar_int(c, 1, -1);
  int freq = (int)host_scalar_int(c, 2, 0);
  int64_t n = host_numel(ix), D = out->ndim == 2 ? out->sizes[1] : 0;
  if (out->ndim != 2 || out->sizes[0] != V || host_numel(g) != n * D || !host_dtype_is_float(g->dtype) ||
      out->dtype != g->dtype || !host_is_contiguous(out) || !host_is_contiguous(g) ||
      !host_is_contiguous(ix))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "shapes or dtypes do not match");
  for (int64_t i = 0; i < n; i++) {
    int64_t t = index_at(ix, i);
    if ((t < 0 || t >= V) && t != pad)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "index %lld is out of range for %lld rows",
                       (long long)t, (long long)V);
  }
  int64_t* counts = NULL;
  if (freq) {
    counts = calloc((size_t)(V ? V : 1), sizeof(int64_t));
    if (!counts) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "no memory for counts");
    for (int64_t i = 0; i < n; i++) counts[index_at(ix, i)]++;
  }
  host_fill(out, 0, 0);
  if (out->dtype == RAL_DTYPE_FLOAT64) {
    EMB_ACCUMULATE(double, (double*)host_ptr(out), (const double*)host_ptr(g))
  } else {
    /* float32 accumulates in place; half types accumulate in a float copy */
    int direct = out->dtype == RAL_DTYPE_FLOAT32;
    float* acc = direct ? (float*)host_ptr(out) : calloc((size_t)(V * D + 1), sizeof(float));
    float* gf = direct ? (float*)host_ptr(g) : malloc(sizeof(float) * (size_t)(n * D + 1));
    if (!acc || !gf) {
      if (!direct) {
        free(acc);
        free(gf);
      }
      free(counts);
      return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "no memory for the float accumulator");
    }
    if (!direct) host_load_float(gf, host_ptr(g), g->dtype, n * D);
    EMB_ACCUMULATE(float, acc, gf)
    if (!direct) {
      host_store_float(host_ptr(out), out->dtype, acc, V * D);
      free(acc);
      free(gf);
    }
  }
  free(counts);
  return RAL_OK;
}

/* ---------------------------------------------------------------- gather / scatter */
typedef enum { G_GATHER, G_SCATTER, G_SCATTER_ADD } gather_kind;

/* gather: out[p] = self[p with p[dim] = index[p]];
 * scatter(_add): out = self; out[p with p[dim] = index[p]] (+)= src[p]. */
/* aten treats a 0-dim tensor as 1-dim of size 1 when the other operand is 0- or 1-dim
 * (gather(tensor(5.), 0, tensor([0])) is [5.]): the 1-dim view of t, in *one. */
static const ral_tensor* as_1d(const ral_tensor* t, ral_tensor* one, int64_t size[1], int64_t stride[1]) {
  if (!t || t->ndim != 0) return t;
  *one = *t;
  size[0] = 1;
  stride[0] = 0;
  one->ndim = 1;
  one->sizes = size;
  one->strides = stride;
  return one;
}

static ral_status gather_scatter(const ral_kernel_call* c, gather_kind kind) {
  int n_in = kind == G_GATHER ? 2 : 3;
  ral_status st = host_check_arity(c, 1, n_in, 1);
  if (st != RAL_OK) return st;
  const ral_tensor *out = host_out(c, 0), *self = host_in(c, 0), *ix = host_in(c, 1);
  const ral_tensor* src = kind == G_GATHER ? NULL : host_in(c, 2);
  ral_tensor one[4];
  int64_t sz[4][1], sd[4][1];
  if (self->ndim <= 1 && ix->ndim <= 1) {
    out = as_1d(out, &one[0], sz[0], sd[0]);
    self = as_1d(self, &one[1], sz[1], sd[1]);
    ix = as_1d(ix, &one[2], sz[2], sd[2]);
    src = as_1d(src, &one[3], sz[3], sd[3]);
  }
  int dim = host_wrap_dim(host_scalar_int(c, 0, 0), self->ndim);
  /* An empty index reads nothing: CPU's gather/scatter accept it of any integer dtype and rank
   * (a gather's backward scatters through the forward's empty uint8 index). */
  if (dim >= 0 && host_numel(ix) == 0)
    return src && host_copy(out, self) != RAL_OK ? host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "%s", host_last_error())
                                                : RAL_OK;
  st = check_index_dtype(c, ix);
  if (st != RAL_OK) return st;
  int nd = self->ndim;
  if (dim < 0 || ix->ndim != nd || out->dtype != self->dtype || (src && src->dtype != self->dtype))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim, rank or dtype");
  if (src && host_copy(out, self) != RAL_OK) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "%s", host_last_error());
  int64_t n = host_numel(ix), es = host_dtype_size(self->dtype);
  const ral_tensor* table = src ? out : self; /* the tensor indexed along dim */
  int64_t limit = table->ndim ? table->sizes[dim] : 1, tstride = table->ndim ? table->strides[dim] : 0;
  for (int64_t l = 0; l < n; l++) {
    int64_t i = index_at(ix, offset_of(l, nd, ix->sizes, ix->strides, -1));
    if (i < 0 || i >= limit)
      /* CPU's words (ATen scatter_gather_checks), so the message names the dimension too */
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "index %lld is out of bounds for dimension %d with size %lld",
                       (long long)i, dim, (long long)limit);
  }
  const ral_tensor* data = src ? src : out; /* the tensor indexed by position */
  int64_t eo = host_dtype_size(out->dtype);
#pragma omp parallel for schedule(static) if (kind == G_GATHER && n > HOST_GRAIN)
  for (int64_t l = 0; l < n; l++) {
    int64_t ioff = offset_of(l, nd, ix->sizes, ix->strides, -1);
    int64_t toff = offset_of(l, nd, ix->sizes, table->strides, dim);
    int64_t doff = offset_of(l, nd, ix->sizes, data->strides, -1);
    char* tp = host_ptr(table) + (toff + index_at(ix, ioff) * tstride) * es;
    char* dp = host_ptr(data) + doff * eo;
    if (kind == G_GATHER) memcpy(dp, tp, (size_t)es);
    else if (kind == G_SCATTER) memcpy(tp, dp, (size_t)es);
    else {
      double v = host_load_f64(tp, out->dtype) + host_load_f64(dp, out->dtype);
      host_store_value(tp, out->dtype, v, (int64_t)v);
    }
  }
  return RAL_OK;
}

ral_status host_gather(const ral_kernel_call* c) { return gather_scatter(c, G_GATHER); }
ral_status host_scatter_src(const ral_kernel_call* c) { return gather_scatter(c, G_SCATTER); }
ral_status host_scatter_add(const ral_kernel_call* c) { return gather_scatter(c, G_SCATTER_ADD); }

/* index_select(self, dim, index) -> self with size index.numel() at dim */
ral_status host_index_select(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 2, 1);
  const ral_tensor *out = host_out(c, 0), *self = host_in(c, 0), *ix = host_in(c, 1);
  if (st == RAL_OK) st = check_index_dtype(c, ix);
  if (st != RAL_OK) return st;
  int dim = host_wrap_dim(host_scalar_int(c, 0, 0), self->ndim);
  int64_t n = host_numel(ix);
  if (dim < 0 || ix->ndim > 1 || out->ndim != self->ndim || (self->ndim && out->sizes[dim] != n))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bad dim or shapes");
  if (self->ndim == 0) return host_copy(out, self);
  int64_t istride = ix->ndim ? ix->strides[0] : 0;
  host_view dst, src;
  host_view_of(&dst, out);
  host_view_of(&src, self);
  dst.sizes[dim] = src.sizes[dim] = 1;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = index_at(ix, k * istride);
    if (i < 0 || i >= self->sizes[dim])
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "index %lld is out of range for size %lld",
                       (long long)i, (long long)self->sizes[dim]);
    dst.t.byte_offset = out->byte_offset + (uint64_t)(k * out->strides[dim] * host_dtype_size(out->dtype));
    src.t.byte_offset = self->byte_offset + (uint64_t)(i * self->strides[dim] * host_dtype_size(self->dtype));
    st = host_copy(&dst.t, &src.t);
    if (st != RAL_OK) return host_fail(c, st, "%s", host_last_error());
  }
  return RAL_OK;
}
