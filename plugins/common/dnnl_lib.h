/*
 * dnnl_lib.h -- what the oneDNN glue files (dnnl_conv.c, dnnl_matmul.c) share: the library,
 * loaded once with dlopen, its entry points, the CPU engine, and the bookkeeping of one call
 * (memories over user data, scratch operands in a primitive's layout, reorders). Each plugin
 * compiles these sources into its own library with hidden visibility: nothing here is exported.
 *
 * Built only with RAL_HAVE_DNNL (the plugin's Makefile found dnnl.h); the switch named by
 * RAL_DNNL_SWITCH (e.g. TORCH_FL_HOST_DNNL), set to 0 in the environment, keeps it unloaded.
 */
#ifndef RAL_DNNL_LIB_H
#define RAL_DNNL_LIB_H

#include <stdint.h>

#include "ral_plugin.h"

/* What a glue call did: ran (DONE); did not take the call and wrote nothing, so the plugin
 * runs its own kernel (DECLINED); failed after touching outputs (FAILED, an error). */
enum { RAL_DNNL_DONE = 0, RAL_DNNL_DECLINED = 1, RAL_DNNL_FAILED = 2 };

/*! Whether libdnnl was found at build time and loads now (never with the switch set to 0). */
int ral_dnnl_available(void);

#ifdef RAL_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>

/* The oneDNN entry points the glue uses, resolved with dlsym into p_<name>. */
#define DNNL_FUNCS(X)                                    \
  X(dnnl_engine_create)                                  \
  X(dnnl_stream_create)                                  \
  X(dnnl_memory_desc_init_by_strides)                    \
  X(dnnl_memory_desc_init_by_tag)                        \
  X(dnnl_memory_desc_equal)                              \
  X(dnnl_memory_desc_get_size)                           \
  X(dnnl_memory_create)                                  \
  X(dnnl_memory_destroy)                                 \
  X(dnnl_dilated_convolution_forward_desc_init)          \
  X(dnnl_dilated_convolution_backward_data_desc_init)    \
  X(dnnl_dilated_convolution_backward_weights_desc_init) \
  X(dnnl_matmul_desc_init)                               \
  X(dnnl_primitive_attr_create)                          \
  X(dnnl_primitive_attr_destroy)                         \
  X(dnnl_primitive_attr_set_output_scales)               \
  X(dnnl_primitive_attr_set_post_ops)                    \
  X(dnnl_post_ops_create)                                \
  X(dnnl_post_ops_destroy)                               \
  X(dnnl_post_ops_append_sum)                            \
  X(dnnl_reorder_primitive_desc_create)                  \
  X(dnnl_primitive_desc_create)                          \
  X(dnnl_primitive_desc_query)                           \
  X(dnnl_primitive_desc_query_md)                        \
  X(dnnl_primitive_desc_destroy)                         \
  X(dnnl_primitive_create)                               \
  X(dnnl_primitive_execute)                              \
  X(dnnl_primitive_destroy)                              \
  X(dnnl_stream_wait)                                    \
  X(dnnl_stream_destroy)

#define DNNL_PTR_DECL(name) extern __typeof__(&name) p_##name;
DNNL_FUNCS(DNNL_PTR_DECL)
#undef DNNL_PTR_DECL

/* The CPU engine (valid once ral_dnnl_available() returned 1). */
extern dnnl_engine_t ral_dnnl_engine;

/* One call's primitive inputs: the memories and scratch buffers it made, released together by
 * dnnl_call_release; `st` holds the first failure (later steps do nothing after one). */
#define DNNL_CALL_MAX_ARGS 4
typedef struct {
  dnnl_stream_t stream;
  dnnl_memory_t mems[3 * DNNL_CALL_MAX_ARGS];
  int n_mems;
  void* bufs[DNNL_CALL_MAX_ARGS];
  int n_bufs;
  dnnl_status_t st;
} dnnl_call;

/* A memory over `data` described by md, owned by the call (NULL after a failure). */
dnnl_memory_t dnnl_call_mem(dnnl_call* r, const dnnl_memory_desc_t* md, void* data);
/* Copies src (smd) into dst (dmd) with a reorder primitive, on the call's stream. */
void dnnl_call_reorder(dnnl_call* r, dnnl_memory_t src, const dnnl_memory_desc_t* smd, dnnl_memory_t dst,
                       const dnnl_memory_desc_t* dmd);
/* An operand in the layout `want`: the user memory itself when the layouts agree, else a
 * scratch memory (filled from the user memory when `in`, returned in *scratch_out too). */
dnnl_memory_t dnnl_call_operand(dnnl_call* r, dnnl_memory_t user, const dnnl_memory_desc_t* umd,
                                const dnnl_memory_desc_t* want, int in, dnnl_memory_t* scratch_out);
/* Releases what the call made (memories, scratch, stream). */
void dnnl_call_release(dnnl_call* r);

/* oneDNN's data type for a ral dtype the glue takes (float32, bfloat16, float16); undef else. */
dnnl_data_type_t dnnl_type_of(int32_t dtype);
/* A user memory descriptor over nd dims and element strides in `dtype`; 0 when oneDNN cannot
 * describe it (a stride-0 expanded dim, a dtype it lacks). */
int dnnl_user_md(dnnl_memory_desc_t* md, int nd, const int64_t* dims, const int64_t* strides, int32_t dtype);
/* Whether pd runs oneDNN's reference code ("ref:any", "gemm:ref"): slower than each plugin's own
 * kernels, so the glue declines such calls. */
int dnnl_is_reference(const_dnnl_primitive_desc_t pd);

/* Sets the calling thread's OpenMP team to `team` (>= 1) for a call; returns what to restore. */
int dnnl_team_enter(int team);
void dnnl_team_leave(int saved, int team);

#endif /* RAL_HAVE_DNNL */
#endif /* RAL_DNNL_LIB_H */
