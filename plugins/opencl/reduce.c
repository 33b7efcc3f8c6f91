/*
 * reduce.c -- sum/mean/amax/amin/prod/var and arg-reductions over any set of dims:
 * kept dims index the output, reduced dims are walked by one work-group per output.
 */
#include <string.h>

#include "ocl.h"

typedef struct {
  int op;
  int dims_at;   /* scalar index of the dim / dim-list argument, -1: all dims */
  int n_out;     /* 1, or 2 for (values, indices) */
} reduce_spec;

/* Fold reduced dims that are one walk in memory (stride[d] == stride[d+1] * size[d+1]) and
 * drop size-1 ones: the linear index over the reduced dims (arg-reductions' answer) and
 * the visiting order stay the same. */
static void merge_reduced_dims(ocl_rgeom* g) {
  int n = 0;
  for (int d = 0; d < g->rndim; d++) {
    if (g->rsize[d] == 1 && g->rndim > 1) continue;
    if (n > 0 && g->rst[n - 1] == g->rst[d] * g->rsize[d]) {
      g->rsize[n - 1] *= g->rsize[d];
      g->rst[n - 1] = g->rst[d];
      continue;
    }
    g->rsize[n] = g->rsize[d];
    g->rst[n++] = g->rst[d];
  }
  if (n == 0 && g->rndim > 0) n = 1, g->rsize[0] = 1, g->rst[0] = 0;
  g->rndim = n;
}

static ral_status reduce_run(const ral_kernel_call* c, const reduce_spec* rs, double correction) {
  ral_status st = ocl_check_arity(c, rs->n_out, 1, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* in = ocl_in(c, 0);
  const ral_tensor* out = ocl_out(c, 0);
  int reduced[RAL_MAX_RANK] = {0};
  int n = 0;
  const int64_t* dims = rs->dims_at >= 0 ? ocl_scalar_list(c, rs->dims_at, &n) : NULL;
  for (int i = 0; i < n; i++) {
    int d = ocl_wrap_dim(dims[i], in->ndim);
    if (d < 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dim %lld out of range for rank %d", (long long)dims[i], in->ndim);
    if (in->ndim > 0) reduced[d] = 1;
  }
  if (n == 0)
    for (int d = 0; d < in->ndim; d++) reduced[d] = 1;
  int keep = out->ndim == in->ndim && in->ndim > 0;
  ocl_rgeom g;
  memset(&g, 0, sizeof g);
  g.n_out = 1;
  g.n_red = 1;
  for (int d = 0, k = 0; d < in->ndim; d++) {
    if (reduced[d]) {
      g.rsize[g.rndim] = in->sizes[d];
      g.rst[g.rndim++] = in->strides[d];
      g.n_red *= in->sizes[d];
      if (keep) k++;
      continue;
    }
    g.osize[g.ondim] = in->sizes[d];
    g.ost_in[g.ondim] = in->strides[d];
    g.ost_out[g.ondim++] = out->strides[keep ? d : k];
    g.n_out *= in->sizes[d];
    k++;
  }
  g.off_in = ocl_elem_off(in);
  g.off_out = ocl_elem_off(out);
  g.op = rs->op;
  g.dt_in = in->dtype;
  g.dt_out = out->dtype;
  g.cfl = (ocl_dtype_is_float(in->dtype) || rs->op == RD_MEAN || rs->op == RD_VAR) && rs->op != RD_ALL &&
          rs->op != RD_ANY;
  g.correction = (float)correction;
  const ral_tensor* idx = out;
  if (rs->n_out == 2) {
    idx = ocl_out(c, 1);
    g.off_idx = ocl_elem_off(idx);
    g.scale = 1.0f;
  }
  if (g.n_out == 0) return RAL_OK;
  ocl_device* d = ocl_device_get(c->device);
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  merge_reduced_dims(&g);
  if (ocl_inline_reduce(c, &g, out, in)) return RAL_OK;
  /* A CPU runtime: sums and means with enough outputs to share out run as chunks of
   * outputs per work-item (reduce_sum_c); few outputs keep the tree over one work-group. */
  if (d->cpu && (g.op == RD_SUM || g.op == RD_MEAN) && g.cfl && g.rndim <= 1 && g.n_out >= 16) {
    ocl_arg args[4] = {ocl_mem(out), ocl_mem(in), OCL_VAL(g)};
    int64_t min_chunk = (4096 + g.n_red - 1) / g.n_red; /* outputs per work-item */
    if (min_chunk < 16 && g.n_out >= 256) min_chunk = 16;
    return ocl_enqueue_chunked(c, OCL_K_reduce_sum_c, 3, args, g.n_out, min_chunk < 1 ? 1 : min_chunk);
  }
  /* The same for float32 max / min: their tree over one work-group per output took 2 ms
   * for a log-softmax's 512 row maxima over 2048 logits. */
  if (d->cpu && (g.op == RD_MAX || g.op == RD_MIN) && g.dt_in == DT_F32 && g.dt_out == DT_F32 && g.rndim <= 1 &&
      g.n_out >= 16) {
    ocl_arg args[4] = {ocl_mem(out), ocl_mem(in), OCL_VAL(g)};
    int64_t min_chunk = (4096 + g.n_red - 1) / g.n_red;
    return ocl_enqueue_chunked(c, OCL_K_reduce_minmax_c, 3, args, g.n_out, min_chunk < 1 ? 1 : min_chunk);
  }
  size_t want = 1;
  while (want < (size_t)g.n_red && want < OCL_MAX_LOCAL) want *= 2;
  /* Short reductions run in one work-item, in index order: the order PyTorch's CPU
   * kernels use for them, so results round alike (a tree order differed by an ulp, which
   * cov's near-cancelling normalisation magnified past float32 tolerance). */
  if (g.n_red <= 8) want = 1;
  size_t local = ocl_local_size(d, OCL_K_reduce_any, want);
  size_t global = (size_t)g.n_out * local;
  ocl_arg args[4] = {ocl_mem(out), ocl_mem(idx), ocl_mem(in), OCL_VAL(g)};
  return ocl_enqueue(c, OCL_K_reduce_any, 4, args, 1, &global, &local);
}

/* keepdim needs no scalar: the output's rank tells. */
#define REDUCE(name, OP, DIMS, NOUT)                 \
  ral_status name(const ral_kernel_call* c) {       \
    static const reduce_spec rs = {OP, DIMS, NOUT}; \
    return reduce_run(c, &rs, 0);                         \
  }
/* sum.dim_IntList(self, dim?, keepdim, dtype?) */
REDUCE(ocl_sum_dim, RD_SUM, 0, 1)
/* sum(self, dtype?) */
REDUCE(ocl_sum, RD_SUM, -1, 1)
/* mean.dim(self, dim?, keepdim, dtype?) */
REDUCE(ocl_mean_dim, RD_MEAN, 0, 1)
/* mean(self, dtype?) */
REDUCE(ocl_mean, RD_MEAN, -1, 1)
/* amax(self, dim[], keepdim) */
REDUCE(ocl_amax, RD_MAX, 0, 1)
/* amin(self, dim[], keepdim) */
REDUCE(ocl_amin, RD_MIN, 0, 1)
/* max.dim(self, dim, keepdim) -> (values, indices) */
REDUCE(ocl_max_dim, RD_ARGMAX, 0, 2)
/* min.dim(self, dim, keepdim) -> (values, indices) */
REDUCE(ocl_min_dim, RD_ARGMIN, 0, 2)
/* argmax(self, dim?, keepdim) */
REDUCE(ocl_argmax, RD_ARGMAX, 0, 1)
/* argmin(self, dim?, keepdim) */
REDUCE(ocl_argmin, RD_ARGMIN, 0, 1)

/* all(self), all.dim(self, dim, keepdim), all.dims(self, dim?, keepdim) */
REDUCE(ocl_all, RD_ALL, 0, 1)
/* any(self), any.dim(self, dim, keepdim), any.dims(self, dim?, keepdim) */
REDUCE(ocl_any, RD_ANY, 0, 1)

/* prod(self, dtype?) and prod.dim_int(self, dim, keepdim, dtype?) */
ral_status ocl_prod(const ral_kernel_call* c) {
  int by_dim = c->n_scalars > 0 && c->scalars[0].tag == RAL_SCALAR_INT;
  reduce_spec rs = {RD_PROD, by_dim ? 0 : -1, 1};
  return reduce_run(c, &rs, 0);
}

/* var.correction(self, dim?, *, correction?, keepdim) */
ral_status ocl_var_correction(const ral_kernel_call* c) {
  static const reduce_spec rs = {RD_VAR, 0, 1};
  return reduce_run(c, &rs, ocl_scalar_f(c, 1, 1.0));
}
