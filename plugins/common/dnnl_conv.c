/*
 * dnnl_conv.c -- convolutions through oneDNN (Debian's libdnnl 2.x), when it is there.
 * Vendor-neutral: it sees ral_tensor descriptors and host addresses only, so every plugin whose
 * buffers the CPU can address compiles it (plugins/host, plugins/opencl on a CPU runtime).
 *
 * Loading, the switch and the per-call bookkeeping are dnnl_lib.c's. Every call that oneDNN does not take (no library, a primitive descriptor it refuses, out of
 * memory before anything was written) returns RAL_DNNL_DECLINED and the plugin runs its own.
 *
 * Threading: Debian's oneDNN runs on OpenMP (libgomp, the copy PyTorch loaded). The caller
 * says how many threads the call may use (`team`); the OpenMP team of the calling thread is set
 * to that for the call and restored afterwards (the host plugin: its budget on a stream worker,
 * one thread elsewhere; the OpenCL plugin: the caller's own OpenMP setting, PyTorch's).
 *
 * Types: float32, bfloat16 and float16, one for every operand of a call. oneDNN's bfloat16
 * (and, in later versions, float16) primitives accumulate in float32 and round each result
 * once; on CPUs without the instructions they are reference code, which the glue declines
 * like any other, so the plugin widens to float32 itself. oneDNN 2.6 on AVX512-BF16/AMX runs
 * bfloat16 natively and declines float16.
 *
 * Data: the user operands are described to oneDNN by their strides (NCHW, channels_last,
 * sliced and offset views alike); the primitive picks its own layouts (format `any`) and
 * reorders move the data in and out, as PyTorch's own CPU convolution does.
 */
#define _POSIX_C_SOURCE 200809L
#include "dnnl_conv.h"

#ifdef RAL_HAVE_DNNL

/* User memory descriptor of a tensor (groups > 1 and a weight: [G, O/G, I/G, k...]). */
static void user_md(dnnl_memory_desc_t* md, const ral_tensor* t, int64_t groups, int weight) {
  int64_t dims[DNNL_MAX_NDIMS], strides[DNNL_MAX_NDIMS];
  int nd = t->ndim;
  if (weight && groups > 1) {
    dims[0] = groups;
    strides[0] = t->sizes[0] / groups * t->strides[0];
    dims[1] = t->sizes[0] / groups;
    strides[1] = t->strides[0];
    for (int i = 1; i < nd; i++) {
      dims[i + 1] = t->sizes[i];
      strides[i + 1] = t->strides[i];
    }
    nd += 1;
  } else {
    for (int i = 0; i < nd; i++) {
      dims[i] = t->sizes[i];
      strides[i] = t->strides[i];
    }
  }
  if (!dnnl_user_md(md, nd, dims, strides, t->dtype)) md->ndims = 0;
}

/* The primitive's own layout for an operand described by `like` (its data type kept). */
static void any_md(dnnl_memory_desc_t* md, const dnnl_memory_desc_t* like) {
  if (p_dnnl_memory_desc_init_by_tag(md, like->ndims, like->dims, like->data_type, dnnl_format_tag_any) !=
      dnnl_success)
    md->ndims = 0;
}

static int64_t numel(const ral_tensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->sizes[i];
  return n;
}

int ral_dnnl_conv(ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* const ts[RAL_DNNL_N_OPERANDS],
                  void* const host[RAL_DNNL_N_OPERANDS], int team) {
  const ral_tensor *x = ts[RAL_DNNL_X], *w = ts[RAL_DNNL_W], *bias = ts[RAL_DNNL_BIAS], *y = ts[RAL_DNNL_Y];
  if (!ral_dnnl_available()) return RAL_DNNL_DECLINED;
  /* one floating dtype for every operand: PyTorch refuses mixed convolutions before here */
  for (int i = 0; i < RAL_DNNL_N_OPERANDS; i++)
    if (ts[i] && (ts[i]->dtype != x->dtype || numel(ts[i]) == 0 || !host[i])) return RAL_DNNL_DECLINED;
  if (dnnl_type_of(x->dtype) == dnnl_data_type_undef) return RAL_DNNL_DECLINED;
  int ns = x->ndim - 2;
  if (ns < 1 || ns > 3) return RAL_DNNL_DECLINED;

  dnnl_memory_desc_t xmd, wmd, bmd, ymd, xa, wa, ba, ya;
  user_md(&xmd, x, g->groups, 0);
  user_md(&wmd, w, g->groups, 1);
  user_md(&ymd, y, g->groups, 0);
  if (!xmd.ndims || !wmd.ndims || !ymd.ndims) return RAL_DNNL_DECLINED;
  if (bias) {
    dnnl_dims_t d = {numel(bias)}, s = {bias->ndim ? bias->strides[0] : 1};
    if (s[0] == 0) s[0] = 1;
    if (p_dnnl_memory_desc_init_by_strides(&bmd, 1, d, dnnl_type_of(bias->dtype), s) != dnnl_success)
      return RAL_DNNL_DECLINED;
    any_md(&ba, &bmd);
  }
  any_md(&xa, &xmd);
  any_md(&wa, &wmd);
  any_md(&ya, &ymd);
  dnnl_dims_t strides, dil, pl, pr;
  for (int i = 0; i < ns; i++) {
    int64_t I = x->sizes[2 + i], O = y->sizes[2 + i], k = w->sizes[2 + i];
    strides[i] = g->stride[i];
    dil[i] = g->dilation[i] - 1;
    pl[i] = g->padding[i];
    pr[i] = (O - 1) * g->stride[i] + (k - 1) * g->dilation[i] + 1 - I - g->padding[i];
  }

  /* the team for this call, the caller's choice */
  int saved = dnnl_team_enter(team);

  int result = RAL_DNNL_DECLINED;
  dnnl_convolution_desc_t fd, cd;
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  dnnl_primitive_t prim = NULL;
  const dnnl_alg_kind_t alg = dnnl_convolution_direct;
  dnnl_status_t st =
      p_dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &xa, &wa, bias ? &ba : NULL,
                                                   &ya, strides, dil, pl, pr);
  if (st == dnnl_success && kind == RAL_DNNL_FORWARD) st = p_dnnl_primitive_desc_create(&pd, &fd, NULL, ral_dnnl_engine, NULL);
  else if (st == dnnl_success) {
    st = p_dnnl_primitive_desc_create(&hint, &fd, NULL, ral_dnnl_engine, NULL);
    if (st == dnnl_success && kind == RAL_DNNL_BACKWARD_DATA)
      st = p_dnnl_dilated_convolution_backward_data_desc_init(&cd, alg, &xa, &wa, &ya, strides, dil, pl, pr);
    else if (st == dnnl_success)
      st = p_dnnl_dilated_convolution_backward_weights_desc_init(&cd, alg, &xa, &wa, bias ? &ba : NULL, &ya, strides,
                                                                 dil, pl, pr);
    if (st == dnnl_success) st = p_dnnl_primitive_desc_create(&pd, &cd, NULL, ral_dnnl_engine, hint);
  }
  /* oneDNN's reference implementations ("ref:any", "gemm:ref") are slower than im2col over
   * OpenBLAS: on a CPU without a jit kernel for the call, decline */
  if (st == dnnl_success && dnnl_is_reference(pd)) st = dnnl_unimplemented;
  if (st == dnnl_success) st = p_dnnl_primitive_create(&prim, pd);
  dnnl_call r = {.st = st};
  if (r.st == dnnl_success) r.st = p_dnnl_stream_create(&r.stream, ral_dnnl_engine, dnnl_stream_default_flags);
  if (r.st == dnnl_success) {
    /* which operands are read (1) and written (0), by kind */
    int xin = kind != RAL_DNNL_BACKWARD_DATA, win = kind != RAL_DNNL_BACKWARD_WEIGHTS;
    int yin = kind != RAL_DNNL_FORWARD;
    dnnl_query_t qx = xin ? dnnl_query_src_md : dnnl_query_diff_src_md;
    dnnl_query_t qw = win ? dnnl_query_weights_md : dnnl_query_diff_weights_md;
    dnnl_query_t qy = yin ? dnnl_query_diff_dst_md : dnnl_query_dst_md;
    const dnnl_memory_desc_t* px = p_dnnl_primitive_desc_query_md(pd, qx, 0);
    const dnnl_memory_desc_t* pw = p_dnnl_primitive_desc_query_md(pd, qw, 0);
    const dnnl_memory_desc_t* py = p_dnnl_primitive_desc_query_md(pd, qy, 0);
    const dnnl_memory_desc_t* pb = bias ? p_dnnl_primitive_desc_query_md(pd, win ? dnnl_query_weights_md
                                                                                 : dnnl_query_diff_weights_md, 1)
                                        : NULL;
    dnnl_memory_t ux = dnnl_call_mem(&r, &xmd, host[RAL_DNNL_X]), uw = dnnl_call_mem(&r, &wmd, host[RAL_DNNL_W]);
    dnnl_memory_t uy = dnnl_call_mem(&r, &ymd, host[RAL_DNNL_Y]), ub = bias ? dnnl_call_mem(&r, &bmd, host[RAL_DNNL_BIAS]) : NULL;
    dnnl_memory_t sx, sw, sy, sb = NULL;
    dnnl_memory_t mx = dnnl_call_operand(&r, ux, &xmd, px, xin, &sx);
    dnnl_memory_t mw = dnnl_call_operand(&r, uw, &wmd, pw, win, &sw);
    dnnl_memory_t my = dnnl_call_operand(&r, uy, &ymd, py, yin, &sy);
    dnnl_memory_t mb = bias && pb ? dnnl_call_operand(&r, ub, &bmd, pb, win, &sb) : NULL;
    if (bias && !pb && r.st == dnnl_success) r.st = dnnl_unimplemented;
    if (r.st == dnnl_success) {
      dnnl_exec_arg_t a[4];
      int na = 0;
      a[na++] = (dnnl_exec_arg_t){xin ? DNNL_ARG_SRC : DNNL_ARG_DIFF_SRC, mx};
      a[na++] = (dnnl_exec_arg_t){win ? DNNL_ARG_WEIGHTS : DNNL_ARG_DIFF_WEIGHTS, mw};
      a[na++] = (dnnl_exec_arg_t){yin ? DNNL_ARG_DIFF_DST : DNNL_ARG_DST, my};
      if (mb) a[na++] = (dnnl_exec_arg_t){win ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, mb};
      r.st = p_dnnl_primitive_execute(prim, r.stream, na, a);
      /* results back into the user's layout */
      if (!xin && sx) dnnl_call_reorder(&r, sx, px, ux, &xmd);
      if (!win && sw) dnnl_call_reorder(&r, sw, pw, uw, &wmd);
      if (!yin && sy) dnnl_call_reorder(&r, sy, py, uy, &ymd);
      if (!win && sb) dnnl_call_reorder(&r, sb, pb, ub, &bmd);
      if (r.st == dnnl_success) r.st = p_dnnl_stream_wait(r.stream);
      /* once the primitive ran, a failure is an error, not a fallback: outputs are touched */
      result = r.st == dnnl_success ? RAL_DNNL_DONE : RAL_DNNL_FAILED;
    }
  }
  dnnl_call_release(&r);
  if (prim) p_dnnl_primitive_destroy(prim);
  if (pd) p_dnnl_primitive_desc_destroy(pd);
  if (hint) p_dnnl_primitive_desc_destroy(hint);
  dnnl_team_leave(saved, team);
  return result;
}

#else /* no oneDNN at build time: the plugin always runs its own kernels */

int ral_dnnl_conv(ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* const t[RAL_DNNL_N_OPERANDS],
                  void* const host[RAL_DNNL_N_OPERANDS], int team) {
  return RAL_DNNL_DECLINED;
}

#endif
