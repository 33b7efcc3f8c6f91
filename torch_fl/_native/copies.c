/* copies.c -- validated host<->device and device<->device copies and memset.
 * Copies between two devices (even of two plugins) stage through host memory in
 * bounded chunks; the staging buffer is reused by every chunk. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define STAGING_CHUNK (16u << 20)

typedef struct {
  uint64_t ptr, offset;
} range;

/* Resolve device and stream and check each range against the SecureContext. On success
 * the stream is acquired: the caller calls rt_stream_release(*dev, stream) after use. */
static int prepare(int32_t device, int32_t stream, const range* ranges, int n_ranges,
                   uint64_t nbytes, rt_device** dev, ral_stream* h) {
  int st = rt_dev_get(device, dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&(*dev)->lock);
  for (int i = 0; i < n_ranges && st == RAL_OK; i++)
    st = rt_sc_check_locked(*dev, ranges[i].ptr, ranges[i].offset, nbytes);
  if (st == RAL_OK) st = rt_stream_acquire_locked(*dev, stream, h);
  pthread_mutex_unlock(&(*dev)->lock);
  return st;
}

static int copy_result(rt_device* dev, int st, const char* what, uint64_t nbytes) {
  if (st == RAL_OK) return st;
  return rt_plugin_fail(dev->plugin, st, "%s of %" PRIu64 " bytes on device %d", what, nbytes,
                        dev->global);
}

/* Public: host -> device, ordered on `stream`. */
int rt_copy_h2d(int32_t device, int32_t stream, uint64_t dst, uint64_t dst_offset, const void* src,
                uint64_t nbytes) {
  rt_device* dev;
  ral_stream h;
  range r = {dst, dst_offset};
  int st = prepare(device, stream, &r, 1, nbytes, &dev, &h);
  if (st != RAL_OK) return st;
  if (nbytes)
    st = copy_result(dev,
                     dev->plugin->api.memcpy_h2d(dev->local, (void*)(uintptr_t)dst, dst_offset, src,
                                                 nbytes, h),
                     "memcpy_h2d", nbytes);
  rt_stream_release(dev, stream);
  return st;
}

/* Public: device -> host; waits for the stream when `sync` is set. */
int rt_copy_d2h(int32_t device, int32_t stream, void* dst, uint64_t src, uint64_t src_offset,
                uint64_t nbytes, int32_t sync) {
  rt_device* dev;
  ral_stream h;
  range r = {src, src_offset};
  int st = prepare(device, stream, &r, 1, nbytes, &dev, &h);
  if (st != RAL_OK) return st;
  if (nbytes)
    st = copy_result(dev,
                     dev->plugin->api.memcpy_d2h(dev->local, dst, (const void*)(uintptr_t)src,
                                                 src_offset, nbytes, h),
                     "memcpy_d2h", nbytes);
  rt_stream_release(dev, stream);
  if (st == RAL_OK && sync) st = rt_stream_synchronize(device, stream);
  return st;
}

static int copy_across(int32_t dst_device, uint64_t dst, uint64_t dst_offset, int32_t src_device,
                       uint64_t src, uint64_t src_offset, uint64_t nbytes, int32_t stream) {
  /* Validate both sides before moving a byte, and let the producer finish. */
  int st = rt_check_pointer(src_device, src, src_offset, nbytes);
  if (st == RAL_OK) st = rt_check_pointer(dst_device, dst, dst_offset, nbytes);
  if (st == RAL_OK) st = rt_device_synchronize(src_device);
  if (st != RAL_OK || nbytes == 0) return st;
  size_t chunk = nbytes < STAGING_CHUNK ? (size_t)nbytes : STAGING_CHUNK;
  void* staging = malloc(chunk);
  if (!staging) return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for a %zu-byte staging buffer", chunk);
  for (uint64_t done = 0; st == RAL_OK && done < nbytes; done += chunk) {
    uint64_t n = nbytes - done < chunk ? nbytes - done : chunk;
    st = rt_copy_d2h(src_device, 0, staging, src, src_offset + done, n, 1);
    if (st == RAL_OK) st = rt_copy_h2d(dst_device, stream, dst, dst_offset + done, staging, n);
  }
  if (st == RAL_OK) st = rt_stream_synchronize(dst_device, stream);
  free(staging);
  return st;
}

/* Public: device -> device; same device on `stream`, else staged through the host. */
int rt_copy_d2d(int32_t dst_device, uint64_t dst, uint64_t dst_offset, int32_t src_device,
                uint64_t src, uint64_t src_offset, uint64_t nbytes, int32_t stream) {
  if (dst_device != src_device)
    return copy_across(dst_device, dst, dst_offset, src_device, src, src_offset, nbytes, stream);
  rt_device* dev;
  ral_stream h;
  range r[2] = {{dst, dst_offset}, {src, src_offset}};
  int st = prepare(dst_device, stream, r, 2, nbytes, &dev, &h);
  if (st != RAL_OK) return st;
  if (nbytes)
    st = copy_result(dev,
                     dev->plugin->api.memcpy_d2d(dev->local, (void*)(uintptr_t)dst, dst_offset,
                                                 (const void*)(uintptr_t)src, src_offset, nbytes, h),
                     "memcpy_d2d", nbytes);
  rt_stream_release(dev, stream);
  return st;
}

/* Public: fill bytes; plugins without memset get a host-staged fill. */
int rt_memset(int32_t device, int32_t stream, uint64_t dst, uint64_t offset, int32_t value,
              uint64_t nbytes) {
  rt_device* dev;
  ral_stream h;
  range r = {dst, offset};
  int st = prepare(device, stream, &r, 1, nbytes, &dev, &h);
  if (st != RAL_OK) return st;
  if (nbytes && dev->plugin->api.memset)
    st = copy_result(dev,
                     dev->plugin->api.memset(dev->local, (void*)(uintptr_t)dst, offset, value,
                                             nbytes, h),
                     "memset", nbytes);
  int done_here = nbytes == 0 || dev->plugin->api.memset;
  rt_stream_release(dev, stream);
  if (done_here) return st;
  size_t chunk = nbytes < STAGING_CHUNK ? (size_t)nbytes : STAGING_CHUNK;
  void* fill = malloc(chunk);
  if (!fill) return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for a %zu-byte fill buffer", chunk);
  memset(fill, value, chunk);
  for (uint64_t done = 0; st == RAL_OK && done < nbytes; done += chunk) {
    uint64_t n = nbytes - done < chunk ? nbytes - done : chunk;
    st = rt_copy_h2d(device, stream, dst, offset + done, fill, n);
  }
  free(fill);
  return st;
}
