/*
 * dnnl_conv.c -- convolutions through oneDNN (Debian's libdnnl 2.x), when it is there.
 * Vendor-neutral: it sees ral_tensor descriptors and host addresses only, so every plugin whose
 * buffers the CPU can address compiles it (plugins/host, plugins/opencl on a CPU runtime).
 *
 * Built only when dnnl.h was found at build time (the plugin's Makefile defines RAL_HAVE_DNNL
 * and RAL_DNNL_SWITCH, the name of its environment switch); the library itself is dlopen'ed at
 * the first convolution, so a plugin built with oneDNN still loads (and falls back to its own
 * kernels) on a machine without libdnnl.so.2, and RAL_DNNL_SWITCH=0 switches the path off.
 * Every call that oneDNN does not take (no library, a primitive descriptor it refuses, out of
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

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <oneapi/dnnl/dnnl.h>

#ifndef RAL_DNNL_SWITCH
#define RAL_DNNL_SWITCH "TORCH_FL_DNNL"
#endif

/* The oneDNN entry points used, resolved with dlsym. */
#define DNNL_FUNCS(X)                                \
  X(dnnl_engine_create)                              \
  X(dnnl_stream_create)                              \
  X(dnnl_memory_desc_init_by_strides)                \
  X(dnnl_memory_desc_init_by_tag)                    \
  X(dnnl_memory_desc_equal)                          \
  X(dnnl_memory_desc_get_size)                       \
  X(dnnl_memory_create)                              \
  X(dnnl_memory_destroy)                             \
  X(dnnl_dilated_convolution_forward_desc_init)      \
  X(dnnl_dilated_convolution_backward_data_desc_init) \
  X(dnnl_dilated_convolution_backward_weights_desc_init) \
  X(dnnl_reorder_primitive_desc_create)              \
  X(dnnl_primitive_desc_create)                      \
  X(dnnl_primitive_desc_query)                       \
  X(dnnl_primitive_desc_query_md)                    \
  X(dnnl_primitive_desc_destroy)                     \
  X(dnnl_primitive_create)                           \
  X(dnnl_primitive_execute)                          \
  X(dnnl_primitive_destroy)                          \
  X(dnnl_stream_wait)                                \
  X(dnnl_stream_destroy)

#define DNNL_PTR(name) static __typeof__(&name) p_##name;
DNNL_FUNCS(DNNL_PTR)
#undef DNNL_PTR

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ready;
static dnnl_engine_t g_engine;

static void load(void) {
  const char* env = getenv(RAL_DNNL_SWITCH);
  if (env && env[0] == '0') return;
  void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
#define DNNL_SYM(name) \
  if (!(p_##name = (__typeof__(&name))dlsym(lib, #name))) return;
  DNNL_FUNCS(DNNL_SYM)
#undef DNNL_SYM
  if (p_dnnl_engine_create(&g_engine, dnnl_cpu, 0) != dnnl_success) return;
  g_ready = 1;
}

int ral_dnnl_available(void) {
  pthread_once(&g_once, load);
  return g_ready;
}

/* One primitive and the memories it touches, with the reorders around it. */
#define MAX_ARGS 4
typedef struct {
  dnnl_stream_t stream;
  dnnl_memory_t mems[3 * MAX_ARGS];
  int n_mems;
  void* bufs[MAX_ARGS];
  int n_bufs;
  dnnl_status_t st;
} run_ctx;

static dnnl_memory_t mem(run_ctx* r, const dnnl_memory_desc_t* md, void* data) {
  dnnl_memory_t m = NULL;
  if (r->st == dnnl_success) r->st = p_dnnl_memory_create(&m, md, g_engine, data);
  if (r->st == dnnl_success) r->mems[r->n_mems++] = m;
  return m;
}

static void reorder(run_ctx* r, dnnl_memory_t src, const dnnl_memory_desc_t* smd, dnnl_memory_t dst,
                    const dnnl_memory_desc_t* dmd) {
  if (r->st != dnnl_success) return;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  r->st = p_dnnl_reorder_primitive_desc_create(&pd, smd, g_engine, dmd, g_engine, NULL);
  if (r->st == dnnl_success) r->st = p_dnnl_primitive_create(&prim, pd);
  if (r->st == dnnl_success) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    r->st = p_dnnl_primitive_execute(prim, r->stream, 2, a);
  }
  if (prim) p_dnnl_primitive_destroy(prim);
  if (pd) p_dnnl_primitive_desc_destroy(pd);
}

/* An operand in the primitive's layout: the user memory itself when the layouts agree, else
 * a scratch buffer (filled from the user memory when `in`). Returns the memory to pass. */
static dnnl_memory_t operand(run_ctx* r, dnnl_memory_t user, const dnnl_memory_desc_t* umd,
                             const dnnl_memory_desc_t* want, int in, dnnl_memory_t* scratch_out) {
  *scratch_out = NULL;
  if (r->st != dnnl_success) return NULL;
  if (p_dnnl_memory_desc_equal(umd, want)) return user;
  size_t bytes = p_dnnl_memory_desc_get_size(want);
  void* buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!buf) {
    r->st = dnnl_out_of_memory;
    return NULL;
  }
  r->bufs[r->n_bufs++] = buf;
  dnnl_memory_t m = mem(r, want, buf);
  if (in) reorder(r, user, umd, m, want);
  *scratch_out = m;
  return m;
}

/* oneDNN's data type for a ral dtype the glue takes; dnnl_data_type_undef for the others. */
static dnnl_data_type_t dnnl_type_of(int32_t dtype) {
  switch (dtype) {
    case RAL_DTYPE_FLOAT32: return dnnl_f32;
    case RAL_DTYPE_BFLOAT16: return dnnl_bf16;
    case RAL_DTYPE_FLOAT16: return dnnl_f16;
    default: return dnnl_data_type_undef;
  }
}

/* User memory descriptor of a tensor (groups > 1 and a weight: [G, O/G, I/G, k...]). */
static void user_md(dnnl_memory_desc_t* md, const ral_tensor* t, int64_t groups, int weight) {
  dnnl_dims_t dims, strides;
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
  /* an expanded operand (stride 0 over several elements) is not a oneDNN memory */
  for (int i = 0; i < nd; i++)
    if (dims[i] > 1 && strides[i] <= 0) {
      md->ndims = 0;
      return;
    }
  if (p_dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_type_of(t->dtype), strides) != dnnl_success)
    md->ndims = 0;
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
  int saved = omp_get_max_threads();
  if (team < 1) team = 1;
  if (team != saved) omp_set_num_threads(team);

  int result = RAL_DNNL_DECLINED;
  dnnl_convolution_desc_t fd, cd;
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  dnnl_primitive_t prim = NULL;
  const dnnl_alg_kind_t alg = dnnl_convolution_direct;
  dnnl_status_t st =
      p_dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, alg, &xa, &wa, bias ? &ba : NULL,
                                                   &ya, strides, dil, pl, pr);
  if (st == dnnl_success && kind == RAL_DNNL_FORWARD) st = p_dnnl_primitive_desc_create(&pd, &fd, NULL, g_engine, NULL);
  else if (st == dnnl_success) {
    st = p_dnnl_primitive_desc_create(&hint, &fd, NULL, g_engine, NULL);
    if (st == dnnl_success && kind == RAL_DNNL_BACKWARD_DATA)
      st = p_dnnl_dilated_convolution_backward_data_desc_init(&cd, alg, &xa, &wa, &ya, strides, dil, pl, pr);
    else if (st == dnnl_success)
      st = p_dnnl_dilated_convolution_backward_weights_desc_init(&cd, alg, &xa, &wa, bias ? &ba : NULL, &ya, strides,
                                                                 dil, pl, pr);
    if (st == dnnl_success) st = p_dnnl_primitive_desc_create(&pd, &cd, NULL, g_engine, hint);
  }
  /* oneDNN's reference implementations ("ref:any", "gemm:ref") are slower than im2col over
   * OpenBLAS: on a CPU without a jit kernel for the call, decline */
  const char* impl = NULL;
  if (st == dnnl_success && p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
      impl && strstr(impl, "ref"))
    st = dnnl_unimplemented;
  if (st == dnnl_success) st = p_dnnl_primitive_create(&prim, pd);
  run_ctx r = {.st = st};
  if (r.st == dnnl_success) r.st = p_dnnl_stream_create(&r.stream, g_engine, dnnl_stream_default_flags);
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
    dnnl_memory_t ux = mem(&r, &xmd, host[RAL_DNNL_X]), uw = mem(&r, &wmd, host[RAL_DNNL_W]);
    dnnl_memory_t uy = mem(&r, &ymd, host[RAL_DNNL_Y]), ub = bias ? mem(&r, &bmd, host[RAL_DNNL_BIAS]) : NULL;
    dnnl_memory_t sx, sw, sy, sb = NULL;
    dnnl_memory_t mx = operand(&r, ux, &xmd, px, xin, &sx);
    dnnl_memory_t mw = operand(&r, uw, &wmd, pw, win, &sw);
    dnnl_memory_t my = operand(&r, uy, &ymd, py, yin, &sy);
    dnnl_memory_t mb = bias && pb ? operand(&r, ub, &bmd, pb, win, &sb) : NULL;
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
      if (!xin && sx) reorder(&r, sx, px, ux, &xmd);
      if (!win && sw) reorder(&r, sw, pw, uw, &wmd);
      if (!yin && sy) reorder(&r, sy, py, uy, &ymd);
      if (!win && sb) reorder(&r, sb, pb, ub, &bmd);
      if (r.st == dnnl_success) r.st = p_dnnl_stream_wait(r.stream);
      /* once the primitive ran, a failure is an error, not a fallback: outputs are touched */
      result = r.st == dnnl_success ? RAL_DNNL_DONE : RAL_DNNL_FAILED;
    }
  }
  for (int i = 0; i < r.n_mems; i++) p_dnnl_memory_destroy(r.mems[i]);
  for (int i = 0; i < r.n_bufs; i++) free(r.bufs[i]);
  if (r.stream) p_dnnl_stream_destroy(r.stream);
  if (prim) p_dnnl_primitive_destroy(prim);
  if (pd) p_dnnl_primitive_desc_destroy(pd);
  if (hint) p_dnnl_primitive_desc_destroy(hint);
  if (team != saved) omp_set_num_threads(saved);
  return result;
}

#else /* no oneDNN at build time: the plugin always runs its own kernels */

int ral_dnnl_available(void) { return 0; }
int ral_dnnl_conv(ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* const t[RAL_DNNL_N_OPERANDS],
                  void* const host[RAL_DNNL_N_OPERANDS], int team) {
  return RAL_DNNL_DECLINED;
}

#endif
