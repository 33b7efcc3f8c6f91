/* panels.c -- GEMM panel buffers kept per stream and reused by its later GEMMs.
 *
 * Every GEMM packs its operands into k-major panels (blas.c). A fresh buffer per panel cost a
 * clCreateBuffer each, and on a CPU runtime (PoCL) a host allocation whose pages fault on the
 * first pack: a GPT-2 training step packs about 140 panels, its LM head's alone some 250 MB.
 * A stream's queue is in order, so a later command that rewrites a kept panel runs only after
 * every earlier command that read it: a panel goes back to its stream's cache as soon as the
 * GEMM that reads it is queued. At most OCL_PANEL_SLOTS panels are kept per stream, the most
 * recently used, of OCL_PANEL_CACHE_MAX bytes in all or a sixteenth of the device's memory if
 * less; older ones are released (OpenCL frees a released buffer once the commands using it
 * finish). */
#include <pthread.h>
#include <string.h>

#include "ocl.h"

/* Whether a kept buffer of `cap` bytes should serve a request of n bytes (at most twice n, so a
 * small GEMM does not pin a huge panel). */
static int fits(size_t cap, size_t n) { return cap >= n && cap <= 2 * n; }

/* Remove kept panel i, keeping the others in the order they were given back (oldest first). */
static void remove_at(struct ral_stream_s* s, int i) {
  s->panel_bytes -= s->panels[i].cap;
  memmove(&s->panels[i], &s->panels[i + 1], (size_t)(s->n_panels - i - 1) * sizeof s->panels[0]);
  s->n_panels--;
}

static void drop_all_locked(struct ral_stream_s* s) {
  for (int i = 0; i < s->n_panels; i++) CL.clReleaseMemObject(s->panels[i].mem);
  s->n_panels = 0;
  s->panel_bytes = 0;
}

cl_mem ocl_panel_get(const ral_kernel_call* c, size_t nbytes, cl_int* err) {
  struct ral_stream_s* s = c->stream;
  pthread_mutex_lock(&s->panel_mu);
  int best = -1;
  for (int i = 0; i < s->n_panels; i++)
    if (fits(s->panels[i].cap, nbytes) && (best < 0 || s->panels[i].cap < s->panels[best].cap)) best = i;
  if (best >= 0) {
    cl_mem m = s->panels[best].mem;
    remove_at(s, best);
    pthread_mutex_unlock(&s->panel_mu);
    *err = CL_SUCCESS;
    return m;
  }
  pthread_mutex_unlock(&s->panel_mu);
  ocl_device* d = ocl_device_get(c->device);
  ocl_count(OCL_CNT_buffers);
  cl_mem m = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, nbytes, NULL, err);
  if (!m) { /* out of device memory: give the kept panels back and try once more */
    pthread_mutex_lock(&s->panel_mu);
    drop_all_locked(s);
    pthread_mutex_unlock(&s->panel_mu);
    ocl_count(OCL_CNT_buffers);
    m = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, nbytes, NULL, err);
  }
  return m;
}

/* Bytes of panels a stream of this device may keep. */
static size_t cache_max(const ocl_device* d) {
  size_t sixteenth = d && d->global_mem ? (size_t)(d->global_mem / 16) : OCL_PANEL_CACHE_MAX;
  return sixteenth < OCL_PANEL_CACHE_MAX ? sixteenth : OCL_PANEL_CACHE_MAX;
}

void ocl_panel_put(const ral_kernel_call* c, cl_mem m) {
  if (!m) return;
  struct ral_stream_s* s = c->stream;
  size_t cap = 0, limit = cache_max(ocl_device_get(c->device));
  if (CL.clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof cap, &cap, NULL) != CL_SUCCESS) cap = 0;
  if (cap == 0 || cap > limit) {
    CL.clReleaseMemObject(m);
    return;
  }
  cl_mem evicted[OCL_PANEL_SLOTS];
  int n_evicted = 0;
  pthread_mutex_lock(&s->panel_mu);
  while (s->n_panels == OCL_PANEL_SLOTS || s->panel_bytes + cap > limit) {
    evicted[n_evicted++] = s->panels[0].mem; /* the least recently given back */
    remove_at(s, 0);
  }
  s->panels[s->n_panels].mem = m;
  s->panels[s->n_panels++].cap = cap;
  s->panel_bytes += cap;
  pthread_mutex_unlock(&s->panel_mu);
  for (int i = 0; i < n_evicted; i++) CL.clReleaseMemObject(evicted[i]);
}

void ocl_panels_release(struct ral_stream_s* s) {
  pthread_mutex_lock(&s->panel_mu);
  drop_all_locked(s);
  pthread_mutex_unlock(&s->panel_mu);
}
