/*
 * memory.c -- device memory is a cl_mem handle; the runtime only ever sees it as an
 * opaque pointer and addresses inside it by offset. Copies are enqueued on the stream.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

static void CL_CALLBACK free_host_memory(cl_mem m, void* host) {
  (void)m;
  free(host);
}

/* Copies of at most this many bytes between buffers run inline (memcpy/memset on the
 * calling thread); larger ones go to the runtime's threads, which may overlap them with
 * the host's work. Reads and writes to the host are the caller's memcpy either way. */
#define INLINE_COPY_BYTES ((uint64_t)1 << 20)

ral_status ocl_malloc(int32_t device, uint64_t nbytes, void** ptr) {
  ocl_device* d = ocl_device_get(device);
  *ptr = NULL;
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  if (nbytes > d->max_alloc)
    return ocl_error(RAL_ERROR_OUT_OF_MEMORY, "%llu bytes exceed the device's largest allocation (%llu bytes)",
                     (unsigned long long)nbytes, (unsigned long long)d->max_alloc);
  cl_int err;
  ocl_count(OCL_CNT_buffers);
  if (d->host_mem) { /* host memory the runtime uses as the buffer (inline.c) */
    void* host = NULL;
    if (posix_memalign(&host, d->host_align, nbytes ? nbytes : 1) != 0)
      return ocl_error(RAL_ERROR_OUT_OF_MEMORY, "no host memory for a buffer of %llu bytes", (unsigned long long)nbytes);
    cl_mem m = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, nbytes ? nbytes : 1, host, &err);
    /* Freed when the runtime destroys the buffer: after the last queued command using it. */
    if (m && CL.clSetMemObjectDestructorCallback(m, free_host_memory, host) != CL_SUCCESS) {
      CL.clReleaseMemObject(m);
      m = NULL, err = CL_OUT_OF_HOST_MEMORY;
    }
    if (!m) {
      free(host);
      return ocl_cl_fail(err, "clCreateBuffer");
    }
    *ptr = m;
    return RAL_OK;
  }
  cl_mem m = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, nbytes ? nbytes : 1, NULL, &err);
  if (!m) return ocl_cl_fail(err, "clCreateBuffer");
  *ptr = m;
  return RAL_OK;
}

ral_status ocl_free(int32_t device, void* ptr) {
  (void)device;
  cl_int err = ptr ? CL.clReleaseMemObject((cl_mem)ptr) : CL_SUCCESS;
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clReleaseMemObject");
}

static void CL_CALLBACK free_staging(cl_event ev, cl_int status, void* data) {
  (void)ev, (void)status;
  free(data);
}

ral_status ocl_memcpy_h2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                          uint64_t nbytes, ral_stream stream) {
  (void)device;
  unsigned char* host = stream->inl ? ocl_host_span(dst, dst_offset, nbytes) : NULL;
  if (host && ocl_inline_begin(stream)) { /* idle stream: the copy done now is the same */
    memcpy(host, src, nbytes);
    ocl_inline_end(stream);
    ocl_count(OCL_CNT_inline_copies);
    return RAL_OK;
  }
  /* The caller may reuse `src` at once: stage it, and free the copy when the write ends,
   * so the upload stays asynchronous. */
  void* staged = malloc(nbytes ? nbytes : 1);
  cl_int err;
  ocl_count(OCL_CNT_writes);
  if (!staged) {
    ocl_stream_hold(stream);
    ocl_stream_block_begin(stream);
    err = CL.clEnqueueWriteBuffer(stream->q, (cl_mem)dst, CL_TRUE, dst_offset, nbytes, src, 0, NULL, NULL);
    ocl_stream_block_end(stream);
    err = ocl_stream_enqueued(stream, err, 0, NULL); /* blocking: done, but no event */
    return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueWriteBuffer");
  }
  memcpy(staged, src, nbytes);
  cl_event ev;
  ocl_stream_hold(stream);
  err = CL.clEnqueueWriteBuffer(stream->q, (cl_mem)dst, CL_FALSE, dst_offset, nbytes, staged, 0, NULL, &ev);
  if (err != CL_SUCCESS) {
    free(staged);
    ocl_stream_unqueued(stream);
    return ocl_cl_fail(err, "clEnqueueWriteBuffer");
  }
  if (CL.clSetEventCallback(ev, CL_COMPLETE, free_staging, staged) != CL_SUCCESS) {
    CL.clWaitForEvents(1, &ev);
    free(staged);
  }
  ocl_count(OCL_CNT_flushes);
  CL.clFlush(stream->q);
  ocl_stream_queued(stream, 0, OCL_TAIL_EV(stream, ev));
  CL.clReleaseEvent(ev);
  return RAL_OK;
}

ral_status ocl_memcpy_d2h(int32_t device, void* dst, const void* src, uint64_t src_offset,
                          uint64_t nbytes, ral_stream stream) {
  (void)device;
  const unsigned char* host = stream->inl ? ocl_host_span(src, src_offset, nbytes) : NULL;
  if (host && ocl_inline_begin(stream)) { /* idle stream: nothing to wait for, no hand-off */
    memcpy(dst, host, nbytes);
    ocl_inline_end(stream);
    ocl_count(OCL_CNT_inline_copies);
    return RAL_OK;
  }
  /* The host waits for what it reads: the read opens the gate (it starts the batch). */
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_reads);
  /* The read becomes the stream's tail (ocl_stream_queued), so the stream query (and the
   * timed wait that asks it) after a read needs no marker; if another command is counted
   * meanwhile, the tail is stale and the query marks afresh. */
  cl_event ev = NULL;
  cl_int err = CL.clEnqueueReadBuffer(stream->q, (cl_mem)src, CL_FALSE, src_offset, nbytes, dst, 0, NULL, &ev);
  err = ocl_stream_enqueued(stream, err, 1, ev);
  if (err == CL_SUCCESS) ocl_count(OCL_CNT_flushes), CL.clFlush(stream->q);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueReadBuffer");
}

ral_status ocl_memcpy_d2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                          uint64_t src_offset, uint64_t nbytes, ral_stream stream) {
  (void)device;
  if (nbytes == 0) return RAL_OK;
  unsigned char* hd = stream->inl && nbytes <= INLINE_COPY_BYTES ? ocl_host_span(dst, dst_offset, nbytes) : NULL;
  unsigned char* hs = hd ? ocl_host_span(src, src_offset, nbytes) : NULL;
  if (hs && ocl_inline_begin(stream)) {
    memmove(hd, hs, nbytes); /* clEnqueueCopyBuffer forbids overlap; memmove also allows it */
    ocl_inline_end(stream);
    ocl_count(OCL_CNT_inline_copies);
    return RAL_OK;
  }
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_copies);
  cl_event ev = NULL;
  cl_int err = CL.clEnqueueCopyBuffer(stream->q, (cl_mem)src, (cl_mem)dst, src_offset, dst_offset, nbytes,
                                      0, NULL, OCL_TAIL_EV(stream, &ev));
  err = ocl_stream_enqueued(stream, err, 0, ev);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueCopyBuffer");
}

ral_status ocl_memset(int32_t device, void* dst, uint64_t offset, int32_t value, uint64_t nbytes,
                      ral_stream stream) {
  (void)device;
  if (nbytes == 0) return RAL_OK;
  cl_uchar byte = (cl_uchar)value;
  unsigned char* hd = stream->inl && nbytes <= INLINE_COPY_BYTES ? ocl_host_span(dst, offset, nbytes) : NULL;
  if (hd && ocl_inline_begin(stream)) {
    memset(hd, byte, nbytes);
    ocl_inline_end(stream);
    ocl_count(OCL_CNT_inline_copies);
    return RAL_OK;
  }
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_fills);
  cl_event ev = NULL;
  cl_int err = CL.clEnqueueFillBuffer(stream->q, (cl_mem)dst, &byte, 1, offset, nbytes, 0, NULL,
                                      OCL_TAIL_EV(stream, &ev));
  err = ocl_stream_enqueued(stream, err, 0, ev);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueFillBuffer");
}
