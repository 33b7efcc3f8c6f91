/*
 * blas.c -- mm/bmm/addmm/baddbmm/dot on one tiled kernel that reads any strides, so
 * transposed weights (x @ W.t()) need no copy. float32 only.
 */
#include <string.h>

#include "ocl.h"

#define BLK 32 /* C block per work-group (blas.cl) */
#define TS 16  /* work-group edge (blas.cl) */

/* Strides of a [B?, R, C] tensor as (batch, row, col); rank 2 has batch stride 0. */
static void mat_strides(const ral_tensor* t, int64_t* sb, int64_t* sr, int64_t* sc) {
  int r = t->ndim;
  *sb = r == 3 ? t->strides[0] : 0;
  *sr = r >= 2 ? t->strides[r - 2] : 0;
  *sc = r >= 1 ? t->strides[r - 1] : 0;
}

static ral_status matmul_run(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a,
                             const ral_tensor* b, const ral_tensor* bias, double beta, double alpha) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++)
    if (c->tensors[i].dtype != RAL_DTYPE_FLOAT32)
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "matmul takes float32, tensor %d is %s", i,
                      ocl_dtype_name(c->tensors[i].dtype));
  int r = out->ndim;
  if (r < 2 || r > 3 || a->ndim != r || b->ndim != r)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "matmul expects rank-%d operands, got %d and %d", r, a->ndim, b->ndim);
  ocl_mmgeom g;
  memset(&g, 0, sizeof g);
  g.batch = r == 3 ? out->sizes[0] : 1;
  g.M = out->sizes[r - 2];
  g.N = out->sizes[r - 1];
  g.K = a->sizes[r - 1];
  if (b->sizes[r - 2] != g.K || a->sizes[r - 2] != g.M || b->sizes[r - 1] != g.N)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "matmul shapes do not agree");
  mat_strides(a, &g.sa_b, &g.sa_m, &g.sa_k);
  mat_strides(b, &g.sb_b, &g.sb_k, &g.sb_n);
  mat_strides(out, &g.sc_b, &g.sc_m, &g.sc_n);
  g.off_a = ocl_elem_off(a);
  g.off_b = ocl_elem_off(b);
  g.off_c = ocl_elem_off(out);
  g.alpha = (float)alpha;
  g.beta = (float)beta;
  ocl_view bv;
  if (bias && beta != 0.0) { /* beta == 0 ignores self entirely, NaNs included */
    ocl_view_expand(&bv, bias, out);
    mat_strides(&bv.t, &g.si_b, &g.si_m, &g.si_n);
    g.off_i = ocl_elem_off(bias);
    g.has_in = 1;
  }
  if (g.M == 0 || g.N == 0 || g.batch == 0) return RAL_OK;
  size_t global[3] = {(size_t)((g.N + BLK - 1) / BLK) * TS, (size_t)((g.M + BLK - 1) / BLK) * TS, (size_t)g.batch};
  size_t local[3] = {TS, TS, 1};
  ocl_arg args[5] = {ocl_mem(out), ocl_mem(a), ocl_mem(b), ocl_mem(g.has_in ? bias : out), OCL_VAL(g)};
  return ocl_enqueue(c, OCL_K_matmul_tiled, 5, args, 3, global, local);
}

/* mm(self, mat2) */
ral_status ocl_mm(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  return st != RAL_OK ? st : matmul_run(c, ocl_out(c, 0), ocl_in(c, 0), ocl_in(c, 1), NULL, 0, 1);
}

/* bmm(self, mat2) */
ral_status ocl_bmm(const ral_kernel_call* c) { return ocl_mm(c); }

/* addmm(self, mat1, mat2, beta, alpha) and baddbmm(self, batch1, batch2, beta, alpha) */
ral_status ocl_addmm(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 3, 0);
  if (st != RAL_OK) return st;
  return matmul_run(c, ocl_out(c, 0), ocl_in(c, 1), ocl_in(c, 2), ocl_in(c, 0), ocl_scalar_f(c, 0, 1.0),
                    ocl_scalar_f(c, 1, 1.0));
}

ral_status ocl_baddbmm(const ral_kernel_call* c) { return ocl_addmm(c); }

/* dot(self, tensor): a 1xK by Kx1 product. */
ral_status ocl_dot(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  const ral_tensor *x = ocl_in(c, 0), *y = ocl_in(c, 1);
  if (x->ndim != 1 || y->ndim != 1 || x->sizes[0] != y->sizes[0])
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dot expects two 1-D tensors of one length");
  int64_t k = x->sizes[0], one = 1, zero = 0;
  int64_t as[2] = {one, k}, ast[2] = {zero, x->strides[0]};
  int64_t bs[2] = {k, one}, bst[2] = {y->strides[0], zero};
  int64_t os[2] = {one, one}, ost[2] = {one, one};
  ral_tensor a = *x, b = *y, o = *ocl_out(c, 0);
  a.ndim = b.ndim = o.ndim = 2;
  a.sizes = as, a.strides = ast, b.sizes = bs, b.strides = bst, o.sizes = os, o.strides = ost;
  return matmul_run(c, &o, &a, &b, NULL, 0, 1);
}
