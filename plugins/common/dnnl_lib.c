/*
 * dnnl_lib.c -- oneDNN loaded at the first call, and the bookkeeping each glue call shares
 * (dnnl_lib.h). The library is dlopen'ed, so a plugin built with oneDNN still loads (and runs its
 * own kernels) on a machine without libdnnl.so.2.
 */
#define _POSIX_C_SOURCE 200809L
#include "dnnl_lib.h"

#ifdef RAL_HAVE_DNNL

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef RAL_DNNL_SWITCH
#define RAL_DNNL_SWITCH "TORCH_FL_DNNL"
#endif

#define DNNL_PTR_DEF(name) __typeof__(&name) p_##name;
DNNL_FUNCS(DNNL_PTR_DEF)
#undef DNNL_PTR_DEF

dnnl_engine_t ral_dnnl_engine;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_ready;

static void load(void) {
  const char* env = getenv(RAL_DNNL_SWITCH);
  if (env && env[0] == '0') return;
  void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return;
#define DNNL_SYM(name) \
  if (!(p_##name = (__typeof__(&name))dlsym(lib, #name))) return;
  DNNL_FUNCS(DNNL_SYM)
#undef DNNL_SYM
  if (p_dnnl_engine_create(&ral_dnnl_engine, dnnl_cpu, 0) != dnnl_success) return;
  g_ready = 1;
}

int ral_dnnl_available(void) {
  pthread_once(&g_once, load);
  return g_ready;
}

dnnl_memory_t dnnl_call_mem(dnnl_call* r, const dnnl_memory_desc_t* md, void* data) {
  dnnl_memory_t m = NULL;
  if (r->st == dnnl_success) r->st = p_dnnl_memory_create(&m, md, ral_dnnl_engine, data);
  if (r->st == dnnl_success) r->mems[r->n_mems++] = m;
  return m;
}

void dnnl_call_reorder(dnnl_call* r, dnnl_memory_t src, const dnnl_memory_desc_t* smd, dnnl_memory_t dst,
                       const dnnl_memory_desc_t* dmd) {
  if (r->st != dnnl_success) return;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_primitive_t prim = NULL;
  r->st = p_dnnl_reorder_primitive_desc_create(&pd, smd, ral_dnnl_engine, dmd, ral_dnnl_engine, NULL);
  if (r->st == dnnl_success) r->st = p_dnnl_primitive_create(&prim, pd);
  if (r->st == dnnl_success) {
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}};
    r->st = p_dnnl_primitive_execute(prim, r->stream, 2, a);
  }
  if (prim) p_dnnl_primitive_destroy(prim);
  if (pd) p_dnnl_primitive_desc_destroy(pd);
}

dnnl_memory_t dnnl_call_operand(dnnl_call* r, dnnl_memory_t user, const dnnl_memory_desc_t* umd,
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
  dnnl_memory_t m = dnnl_call_mem(r, want, buf);
  if (in) dnnl_call_reorder(r, user, umd, m, want);
  *scratch_out = m;
  return m;
}

void dnnl_call_release(dnnl_call* r) {
  for (int i = 0; i < r->n_mems; i++) p_dnnl_memory_destroy(r->mems[i]);
  for (int i = 0; i < r->n_bufs; i++) free(r->bufs[i]);
  if (r->stream) p_dnnl_stream_destroy(r->stream);
  r->n_mems = r->n_bufs = 0;
  r->stream = NULL;
}

dnnl_data_type_t dnnl_type_of(int32_t dtype) {
  switch (dtype) {
    case RAL_DTYPE_FLOAT32: return dnnl_f32;
    case RAL_DTYPE_BFLOAT16: return dnnl_bf16;
    case RAL_DTYPE_FLOAT16: return dnnl_f16;
    default: return dnnl_data_type_undef;
  }
}

int dnnl_user_md(dnnl_memory_desc_t* md, int nd, const int64_t* dims, const int64_t* strides, int32_t dtype) {
  dnnl_dims_t d, s;
  if (nd < 1 || nd > DNNL_MAX_NDIMS || dnnl_type_of(dtype) == dnnl_data_type_undef) return 0;
  for (int i = 0; i < nd; i++) {
    if (dims[i] > 1 && strides[i] <= 0) return 0; /* an expanded operand is not a oneDNN memory */
    d[i] = dims[i];
    s[i] = strides[i];
  }
  return p_dnnl_memory_desc_init_by_strides(md, nd, d, dnnl_type_of(dtype), s) == dnnl_success;
}

int dnnl_is_reference(const_dnnl_primitive_desc_t pd) {
  const char* impl = NULL;
  return p_dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl ||
         strstr(impl, "ref") != NULL;
}

int dnnl_team_enter(int team) {
  int saved = omp_get_max_threads();
  if (team < 1) team = 1;
  if (team != saved) omp_set_num_threads(team);
  return saved;
}

void dnnl_team_leave(int saved, int team) {
  if (team < 1) team = 1;
  if (team != saved) omp_set_num_threads(saved);
}

#else /* no oneDNN at build time: every plugin runs its own kernels */

int ral_dnnl_available(void) { return 0; }

#endif
