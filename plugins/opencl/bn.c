/*
 * bn.c -- native_batch_norm and native_batch_norm_backward over contiguous [N, C, *]
 * operands (the manifest asks for contiguous ones), float32, float16 and bfloat16: each tensor
 * has its own dtype (the kernels read and write through ld_f/st_f, the host path through
 * float32 shadows), since the vendor tier types save_mean/save_invstd and the running stats
 * like CPU (tiers/vendor.py _bn_stat_spec: float32 beside a half input with float32 weight,
 * the input's dtype otherwise). Two launches each way: per-channel statistics (kernels/bn.cl, one work-item
 * per channel, compensated sums) into a [4, C] float scratch, then the per-row application.
 */
#include <string.h>

#include "ocl.h"

static int present(const ral_tensor* t) { return !ocl_absent(t); }
static const ral_tensor* opt(const ral_tensor* t) { return present(t) ? t : NULL; }

/* Bind tensor `t` (or, when absent, x's buffer, never read) to slot i of g and args. */
static void bind(ocl_bn* g, int i, const ral_tensor* t, const ral_tensor* x, ocl_arg* arg) {
  const ral_tensor* u = t && present(t) ? t : x;
  if (u == t) g->has |= 1 << i;
  g->off[i] = ocl_elem_off(u);
  g->dt[i] = u->dtype;
  *arg = ocl_mem(u);
}

static ral_status check(const ral_kernel_call* c, const ral_tensor* x, ocl_bn* g) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (!present(t)) continue;
    if (!ocl_dtype_is_float(t->dtype) || t->dtype == RAL_DTYPE_FLOAT64)
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "batch norm takes float32/float16/bfloat16, tensor %d is %s", i,
                      ocl_dtype_name(t->dtype));
    if (!ocl_is_contiguous(t)) return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "tensor %d must be contiguous", i);
  }
  if (x->ndim < 2) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input must have a channel dimension");
  memset(g, 0, sizeof *g);
  g->N = x->sizes[0];
  g->C = x->sizes[1];
  g->S = 1;
  for (int d = 2; d < x->ndim; d++) g->S *= x->sizes[d];
  return RAL_OK;
}

static ral_status per_channel_ok(const ral_kernel_call* c, const ocl_bn* g, const ral_tensor* const* ts, int n) {
  for (int k = 0; k < n; k++)
    if (ts[k] && present(ts[k]) && ocl_numel(ts[k]) != g->C)
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "a per-channel tensor has %lld elements, expected %lld",
                      (long long)ocl_numel(ts[k]), (long long)g->C);
  return RAL_OK;
}

static ral_status scratch(const ral_kernel_call* c, int64_t floats, cl_mem* m) {
  ocl_device* d = ocl_device_get(c->device);
  cl_int err;
  ocl_count(OCL_CNT_buffers);
  *m = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, (size_t)(floats > 0 ? floats : 1) * sizeof(float), NULL, &err);
  return *m ? RAL_OK : ocl_fail(c, ocl_cl_fail(err, "clCreateBuffer (batch norm scratch)"), "%s", ocl_last_error());
}

/* One work-item per channel (a work-group each on a CPU device, 64 wide elsewhere). */
static ral_status per_channel(const ral_kernel_call* c, int kid, int nargs, const ocl_arg* args, int64_t C) {
  size_t local = ocl_on_cpu(c) ? 1 : 64, global = (size_t)C;
  return ocl_enqueue(c, kid, nargs, args, 1, &global, &local);
}

/* native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training, momentum,
 * eps) -> (out, save_mean, save_invstd); running stats are updated in place in training. */
ral_status ocl_batch_norm(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 3, 5, 3);
  if (st != RAL_OK) return st;
  const ral_tensor *x = ocl_in(c, 0), *w = ocl_in(c, 1), *b = ocl_in(c, 2), *rm = ocl_in(c, 3), *rv = ocl_in(c, 4);
  const ral_tensor *y = ocl_out(c, 0), *sm = ocl_out(c, 1), *si = ocl_out(c, 2);
  ocl_bn g;
  if ((st = check(c, x, &g)) != RAL_OK) return st;
  const ral_tensor* pc[] = {w, b, rm, rv};
  if ((st = per_channel_ok(c, &g, pc, 4)) != RAL_OK) return st;
  if (ocl_numel(y) != ocl_numel(x)) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output shape differs from input");
  double momentum = 0.1, eps = 1e-5;
  int64_t unused;
  g.training = (int)ocl_scalar_i(c, 0, 1);
  ocl_scalar_num(c, 1, &momentum, &unused);
  ocl_scalar_num(c, 2, &eps, &unused);
  g.momentum = (float)momentum;
  g.eps = (float)eps;
  if (!g.training && (!present(rm) || !present(rv)))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "running_mean and running_var are needed in eval mode");
  if (g.C == 0) return RAL_OK;
  int saves = g.training && ocl_numel(sm) == g.C;
  const ral_tensor* host[BN_N] = {[BN_X] = x, [BN_Y] = y, [BN_W] = opt(w), [BN_B] = opt(b), [BN_RM] = opt(rm),
                                  [BN_RV] = opt(rv), [BN_SM] = saves ? sm : NULL,
                                  [BN_SI] = g.training && ocl_numel(si) == g.C ? si : NULL};
  if (ocl_inline_bn(c, &g, host, 0)) return RAL_OK; /* a CPU runtime with host-unified buffers */
  cl_mem ms;
  if ((st = scratch(c, 2 * g.C, &ms)) != RAL_OK) return st;
  ral_tensor mst = *x;
  mst.data = ms;
  ocl_arg a[8];
  a[0] = ocl_mem(&mst);
  bind(&g, BN_X, x, x, &a[1]);
  bind(&g, BN_RM, rm, x, &a[2]);
  bind(&g, BN_RV, rv, x, &a[3]);
  /* eval: save_mean/save_invstd are empty, as CPU returns them */
  bind(&g, BN_SM, g.training && ocl_numel(sm) == g.C ? sm : NULL, x, &a[4]);
  bind(&g, BN_SI, g.training && ocl_numel(si) == g.C ? si : NULL, x, &a[5]);
  bind(&g, BN_Y, y, x, &a[6]);
  bind(&g, BN_W, w, x, &a[6]);
  bind(&g, BN_B, b, x, &a[6]);
  a[6] = OCL_VAL(g);
  st = per_channel(c, OCL_K_bn_stats, 7, a, g.C);
  if (st == RAL_OK) {
    ocl_arg r[7];
    bind(&g, BN_Y, y, x, &r[0]);
    r[1] = ocl_mem(x);
    r[2] = ocl_mem(&mst);
    bind(&g, BN_W, w, x, &r[3]);
    bind(&g, BN_B, b, x, &r[4]);
    r[5] = OCL_VAL(g);
    st = ocl_enqueue_rows(c, OCL_K_bn_apply, 6, r, g.N * g.C, g.S);
  }
  CL.clReleaseMemObject(ms); /* queued kernels keep it alive until they finish */
  return st;
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
 * save_mean?, save_invstd?, train, eps, output_mask) -> (grad_input, grad_weight,
 * grad_bias); an output the mask leaves out arrives absent. */
ral_status ocl_batch_norm_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 3, 7, 3);
  if (st != RAL_OK) return st;
  int nmask;
  const int64_t* mask = ocl_scalar_list(c, 2, &nmask);
  const ral_tensor* o[3];
  for (int k = 0; k < 3; k++) o[k] = present(ocl_out(c, k)) && !(mask && nmask == 3 && !mask[k]) ? ocl_out(c, k) : NULL;
  const ral_tensor *go = ocl_in(c, 0), *x = ocl_in(c, 1), *w = ocl_in(c, 2), *rm = ocl_in(c, 3), *rv = ocl_in(c, 4),
                   *sm = ocl_in(c, 5), *si = ocl_in(c, 6);
  ocl_bn g;
  if ((st = check(c, x, &g)) != RAL_OK) return st;
  const ral_tensor* pc[] = {w, rm, rv, o[1], o[2]};
  if ((st = per_channel_ok(c, &g, pc, 5)) != RAL_OK) return st;
  if (ocl_numel(go) != ocl_numel(x) || (o[0] && ocl_numel(o[0]) != ocl_numel(x)))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_output/grad_input shape differs from input");
  double eps = 1e-5;
  int64_t unused;
  g.training = (int)ocl_scalar_i(c, 0, 1);
  ocl_scalar_num(c, 1, &eps, &unused);
  g.eps = (float)eps;
  if (g.training && (!present(sm) || !present(si) || ocl_numel(sm) != g.C || ocl_numel(si) != g.C))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "save_mean and save_invstd are needed in training");
  if (!g.training && (!present(rm) || !present(rv)))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "running_mean and running_var are needed in eval mode");
  if (g.C == 0) return RAL_OK;
  /* eval: save_mean/save_invstd arrive empty (as CPU makes them) and are not read */
  const ral_tensor* host[BN_N] = {[BN_G] = go,       [BN_X] = x,       [BN_W] = opt(w),
                                  [BN_RM] = opt(rm), [BN_RV] = opt(rv), [BN_SM] = g.training ? sm : NULL,
                                  [BN_SI] = g.training ? si : NULL,     [BN_GW] = o[1],
                                  [BN_GB] = o[2],    [BN_Y] = o[0]};
  if (ocl_inline_bn(c, &g, host, 1)) return RAL_OK; /* a CPU runtime with host-unified buffers */
  cl_mem ms;
  if ((st = scratch(c, 4 * g.C, &ms)) != RAL_OK) return st;
  ral_tensor mst = *x;
  mst.data = ms;
  ocl_arg a[11];
  a[0] = ocl_mem(&mst);
  bind(&g, BN_G, go, x, &a[1]);
  bind(&g, BN_X, x, x, &a[2]);
  bind(&g, BN_RM, rm, x, &a[3]);
  bind(&g, BN_RV, rv, x, &a[4]);
  bind(&g, BN_SM, sm, x, &a[5]);
  bind(&g, BN_SI, si, x, &a[6]);
  bind(&g, BN_GW, o[1], x, &a[7]);
  bind(&g, BN_GB, o[2], x, &a[8]);
  bind(&g, BN_W, w, x, &a[9]);
  bind(&g, BN_Y, o[0], x, &a[9]);
  a[9] = OCL_VAL(g);
  st = per_channel(c, OCL_K_bn_bwd_stats, 10, a, g.C);
  if (st == RAL_OK && o[0]) {
    ocl_arg r[7];
    r[0] = ocl_mem(o[0]);
    r[1] = ocl_mem(go);
    r[2] = ocl_mem(x);
    r[3] = ocl_mem(&mst);
    bind(&g, BN_W, w, x, &r[4]);
    r[5] = OCL_VAL(g);
    st = ocl_enqueue_rows(c, OCL_K_bn_bwd_apply, 6, r, g.N * g.C, g.S);
  }
  CL.clReleaseMemObject(ms);
  return st;
}
