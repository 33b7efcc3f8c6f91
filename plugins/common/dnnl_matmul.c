/*
 * dnnl_matmul.c -- C = alpha * A @ B + beta * C on oneDNN's matmul primitive (dnnl_matmul.h).
 *
 * The operands are described to oneDNN by their own strides (row- or column-major, row slices,
 * batches); no reorders: a layout the primitive cannot take directly makes it fall back to
 * reference code or refuse, and the glue declines both, before anything is written. alpha is
 * the primitive's output scale and beta a `sum` post-op over C's old values, so an addmm's
 * bias (which the caller wrote into C) is added before the one rounding, as the plugins' own
 * 16-bit GEMMs (widen, sgemm, round once) do.
 */
#define _POSIX_C_SOURCE 200809L
#include "dnnl_matmul.h"

#ifdef RAL_HAVE_DNNL

/* t's memory descriptor with size-1 dims given the outermost stride, so that a [1, K] row or
 * a [K, 1] column is a plain row- or column-major matrix to oneDNN whatever stride PyTorch
 * recorded for the size-1 dim. 0 when oneDNN cannot describe it. */
static int matrix_md(dnnl_memory_desc_t* md, const ral_tensor* t) {
  int64_t strides[3], outer = 1;
  for (int i = 0; i < t->ndim; i++)
    if (t->sizes[i] > 1 && t->strides[i] * t->sizes[i] > outer) outer = t->strides[i] * t->sizes[i];
  for (int i = 0; i < t->ndim; i++) strides[i] = t->sizes[i] > 1 ? t->strides[i] : outer;
  return dnnl_user_md(md, t->ndim, t->sizes, strides, t->dtype);
}

int ral_dnnl_matmul(const ral_tensor* const t[RAL_DNNL_MM_N_OPERANDS], void* const host[RAL_DNNL_MM_N_OPERANDS],
                    double alpha, double beta, int team) {
  if (!ral_dnnl_available()) return RAL_DNNL_DECLINED;
  const ral_tensor *c = t[RAL_DNNL_MM_C], *a = t[RAL_DNNL_MM_A], *b = t[RAL_DNNL_MM_B];
  int r = c->ndim;
  if ((r != 2 && r != 3) || a->ndim != r || b->ndim != r) return RAL_DNNL_DECLINED;
  for (int i = 0; i < RAL_DNNL_MM_N_OPERANDS; i++)
    if (t[i]->dtype != c->dtype || !host[i]) return RAL_DNNL_DECLINED;
  for (int i = 0; i < r; i++)
    if (c->sizes[i] == 0 || a->sizes[i] == 0 || b->sizes[i] == 0) return RAL_DNNL_DECLINED;
  if (r == 3 && (a->sizes[0] != c->sizes[0] || b->sizes[0] != c->sizes[0])) return RAL_DNNL_DECLINED;
  dnnl_memory_desc_t amd, bmd, cmd;
  if (!matrix_md(&amd, a) || !matrix_md(&bmd, b) || !matrix_md(&cmd, c)) return RAL_DNNL_DECLINED;

  int saved = dnnl_team_enter(team);
  dnnl_matmul_desc_t desc;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t post = NULL;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  dnnl_status_t st = p_dnnl_matmul_desc_init(&desc, &amd, &bmd, NULL, &cmd);
  if (st == dnnl_success) st = p_dnnl_primitive_attr_create(&attr);
  if (st == dnnl_success && alpha != 1.0) {
    const float scale = (float)alpha;
    st = p_dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);
  }
  if (st == dnnl_success && beta != 0.0) {
    st = p_dnnl_post_ops_create(&post);
    if (st == dnnl_success) st = p_dnnl_post_ops_append_sum(post, (float)beta);
    if (st == dnnl_success) st = p_dnnl_primitive_attr_set_post_ops(attr, post);
  }
  if (st == dnnl_success) st = p_dnnl_primitive_desc_create(&pd, &desc, attr, ral_dnnl_engine, NULL);
  if (st == dnnl_success && dnnl_is_reference(pd)) st = dnnl_unimplemented;
  if (st == dnnl_success) st = p_dnnl_primitive_create(&prim, pd);
  dnnl_call call = {.st = st};
  if (call.st == dnnl_success) call.st = p_dnnl_stream_create(&call.stream, ral_dnnl_engine, dnnl_stream_default_flags);
  dnnl_memory_t ma = dnnl_call_mem(&call, &amd, host[RAL_DNNL_MM_A]);
  dnnl_memory_t mb = dnnl_call_mem(&call, &bmd, host[RAL_DNNL_MM_B]);
  dnnl_memory_t mc = dnnl_call_mem(&call, &cmd, host[RAL_DNNL_MM_C]);
  int result = RAL_DNNL_DECLINED;
  if (call.st == dnnl_success) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    call.st = p_dnnl_primitive_execute(prim, call.stream, 3, args);
    if (call.st == dnnl_success) call.st = p_dnnl_stream_wait(call.stream);
    /* once the primitive ran, a failure is an error, not a fallback: C is touched */
    result = call.st == dnnl_success ? RAL_DNNL_DONE : RAL_DNNL_FAILED;
  }
  dnnl_call_release(&call);
  if (prim) p_dnnl_primitive_destroy(prim);
  if (pd) p_dnnl_primitive_desc_destroy(pd);
  if (post) p_dnnl_post_ops_destroy(post);
  if (attr) p_dnnl_primitive_attr_destroy(attr);
  dnnl_team_leave(saved, team);
  return result;
}

/* Per dtype: 0 not probed yet, 1 native, 2 not. Races only repeat the probe. */
static _Atomic int g_takes[3];

int ral_dnnl_matmul_takes(int32_t dtype) {
  int slot = dtype == RAL_DTYPE_FLOAT32 ? 0 : dtype == RAL_DTYPE_BFLOAT16 ? 1 : dtype == RAL_DTYPE_FLOAT16 ? 2 : -1;
  if (slot < 0 || !ral_dnnl_available()) return 0;
  int known = g_takes[slot];
  if (known) return known == 1;
  int64_t sizes[2] = {16, 16}, strides[2] = {16, 1};
  dnnl_memory_desc_t md;
  dnnl_matmul_desc_t desc;
  dnnl_primitive_desc_t pd = NULL;
  int native = dnnl_user_md(&md, 2, sizes, strides, dtype) &&
               p_dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md) == dnnl_success &&
               p_dnnl_primitive_desc_create(&pd, &desc, NULL, ral_dnnl_engine, NULL) == dnnl_success &&
               !dnnl_is_reference(pd);
  if (pd) p_dnnl_primitive_desc_destroy(pd);
  g_takes[slot] = native ? 1 : 2;
  return native;
}

#else /* no oneDNN at build time: the plugin always runs its own GEMM */

int ral_dnnl_matmul_takes(int32_t dtype) { return 0; }

int ral_dnnl_matmul(const ral_tensor* const t[RAL_DNNL_MM_N_OPERANDS], void* const host[RAL_DNNL_MM_N_OPERANDS],
                    double alpha, double beta, int team) {
  return RAL_DNNL_DECLINED;
}

#endif
