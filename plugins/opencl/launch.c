/*
 * launch.c -- setting kernel arguments and enqueueing, with the device's limits checked
 * first so an oversized launch fails cleanly; and the element-wise geometry shared by
 * every op that walks tensors of one shape.
 */
#include <string.h>

#include "ocl.h"

/* Work-items of one launch: the kernels index with 64-bit math, but we keep launches
 * within 32-bit counts so every OpenCL implementation's size_t/queue limits hold. */
#define OCL_MAX_WORK_ITEMS ((size_t)1 << 32)

/* Each work-group is a scheduling step of a few microseconds on PoCL: aim for about 64 of
 * them (load balance over the runtime's threads) but never less than min_chunk units (a
 * few thousand elements) each. */
void ocl_cpu_chunks(int64_t n, int64_t min_chunk, size_t* global, int64_t* chunk) {
  int64_t ch = (n + 63) / 64;
  if (ch < min_chunk) ch = min_chunk;
  ch = (ch + 15) / 16 * 16;
  *chunk = ch;
  *global = (size_t)((n + ch - 1) / ch);
  if (*global == 0) *global = 1;
}

ral_status ocl_enqueue_chunked(const ral_kernel_call* c, int kid, int nargs, ocl_arg* args, int64_t n,
                               int64_t min_chunk) {
  ocl_device* d = ocl_device_get(c->device);
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  /* The same bound as one element per work-item, so a launch fails alike on every device. */
  if ((uint64_t)n > OCL_MAX_WORK_ITEMS)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                    "launch of %lld elements exceeds the limits of %s (%zu work-items per launch); "
                    "nothing was queued",
                    (long long)n, d->name, OCL_MAX_WORK_ITEMS);
  int64_t chunk;
  size_t global, local = 1;
  ocl_cpu_chunks(n, min_chunk, &global, &chunk);
  args[nargs] = OCL_VAL(chunk);
  ral_status st = ocl_enqueue(c, kid, nargs + 1, args, 1, &global, &local);
  /* Few work-items but n elements of work: big enough to start without waiting for a batch. */
  if (st == RAL_OK && n >= OCL_START_WORK) ocl_stream_start(c->stream);
  return st;
}

size_t ocl_local_size(ocl_device* d, int kid, size_t want) {
  cl_kernel k;
  if (!d->kernels[kid] && ocl_kernel_get(d, kid, &k) != RAL_OK) return 1; /* enqueue reports it */
  size_t cap = d->kernel_wg[kid] ? d->kernel_wg[kid] : 1;
  if (cap > d->max_wg) cap = d->max_wg;
  size_t l = 1;
  while (l * 2 <= want && l * 2 <= cap) l *= 2;
  /* PoCL 3.1 (pthread device) never finishes a barrier-using kernel launched with
   * work-groups of exactly 2; 4 costs nothing (idle items skip the loop). */
  if (l == 2 && cap >= 4) l = 4;
  return l;
}

size_t ocl_flat_local(const ral_kernel_call* c, int kid) {
  ocl_device* d = ocl_device_get(c->device);
  if (!d || !d->cpu) return 64;
  return ocl_local_size(d, kid, 1024);
}

ral_status ocl_enqueue_kernel(const ral_kernel_call* c, ocl_device* d, cl_kernel k,
                              pthread_mutex_t* lock, int nargs, const ocl_arg* args,
                              cl_uint dims, const size_t* global, const size_t* local) {
  size_t g[3], total = 1, items = 1;
  for (cl_uint i = 0; i < dims; i++) {
    size_t l = local ? local[i] : 1;
    if (l == 0 || global[i] > OCL_MAX_WORK_ITEMS || l > d->max_wg)
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                      "launch of %zu work-items (local %zu) in dim %u exceeds the limits of %s "
                      "(%zu work-items per launch, work-group <= %zu); nothing was queued",
                      global[i], l, i, d->name, OCL_MAX_WORK_ITEMS, d->max_wg);
    g[i] = (global[i] + l - 1) / l * l;
    if (g[i] == 0) g[i] = l;
    total *= g[i] / l;
    items *= g[i];
    if (total > OCL_MAX_WORK_ITEMS)
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                      "launch of more than %zu work-groups exceeds the limits of %s; nothing was queued",
                      OCL_MAX_WORK_ITEMS, d->name);
  }
  ocl_stream_hold(c->stream);
  pthread_mutex_lock(lock);
  cl_int err = CL_SUCCESS;
  for (int i = 0; i < nargs && err == CL_SUCCESS; i++) err = CL.clSetKernelArg(k, (cl_uint)i, args[i].size, args[i].ptr);
  cl_event ev = NULL;
  int prof = ocl_profile_on(); /* never with inline streams (inline.c): one owner of ev */
  if (err == CL_SUCCESS) ocl_count(OCL_CNT_kernels);
  if (err == CL_SUCCESS)
    err = CL.clEnqueueNDRangeKernel(c->stream->q, k, dims, NULL, g, local, 0, NULL,
                                    prof ? &ev : OCL_TAIL_EV(c->stream, &ev));
  if (ev && prof) ocl_profile_add(ev, k, dims, g, local);
  pthread_mutex_unlock(lock);
  if (err == CL_SUCCESS) {
    ocl_stream_queued(c->stream, items >= OCL_START_WORK, prof ? NULL : ev);
    if (ev && !prof) CL.clReleaseEvent(ev);
    return RAL_OK;
  }
  ocl_stream_unqueued(c->stream);
  ocl_cl_fail(err, "clEnqueueNDRangeKernel");
  return ocl_fail(c, err == CL_OUT_OF_RESOURCES || err == CL_INVALID_WORK_GROUP_SIZE ||
                             err == CL_INVALID_GLOBAL_WORK_SIZE || err == CL_INVALID_WORK_ITEM_SIZE
                         ? RAL_ERROR_INVALID_ARGUMENT
                         : RAL_ERROR_KERNEL_FAILED,
                  "%s", ocl_last_error());
}

ral_status ocl_enqueue(const ral_kernel_call* c, int kid, int nargs, const ocl_arg* args,
                       cl_uint dims, const size_t* global, const size_t* local) {
  ocl_device* d = ocl_device_get(c->device);
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  cl_kernel k;
  ral_status st = ocl_kernel_get(d, kid, &k);
  if (st != RAL_OK) return st;
  return ocl_enqueue_kernel(c, d, k, &d->lock, nargs, args, dims, global, local);
}

void ocl_geom_init(ocl_geom* g, const ral_tensor* const* ts, int nt) {
  memset(g, 0, sizeof *g);
  const ral_tensor* o = ts[0];
  int nd = 0;
  for (int d = 0; d < o->ndim; d++) {
    if (o->sizes[d] == 1) continue; /* size-1 dims never move an index */
    int merge = nd > 0;
    for (int k = 0; k < nt && merge; k++)
      merge = g->st[k][nd - 1] == ts[k]->strides[d] * o->sizes[d];
    if (merge) {
      g->size[nd - 1] *= o->sizes[d];
      for (int k = 0; k < nt; k++) g->st[k][nd - 1] = ts[k]->strides[d];
      continue;
    }
    g->size[nd] = o->sizes[d];
    for (int k = 0; k < nt; k++) g->st[k][nd] = ts[k]->strides[d];
    nd++;
  }
  if (nd == 0) { /* a scalar, or all dims of size 1 */
    g->size[0] = 1;
    nd = 1;
  }
  g->ndim = nd;
  g->n = ocl_numel(o);
  for (int k = 0; k < nt; k++) {
    g->off[k] = ocl_elem_off(ts[k]);
    g->dt[k] = ts[k]->dtype;
  }
  for (int k = nt; k < 4; k++) g->dt[k] = ts[0]->dtype;
}
