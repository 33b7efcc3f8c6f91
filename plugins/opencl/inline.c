/*
 * inline.c -- small commands on the calling thread, for CPU runtimes whose buffers are
 * host memory (PoCL's CPU devices).
 *
 * Why: on PoCL every queued command is handed to a worker thread (a futex wake-up, a
 * scheduler pass, a completion signal), tens of microseconds per command on a loaded
 * host, while the kernels of a small step (a 32x64x64 GEMM, a sum of 2,048 floats) run in
 * a few microseconds. When the device reports unified host memory, the plugin allocates
 * every buffer over host memory of its own (CL_MEM_USE_HOST_PTR; PoCL then uses that
 * memory as the buffer, checked at init with a fill and a read), so the host can address
 * a buffer while no queued command uses it.
 *
 * Ordering: a command runs inline only when its stream is idle -- every command queued on
 * it before is complete -- and the stream's inl_mu is held while it runs, which every
 * command about to be queued on that stream takes first (ocl_stream_hold announces it);
 * so an inline command sees everything queued before it and nothing queued after it
 * starts before it ends: the stream stays in order. Other streams are not ordered with
 * it unless an event says so, as with queued commands (an event recorded after an inline
 * command completes at once; a stream waiting for an event not yet complete is not idle).
 * TORCH_FL_OPENCL_INLINE=0 turns all of it off (buffers are then plain runtime buffers);
 * so does kernel profiling (TORCH_FL_OPENCL_PROFILE), which times queued kernels. GPUs
 * never run inline.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

static int inline_enabled(void) {
  static _Atomic int on = -1;
  return ocl_env_switch("TORCH_FL_OPENCL_INLINE", &on);
}

/* Check that a CL_MEM_USE_HOST_PTR buffer is the host memory itself, both ways: a fill
 * queued on the device shows in host memory after a finish, and host writes show in a
 * read. A runtime that keeps a copy (allowed by the spec) fails and stays queued-only. */
static int shares_host_memory(ocl_device* d) {
  enum { N = 256 };
  unsigned char* h = NULL;
  if (posix_memalign((void**)&h, d->host_align, N) != 0) return 0;
  memset(h, 0, N);
  int ok = 0;
  cl_int err;
  cl_command_queue q = CL.clCreateCommandQueue(d->ctx, d->id, 0, &err);
  cl_mem m = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, N, h, &err);
  if (q && m) {
    void* hp = NULL;
    cl_uchar v = 0x5a;
    unsigned char back[N];
    ok = CL.clGetMemObjectInfo(m, CL_MEM_HOST_PTR, sizeof hp, &hp, NULL) == CL_SUCCESS && hp == h &&
         CL.clEnqueueFillBuffer(q, m, &v, 1, 0, N, 0, NULL, NULL) == CL_SUCCESS && CL.clFinish(q) == CL_SUCCESS;
    for (int i = 0; ok && i < N; i++) ok = h[i] == 0x5a;
    for (int i = 0; ok && i < N; i++) h[i] = (unsigned char)i;
    ok = ok && CL.clEnqueueReadBuffer(q, m, CL_TRUE, 0, N, back, 0, NULL, NULL) == CL_SUCCESS;
    for (int i = 0; ok && i < N; i++) ok = back[i] == (unsigned char)i;
  }
  if (m) CL.clReleaseMemObject(m);
  if (q) {
    CL.clFinish(q);
    CL.clReleaseCommandQueue(q);
  }
  free(h);
  return ok;
}

int ocl_inline_probe(ocl_device* d) {
  if (!d->cpu || !inline_enabled()) return 0;
  cl_bool unified = CL_FALSE;
  cl_uint align_bits = 0;
  CL.clGetDeviceInfo(d->id, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
  CL.clGetDeviceInfo(d->id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  if (!unified) return 0;
  /* The runtime uses the host memory as the buffer only if it is aligned as it wants. */
  d->host_align = align_bits / 8 > 64 ? align_bits / 8 : 64;
  if (d->host_align > 4096) d->host_align = 4096;
  return shares_host_memory(d);
}

/* The process-wide switch ral_opencl_inline() flips (tests and in-process A/B timing). */
static _Atomic int g_inline_on = 1;

/* Outside the plugin ABI, for tests and tools (ctypes on this library): on = 0 or 1 turns
 * inline execution off or on for every stream from the next command (a stream already
 * busy stays queued until its next synchronize either way); returns the previous setting,
 * or -1 when no device of this process can run inline (TORCH_FL_OPENCL_INLINE=0, a GPU, a
 * runtime that keeps copies). Any other `on` just returns that. */
RAL_PLUGIN_EXPORT int ral_opencl_inline(int on) {
  int any = 0;
  for (int i = 0; i < g_ndev; i++) any |= g_dev[i].host_mem;
  if (!any) return -1;
  return on == 0 || on == 1 ? atomic_exchange(&g_inline_on, on) : atomic_load(&g_inline_on);
}

int ocl_inline_stream_ok(const ocl_device* d) { return d->host_mem && !ocl_profile_on(); }

void* ocl_host_ptr(const void* mem) {
  void* hp = NULL;
  if (!mem || CL.clGetMemObjectInfo((cl_mem)mem, CL_MEM_HOST_PTR, sizeof hp, &hp, NULL) != CL_SUCCESS) return NULL;
  return hp;
}

void* ocl_host_span(const void* mem, uint64_t offset, uint64_t nbytes) {
  unsigned char* hp = ocl_host_ptr(mem);
  size_t size = 0;
  if (!hp || CL.clGetMemObjectInfo((cl_mem)mem, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS) return NULL;
  return offset <= size && nbytes <= size - offset ? hp + offset : NULL;
}

/* Under inl_mu: whether every announced command is known complete, asking the stream's
 * tail (its last read or marker) when it covers them all. */
static int idle_locked(struct ral_stream_s* s) {
  if (s->done_n == s->announced) return 1;
  uint64_t a = s->announced; /* == the commands counted queued: both move under inl_mu */
  cl_event ev = NULL;
  pthread_mutex_lock(&s->tail_mu);
  if (s->tail && s->tail_n == a) {
    ev = s->tail;
    CL.clRetainEvent(ev);
  }
  pthread_mutex_unlock(&s->tail_mu);
  if (!ev) return 0;
  cl_int state = CL_QUEUED;
  cl_int err = CL.clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof state, &state, NULL);
  CL.clReleaseEvent(ev);
  /* A failed command keeps the stream busy: its error surfaces at the next synchronize. */
  if (err != CL_SUCCESS || state != CL_COMPLETE) return 0;
  s->done_n = a;
  return 1;
}

int ocl_inline_begin(struct ral_stream_s* s) {
  if (!s || !s->inl || !atomic_load_explicit(&g_inline_on, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&s->inl_mu);
  if (idle_locked(s)) return 1;
  pthread_mutex_unlock(&s->inl_mu);
  return 0;
}

int ocl_inline_begin_drained(struct ral_stream_s* s) {
  if (!s || !s->inl || !atomic_load_explicit(&g_inline_on, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&s->inl_mu);
  if (idle_locked(s)) return 1;
  /* Every announced command was queued (both happen under inl_mu, held here), so a finish
   * covers them all, as in ocl_stream_synchronize. A failed finish keeps the stream queued:
   * the error surfaces at the next synchronize, and the caller queues its command behind. */
  if (ocl_stream_finish(s) == CL_SUCCESS) {
    s->done_n = s->announced;
    return 1;
  }
  pthread_mutex_unlock(&s->inl_mu);
  return 0;
}

void ocl_inline_end(struct ral_stream_s* s) { pthread_mutex_unlock(&s->inl_mu); }
