/*
 * ocl.h -- what the OpenCL plugin's source files share: the device table, errors, the
 * built-in kernel programs and the enqueue helper every op uses.
 */
#ifndef OCL_H
#define OCL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cl_api.h"
#include "dnnl_conv.h"
/* Long enough for a compiler log; the same in every file of the plugin. */
#define RAL_SDK_ERROR_CAPACITY 8192
#include "ral_plugin_sdk.h"
#include "kernels/shared.h"
#include "ral_plugin.h"

#define OCL_HIDDEN __attribute__((visibility("hidden")))
#define OCL_MAX_DEVICES 16

/* Built-in programs: one per kernels/<family>.cl, each built on first use per device. */
#define OCL_FAMILIES(X) X(ew) X(reduce) X(nn) X(blas) X(index) X(random) X(conv) X(bn) X(pool) \
  X(upsample) X(rnn)
#define OCL_FAMILY_ENUM(name) OCL_FAM_##name,
enum { OCL_FAMILIES(OCL_FAMILY_ENUM) OCL_N_FAMILIES };
#undef OCL_FAMILY_ENUM

/* Every __kernel of the built-in programs, with the family that defines it. */
#define OCL_CL_KERNELS(X)                                                                  \
  X(ew, ew_any) X(ew, ew_f32) X(ew, copy_bytes) X(ew, copy_cast)                          \
  X(ew, ew_anyc) X(ew, ew_f32c) X(ew, ew_h16c) X(ew, copy_bytesc) X(ew, copy_castc) X(ew, copy_h16c)                                          \
  X(reduce, reduce_any) X(reduce, reduce_sum_c) X(reduce, reduce_minmax_c)                        \
  X(nn, softmax_fwd) X(nn, softmax_bwd) X(nn, layer_norm_fwd) X(nn, layer_norm_bwd_input)  \
  X(nn, layer_norm_bwd_params) X(nn, nll_fwd) X(nn, nll_bwd) X(nn, sdpa_fwd) X(nn, sdpa_fwd_c) \
  X(nn, layer_norm_fwd_c) X(nn, layer_norm_bwd_input_c) X(nn, layer_norm_bwd_params_c) X(nn, softmax_fwd_c) \
  X(nn, softmax_bwd_c)                               \
  X(blas, matmul_tiled) X(blas, gemm_pack) X(blas, gemm_packc) X(blas, gemm_r8x8) X(blas, gemm_r4x16) X(blas, gemm_r6x16) X(blas, gemm_r4x8) X(blas, gemm_r8x16) X(blas, gemm_r12x16) X(blas, gemm_r16x16)                                                                 \
  X(index, embedding_fwd) X(index, embedding_bwd) X(index, gather_k) X(index, index_select_k) \
  X(index, scatter_k) X(index, tri_k) X(index, tri_c) X(index, pad_k) X(index, slice_bwd_k)                \
  X(random, random_k)                                                                       \
  X(rnn, lstm_cell_fwd) X(rnn, lstm_cell_bwd) X(rnn, gru_cell_fwd) X(rnn, gru_cell_bwd) X(rnn, rnn_bias_grad) \
  X(conv, conv_im2col) X(conv, conv_im2col_p) X(conv, conv_im2col_t) X(conv, conv_col2im) X(conv, conv_to_t) X(conv, conv_from_t)         \
  X(conv, conv_bias_grad) X(bn, bn_stats) X(bn, bn_apply) X(bn, bn_bwd_stats)               \
  X(bn, bn_bwd_apply) X(pool, maxpool2d_fwd) X(pool, maxpool2d_bwd)                          \
  X(pool, avgpool2d_fwd) X(pool, avgpool2d_bwd) X(pool, maxpool3d_fwd) X(pool, maxpool3d_bwd)       \
  X(pool, avgpool3d_fwd) X(pool, avgpool3d_bwd) X(upsample, upsample2d_fwd) X(upsample, upsample2d_bwd) \
  X(upsample, bicubic2d_fwd) X(upsample, bicubic2d_bwd)
#define OCL_KERNEL_ENUM(fam, name) OCL_K_##name,
enum { OCL_CL_KERNELS(OCL_KERNEL_ENUM) OCL_N_KERNELS };
#undef OCL_KERNEL_ENUM

typedef struct {
  cl_platform_id platform;
  cl_device_id id;
  cl_context ctx;
  char name[128], vendor[64], driver[64], platform_name[128], type[32];
  int fp64, cpu;
  /* Buffers are host memory the plugin allocated (CL_MEM_USE_HOST_PTR), proven shared with
   * the runtime at init (inline.c): small commands may run on the calling thread. */
  int host_mem;
  size_t host_align;
  cl_ulong max_alloc, global_mem;
  size_t max_wg;
  cl_uint addr_bits, vec_f32;
  /* Guards program builds and the set-args + enqueue pair of a shared cl_kernel. */
  pthread_mutex_t lock;
  cl_program programs[OCL_N_FAMILIES];
  cl_kernel kernels[OCL_N_KERNELS];
  size_t kernel_wg[OCL_N_KERNELS];
} ocl_device;

extern ocl_device g_dev[OCL_MAX_DEVICES];
extern int g_ndev;

/* ral_stream is an in-order command queue of one device. `err` is the device-side fault
 * record of the index kernels queued on it (see queue.c); `armed` says one may have run
 * since the last synchronization, so only then does a sync pay for reading it.
 * `enqueued` counts commands queued (bumped after each enqueue returns); `tail` is the
 * last marker queued by event_record/query, the last host read, or (inline streams) the
 * last queued command, with `tail_n` the commands counted up to it, so query can answer
 * from it exactly while nothing was queued since (queue.c).
 * `gate` (CPU runtimes, queue.c): a user event that the commands queued since it was made
 * wait behind, so that a run of small commands reaches the runtime's worker threads as one
 * batch (one wake-up) instead of one wake-up per command; `held` counts them. Opened
 * (under `gate_mu`) by every wait, query, event record and read to the host, after
 * OCL_GATE_MAX commands, and by a launch large enough to start at once. */
/* Panels kept per stream (panels.c): at most this many, of at most this many bytes in all. */
#define OCL_PANEL_SLOTS 16
#define OCL_PANEL_CACHE_MAX ((size_t)512 << 20)

struct ral_stream_s {
  cl_command_queue q;
  int32_t device;
  cl_mem err;
  _Atomic int armed;
  _Atomic uint64_t enqueued;
  pthread_mutex_t tail_mu;
  cl_event tail;
  uint64_t tail_n;
  int batch; /* gate commands on this stream (a CPU device, TORCH_FL_OPENCL_BATCH != 0) */
  pthread_mutex_t gate_mu;
  cl_event gate;
  int held;
  /* Inline execution (inline.c): `inl` says this stream may run small commands on the
   * calling thread. Every command is announced and queued under `inl_mu` (held from
   * ocl_stream_hold to ocl_stream_queued/unqueued; an inline command holds it while it
   * runs); `done_n` counts the announced commands known complete (a synchronize, or the
   * tail event of the last one). The stream is idle -- an inline command may run -- iff
   * done_n == announced. */
  int inl;
  pthread_mutex_t inl_mu;
  uint64_t announced, done_n;
  /* GEMM panel buffers kept for this stream's later GEMMs (panels.c), under panel_mu. */
  pthread_mutex_t panel_mu;
  struct {
    cl_mem mem;
    size_t cap;
  } panels[OCL_PANEL_SLOTS];
  int n_panels;
  size_t panel_bytes;
};

/*! A panel buffer of at least nbytes for a GEMM queued on c's stream: a kept one or a new one
 *  (NULL with *err set when the runtime has no memory even after the kept ones were released). */
cl_mem ocl_panel_get(const ral_kernel_call* c, size_t nbytes, cl_int* err);
/*! Give a panel back to c's stream once the GEMM reading it is queued (or release it). */
void ocl_panel_put(const ral_kernel_call* c, cl_mem m);
/*! Release a stream's kept panels (the stream is being destroyed). */
void ocl_panels_release(struct ral_stream_s* s);

/* Commands one gate holds back at most before it opens by itself. */
#define OCL_GATE_MAX 16

/* What the plugin has asked the OpenCL runtime to do, since load (all streams, all
 * devices): read through the exported ral_opencl_counters() by tests and tools, so a
 * change in how many waits, launches or flushes an op costs shows without timing it. */
#define OCL_COUNTERS(X)                                                                       \
  X(kernels) X(reads) X(writes) X(copies) X(fills) X(markers) X(barriers) X(flushes)          \
  X(finishes) X(waits) X(buffers) X(gates) X(gate_opens) X(inline_ops) X(inline_copies)
#define OCL_COUNTER_ENUM(name) OCL_CNT_##name,
enum { OCL_COUNTERS(OCL_COUNTER_ENUM) OCL_N_COUNTERS };
#undef OCL_COUNTER_ENUM
extern _Atomic uint64_t ocl_counters[OCL_N_COUNTERS];
/*! Count one OpenCL call of kind `i` (relaxed: a statistic, not a synchronization). */
static inline void ocl_count(int i) { atomic_fetch_add_explicit(&ocl_counters[i], 1, memory_order_relaxed); }

/*! Before queueing a command on `s`: on a batching stream, make sure a gate holds it back. */
void ocl_stream_hold(struct ral_stream_s* s);
/*! After a command was queued on `s`: count it (query's tail), and open the gate once it
 *  holds OCL_GATE_MAX commands or when `start` (work big enough to begin at once). */
void ocl_stream_queued(struct ral_stream_s* s, int start, cl_event ev);
/* The event out-argument of an enqueue on `s`: one for the stream's tail where it runs
 * inline (its completion says the stream is idle), else none. `ev` (of the caller, NULL
 * initialised) is passed to ocl_stream_queued, which keeps its own reference. */
#define OCL_TAIL_EV(s, ev) ((s)->inl ? (ev) : NULL)
/*! A command that ocl_stream_hold announced failed to queue (releases what hold took). */
void ocl_stream_unqueued(struct ral_stream_s* s);
/*! Close one enqueue that ocl_stream_hold announced: ocl_stream_queued(s, start, ev) when `err`
 *  is CL_SUCCESS, else ocl_stream_unqueued(s); then drop the caller's reference to `ev` (may
 *  be NULL). Returns `err`. */
cl_int ocl_stream_enqueued(struct ral_stream_s* s, cl_int err, int start, cl_event ev);
/*! Let everything queued on `s` run now (a host wait or read follows). */
void ocl_stream_start(struct ral_stream_s* s);
/*! Around a blocking call on `s`: open the gate and keep a new one from closing in front
 *  of the call (other threads' commands on `s` wait) until ocl_stream_block_end. */
void ocl_stream_block_begin(struct ral_stream_s* s);
void ocl_stream_block_end(struct ral_stream_s* s);
/*! Wait for every command queued on `s` (clFinish), the gate opened for the wait so held
 *  commands run; counted as a finish. Returns clFinish's status. */
cl_int ocl_stream_finish(struct ral_stream_s* s);
/*! Remember `ev` (the caller keeps its own reference) as the stream's tail, the command
 *  a query polls, if `n` -- the count of commands known to precede or be `ev` -- is the
 *  newest; stream_query trusts it only while no command was counted after it. */
void ocl_stream_set_tail(struct ral_stream_s* s, cl_event ev, uint64_t n);

/*! A switch read once from the environment into *cache (-1 = unread): on unless "0". */
int ocl_env_switch(const char* name, _Atomic int* cache);

/* ---------------------------------------------------------------- inline (inline.c) */
/*! At init: whether `d`'s buffers can be host memory shared with the runtime (a CPU device
 *  with unified memory, checked with a fill and a read; TORCH_FL_OPENCL_INLINE=0: never). */
int ocl_inline_probe(ocl_device* d);
/*! Whether streams of `d` run small commands inline (host_mem, and no kernel profiling). */
int ocl_inline_stream_ok(const ocl_device* d);
/*! The host address of a buffer the plugin allocated over host memory, else NULL. */
void* ocl_host_ptr(const void* mem);
/*! Host address of bytes [offset, offset + nbytes) of such a buffer; NULL if it has none
 *  or the range leaves it (the queued path then reports the error). */
void* ocl_host_span(const void* mem, uint64_t offset, uint64_t nbytes);
/*! If `s` runs inline and is idle, lock it (inl_mu) and return 1: the caller runs its
 *  command on this thread and calls ocl_inline_end. Else 0: queue the command. */
int ocl_inline_begin(struct ral_stream_s* s);
void ocl_inline_end(struct ral_stream_s* s);
/*! As ocl_inline_begin, but for big host work (inline_cnn.c): when commands are outstanding,
 *  wait for them (a finish) instead of declining. 0: the stream does not run inline, or the
 *  finish failed (queue the command; the error surfaces at the next synchronize). */
int ocl_inline_begin_drained(struct ral_stream_s* s);
/*! Largest work (elements, or multiply-adds of a GEMM) a command may do inline. */
#define OCL_INLINE_WORK ((int64_t)1 << 18)
/*! The op run inline (1) on the calling thread, or 0: queue it (inline_ops.c). */
int ocl_inline_gemm(const ral_kernel_call* c, const ocl_mmgeom* g, const ral_tensor* out, const ral_tensor* a,
                    const ral_tensor* b, const ral_tensor* in);
int ocl_inline_reduce(const ral_kernel_call* c, const ocl_rgeom* g, const ral_tensor* out, const ral_tensor* in);
int ocl_inline_ew(const ral_kernel_call* c, const ocl_geom* g, const ral_tensor* const* ts, int nt);
/*! Same-dtype copy of any strides (g->flags: element size; ts: dst, src). */
int ocl_inline_copy(const ral_kernel_call* c, const ocl_geom* g, const ral_tensor* const* ts);
/*! index_select over index.c's geometry (ts: out, self, index): 1 when run inline, with
 *  *st its status (an index out of range: nothing written, the queued path's error). */
int ocl_inline_index_select(const ral_kernel_call* c, const ocl_geom* g, const ral_tensor* const* ts, ral_status* st);

/*! CNN ops on the host over the buffers' memory (inline_cnn.c), after the stream drained:
 *  1 when run (*st its status, for the convolution), 0: run the OpenCL kernels. */
int ocl_inline_conv(const ral_kernel_call* c, ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* x,
                    const ral_tensor* w, const ral_tensor* bias, const ral_tensor* y, ral_status* st);
/*! out = beta * self + alpha * (a @ b) (float32 or a 16-bit type) on oneDNN over the buffers' host
 *  memory (inline_matmul.c; self NULL or beta 0: no addend), after the stream drained: 1 when
 *  run (*st its status), 0: run the queued path. */
int ocl_inline_matmul(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a, const ral_tensor* b,
                      const ral_tensor* self, double beta, double alpha, ral_status* st);
/*! ts: the tensors in BN_* slots (NULL: absent), float32/float16/bfloat16 contiguous [N, C, S]. */
int ocl_inline_bn(const ral_kernel_call* c, const ocl_bn* g, const ral_tensor* const ts[BN_N], int backward);
/*! big: x or grad_input [B, H, W]; small: y or grad_output [B, OH, OW]; any strides. *st: the
 *  op's status when handled (an index outside its plane in a backward: IndexError words). */
int ocl_inline_maxpool(const ral_kernel_call* c, const ocl_pool* g, const ral_tensor* big, const ral_tensor* idx,
                       const ral_tensor* small, int backward, ral_status* st);
/*! Average pooling and upsampling on the host (inline_pool.c), as ocl_inline_maxpool: big
 *  is x or grad_input [B, H, W], small y or grad_output [B, OH, OW]; contiguous. */
int ocl_inline_avgpool(const ral_kernel_call* c, const ocl_pool* g, const ral_tensor* big, const ral_tensor* small,
                       int backward);
int ocl_inline_upsample(const ral_kernel_call* c, const ocl_upsample* g, const ral_tensor* big,
                        const ral_tensor* small, int backward);
/*! 3-d max (idx non-NULL) or average pooling on the host (inline_pool.c), as
 *  ocl_inline_maxpool: big is x or grad_input [B, D, H, W], small y or grad_output; any strides. */
int ocl_inline_pool3(const ral_kernel_call* c, const ocl_pool3* g, const ral_tensor* big, const ral_tensor* idx,
                     const ral_tensor* small, int backward, ral_status* st);
/*! float16 or bfloat16: the 16-bit float types (stored as 16 bits, computed in float). */
static inline int ocl_is_half(int32_t dt) { return dt == RAL_DTYPE_FLOAT16 || dt == RAL_DTYPE_BFLOAT16; }
/*! The dtypes the CNN, pooling, upsampling and cell kernels take: float32, float16, bfloat16
 *  (computed in float; the half types are loaded and stored through ld_f/st_f, or float32
 *  shadows on the host path). */
static inline int ocl_cnn_dtype(int32_t dt) {
  return dt == RAL_DTYPE_FLOAT32 || ocl_is_half(dt);
}
/*! Host address of a tensor's every element (inline_cnn.c), NULL when it has none. */
void* ocl_tensor_host(const ral_tensor* t);
/*! A float32 view of an operand's host memory for the inline CNN loops (inline_cnn.c): f is
 *  the tensor's own memory when it is float32, else a float32 shadow with its sizes and
 *  strides (element offsets as the tensor's), filled by ocl_f32_load and rounded back by
 *  ocl_f32_store; call both with the stream drained. */
typedef struct {
  const ral_tensor* t;
  void* raw;
  float* f;
  int own;    /* f is a shadow this view holds */
  size_t cap; /* the shadow's capacity in bytes (it goes back to the thread's cache) */
} ocl_f32_view;
/*! 1 when t (NULL: an empty view) is float32/float16/bfloat16 with host memory (and its
 *  shadow allocated), else 0 with nothing to close. */
int ocl_f32_open(const ral_tensor* t, ocl_f32_view* v);
void ocl_f32_load(const ocl_f32_view* v);
void ocl_f32_store(const ocl_f32_view* v);
void ocl_f32_close(ocl_f32_view* v);

/* ---------------------------------------------------------------- errors */
/*! Set this thread's last-error text (printf-style) and return `status`. */
ral_status ocl_error(ral_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/*! Kernel-side failure prefixed with the op name. */
ral_status ocl_fail(const ral_kernel_call* c, ral_status status, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*! An index fault of `site` (OCL_SITE_*) as PyTorch's CPU words (IndexError in Python);
 *  `queued`: found by a queued kernel at a synchronization, else by an inline command. */
ral_status ocl_index_error(int site, long long index, int dim, long long size, int queued);
/*! Failure of an OpenCL call: names the call and the CL error. */
ral_status ocl_cl_fail(cl_int err, const char* what);
/*! This thread's last-error text. */
const char* ocl_last_error(void);
/*! Device by plugin-local index, or NULL with last_error set. */
ocl_device* ocl_device_get(int32_t device);

/* ---------------------------------------------------------------- programs */
/*! The cl_kernel of a built-in kernel on a device, building its program on first use. */
ral_status ocl_kernel_get(ocl_device* d, int kid, cl_kernel* k);
/*! Build a program for one device from source, through the disk cache. On failure
 *  returns COMPILE_FAILED with `what` and the build log in last_error. */
ral_status ocl_build_program(ocl_device* d, const char* source, const char* options,
                             const char* what, cl_program* out);
/*! Release every program and kernel of a device. */
void ocl_programs_release(ocl_device* d);
/*! Disk cache: load the binary for `key` into a malloc'd buffer, 0 on a hit. */
int ocl_cache_load(const char* key, unsigned char** data, size_t* size);
/*! Disk cache: store a binary under `key`; silently does nothing if the dir is unwritable. */
void ocl_cache_store(const char* key, const unsigned char* data, size_t size);
/*! Hex key of (device, driver, options, source) for the disk cache. */
void ocl_cache_key(const ocl_device* d, const char* source, const char* options, char out[33]);

/* ---------------------------------------------------------------- launching */
typedef struct {
  size_t size;
  const void* ptr;
} ocl_arg;

/*! The fault-record kernel argument of the launch's stream. */
ocl_arg ocl_stream_err_arg(const ral_kernel_call* c);
/*! Mark that a bounds-checked kernel was queued on the launch's stream (after the enqueue). */
void ocl_stream_arm(const ral_kernel_call* c);

/*! Set args and enqueue a built-in kernel on the call's stream. `global` is rounded up to
 *  a multiple of `local` (0 = let the runtime pick); sizes beyond the device's limits
 *  fail with RAL_ERROR_INVALID_ARGUMENT before anything is queued. */
ral_status ocl_enqueue(const ral_kernel_call* c, int kid, int nargs, const ocl_arg* args,
                       cl_uint dims, const size_t* global, const size_t* local);
/*! Same for an arbitrary cl_kernel (jit modules); `lock` serialises its args. */
ral_status ocl_enqueue_kernel(const ral_kernel_call* c, ocl_device* d, cl_kernel k,
                              pthread_mutex_t* lock, int nargs, const ocl_arg* args,
                              cl_uint dims, const size_t* global, const size_t* local);
/*! Kernel timing for tuning (profile.c): on when TORCH_FL_OPENCL_PROFILE names a file. */
int ocl_profile_on(void);
/*! Remember a queued kernel's event (takes the reference) for the next flush. */
void ocl_profile_add(cl_event ev, cl_kernel k, cl_uint dims, const size_t* g, const size_t* l);
/*! Wait for the remembered kernels and append their timings to the profile file. */
void ocl_profile_flush(void);
/*! Whether the call's device is an OpenCL CPU device (PoCL): kernels shaped for it. */
static inline int ocl_on_cpu(const ral_kernel_call* c) {
  ocl_device* d = ocl_device_get(c->device);
  return d && d->cpu;
}
/*! CPU shape of an n-element launch (d->cpu): work-items of `*chunk` consecutive
 *  elements, few enough that the runtime schedules a few dozen work-groups of size 1. */
void ocl_cpu_chunks(int64_t n, int64_t min_chunk, size_t* global, int64_t* chunk);
/* A launch of this many work-items (or elements, chunked) opens its stream's batch gate at
 * once (queue.c): it runs long enough that starting early beats saving a wake-up. */
#define OCL_START_WORK ((int64_t)1 << 18)
/*! Enqueue a CPU-shaped kernel over n elements: args[nargs] (room for it is the caller's)
 *  becomes the chunk length (>= min_chunk units), work-groups of one work-item; n above the per-launch limit
 *  fails with RAL_ERROR_INVALID_ARGUMENT before anything is queued. */
ral_status ocl_enqueue_chunked(const ral_kernel_call* c, int kid, int nargs, ocl_arg* args, int64_t n,
                               int64_t min_chunk);
/*! A row kernel over `rows` rows of about `row_len` elements: CPU-shaped chunks of rows
 *  (>= ~4096 elements each) on a CPU device, else one row per work-item; args[nargs] (room
 *  for it is the caller's) becomes the rows per work-item (conv.c). */
ral_status ocl_enqueue_rows(const ral_kernel_call* c, int kid, int nargs, ocl_arg* args, int64_t rows,
                            int64_t row_len);
/*! Work-group size of a one-element-per-work-item launch: 64, or on a CPU runtime up to
 *  1024 (each work-group is a scheduling step there; its work-items become one loop). */
size_t ocl_flat_local(const ral_kernel_call* c, int kid);
/*! Largest power-of-two work-group <= want that a kernel accepts on the device. */
size_t ocl_local_size(ocl_device* d, int kid, size_t want);

/*! out = beta * bias + alpha * a @ b over float32 rank-2/3 descriptors of any strides
 *  (bias broadcast to out, NULL for none): the plugin's GEMM (blas.c) for other ops. */
ral_status ocl_gemm(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a, const ral_tensor* b,
                    const ral_tensor* bias, double beta, double alpha);

/*! Columns per B panel the register GEMM uses for an M x N x K product, or 0 when it would
 *  not take packed panels (tiny products, TORCH_FL_OPENCL_GEMM=tiled): a caller that can
 *  write B straight into panels (conv.c's im2col) then calls ocl_gemm_packed_b. */
int ocl_gemm_panel(const ral_kernel_call* c, int64_t M, int64_t N, int64_t K);
/*! out[b] = a[b] @ B[b] over rank-3 float32 out [batch, M, N] and a [batch, M, K], with B
 *  given as gemm_pack's panels of ocl_gemm_panel(M, N, K) columns in `pb`. */
ral_status ocl_gemm_packed_b(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a, cl_mem pb,
                             int64_t K);

/* ---------------------------------------------------------------- call access */
static inline const ral_tensor* ocl_out(const ral_kernel_call* c, int i) { return &c->tensors[i]; }
static inline const ral_tensor* ocl_in(const ral_kernel_call* c, int i) {
  return &c->tensors[c->n_outputs + i];
}
static inline int ocl_absent(const ral_tensor* t) { return t->dtype == RAL_DTYPE_COUNT || !t->data; }
/*! An ocl_arg for a tensor's buffer (its cl_mem handle). */
static inline ocl_arg ocl_mem(const ral_tensor* t) { return (ocl_arg){sizeof(cl_mem), &t->data}; }
#define OCL_VAL(v) ((ocl_arg){sizeof(v), &(v)})

int64_t ocl_numel(const ral_tensor* t);
int ocl_is_contiguous(const ral_tensor* t);
int ocl_dtype_size(int32_t dtype);
int ocl_dtype_is_float(int32_t dtype);
const char* ocl_dtype_name(int32_t dtype);
/*! Element offset of a tensor (byte_offset / element size). */
int64_t ocl_elem_off(const ral_tensor* t);
/*! Check n_outputs/n_inputs/at-least n_scalars. */
ral_status ocl_check_arity(const ral_kernel_call* c, int n_out, int n_in, int n_scalars);
/*! Numeric scalar i as double and int64; 0 if absent or not numeric. */
int ocl_scalar_num(const ral_kernel_call* c, int i, double* f, int64_t* v);
/*! Double value of scalar i, or dflt. */
double ocl_scalar_f(const ral_kernel_call* c, int i, double dflt);
/*! Integer value of scalar i, or dflt. */
int64_t ocl_scalar_i(const ral_kernel_call* c, int i, int64_t dflt);
/*! INT_LIST scalar i (count in *n), or NULL. A bare INT counts as a list of one. */
const int64_t* ocl_scalar_list(const ral_kernel_call* c, int i, int* n);
/*! Wrap a possibly negative dim into [0, ndim); -1 if out of range. */
int ocl_wrap_dim(int64_t dim, int ndim);
/*! Reject ranks above OCL_MAXR with a clear message. */
ral_status ocl_check_rank(const ral_kernel_call* c);

/* ---------------------------------------------------------------- shared op pieces */
/*! A tensor descriptor over owned size/stride arrays (to reshape or broadcast freely). */
typedef struct {
  ral_tensor t;
  int64_t sizes[RAL_MAX_RANK];
  int64_t strides[RAL_MAX_RANK];
} ocl_view;
/*! `in` broadcast to `shape_of`'s shape (right-aligned; size-1 and missing dims get stride 0). */
void ocl_view_expand(ocl_view* v, const ral_tensor* in, const ral_tensor* shape_of);
/*! A contiguous descriptor of `ndim` dims over t's buffer/offset/dtype. */
void ocl_view_contiguous(ocl_view* v, const ral_tensor* t, int ndim, const int64_t* sizes);
/*! Element-wise geometry over out's shape for operands ts[0..nt) (same shape), dims coalesced. */
void ocl_geom_init(ocl_geom* g, const ral_tensor* const* ts, int nt);
/*! Run an element-wise op: ts[0] is the output, ts[1..nt) the inputs (any dtypes). */
ral_status ocl_ew_run(const ral_kernel_call* c, int op, const ral_tensor* const* ts, int nt,
                      const double* f, const int64_t* li);
/*! dst = src (same shape; dtype cast when they differ, any strides). */
/*! Path of `name` in the program cache directory (created on demand); 0 if none. */
int ocl_cache_file(const char* name, char* out, size_t cap);
ral_status ocl_copy_tensor(const ral_kernel_call* c, const ral_tensor* dst, const ral_tensor* src);
/*! Run a float32-only kernel `fn` on a call with float16/bfloat16 tensors: operands widened
 * into float32 scratch, outputs rounded once (half.c); calls `fn` as is without them. */
ral_status ocl_half_via_f32(const ral_kernel_call* c, ral_status (*fn)(const ral_kernel_call*));
/*! Fill every byte of a contiguous-or-not tensor with zero (fresh outputs). */
ral_status ocl_zero_tensor(const ral_kernel_call* c, const ral_tensor* t);
/*! Compile entry helpers (compile.c). */
ral_status ocl_compile(int32_t device, const char* lang, const char* source, const char* options,
                       ral_module* module);
ral_status ocl_module_get_kernel(ral_module module, const char* name, ral_kernel_fn* kernel);
ral_status ocl_module_destroy(ral_module module);

/* Memory, streams and events (memory.c, queue.c). */
ral_status ocl_malloc(int32_t device, uint64_t nbytes, void** ptr);
ral_status ocl_free(int32_t device, void* ptr);
ral_status ocl_memcpy_h2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                          uint64_t nbytes, ral_stream stream);
ral_status ocl_memcpy_d2h(int32_t device, void* dst, const void* src, uint64_t src_offset,
                          uint64_t nbytes, ral_stream stream);
ral_status ocl_memcpy_d2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                          uint64_t src_offset, uint64_t nbytes, ral_stream stream);
ral_status ocl_memset(int32_t device, void* dst, uint64_t offset, int32_t value, uint64_t nbytes,
                      ral_stream stream);
ral_status ocl_stream_create(int32_t device, ral_stream* stream);
ral_status ocl_stream_destroy(int32_t device, ral_stream stream);
ral_status ocl_stream_synchronize(int32_t device, ral_stream stream);
ral_status ocl_stream_query(int32_t device, ral_stream stream);
ral_status ocl_event_create(int32_t device, ral_event* event);
ral_status ocl_event_destroy(int32_t device, ral_event event);
ral_status ocl_event_record(int32_t device, ral_event event, ral_stream stream);
ral_status ocl_event_synchronize(int32_t device, ral_event event);
ral_status ocl_event_query(int32_t device, ral_event event);
ral_status ocl_stream_wait_event(int32_t device, ral_stream stream, ral_event event);
ral_status ocl_event_elapsed_ms(int32_t device, ral_event start, ral_event end, float* ms);

/* Built-in op kernels exported through get_kernel (kernels_list.h). */
#include "kernels_list.h"

#endif /* OCL_H */
