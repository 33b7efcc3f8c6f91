/*
 * memory.c -- device memory is a cl_mem handle; the runtime only ever sees it as an
 * opaque pointer and addresses inside it by offset. Copies are enqueued on the stream.
 */
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

ral_status ocl_malloc(int32_t device, uint64_t nbytes, void** ptr) {
  ocl_device* d = ocl_device_get(device);
  *ptr = NULL;
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  if (nbytes > d->max_alloc)
    return ocl_error(RAL_ERROR_OUT_OF_MEMORY, "%llu bytes exceed the device's largest allocation (%llu bytes)",
                     (unsigned long long)nbytes, (unsigned long long)d->max_alloc);
  cl_int err;
  ocl_count(OCL_CNT_buffers);
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
  /* The caller may reuse `src` at once: stage it, and free the copy when the write ends,
   * so the upload stays asynchronous. */
  void* staged = malloc(nbytes ? nbytes : 1);
  cl_int err;
  ocl_count(OCL_CNT_writes);
  if (!staged) {
    ocl_stream_block_begin(stream);
    err = CL.clEnqueueWriteBuffer(stream->q, (cl_mem)dst, CL_TRUE, dst_offset, nbytes, src, 0, NULL, NULL);
    ocl_stream_block_end(stream);
    if (err == CL_SUCCESS) ocl_stream_queued(stream, 0);
    return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueWriteBuffer");
  }
  memcpy(staged, src, nbytes);
  cl_event ev;
  ocl_stream_hold(stream);
  err = CL.clEnqueueWriteBuffer(stream->q, (cl_mem)dst, CL_FALSE, dst_offset, nbytes, staged, 0, NULL, &ev);
  if (err != CL_SUCCESS) {
    free(staged);
    return ocl_cl_fail(err, "clEnqueueWriteBuffer");
  }
  if (CL.clSetEventCallback(ev, CL_COMPLETE, free_staging, staged) != CL_SUCCESS) {
    CL.clWaitForEvents(1, &ev);
    free(staged);
  }
  CL.clReleaseEvent(ev);
  ocl_count(OCL_CNT_flushes);
  CL.clFlush(stream->q);
  ocl_stream_queued(stream, 0);
  return RAL_OK;
}

ral_status ocl_memcpy_d2h(int32_t device, void* dst, const void* src, uint64_t src_offset,
                          uint64_t nbytes, ral_stream stream) {
  (void)device;
  /* The host waits for what it reads: the read opens the gate (it starts the batch). */
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_reads);
  /* Every command counted before the read precedes it in the queue; the read becomes the
   * stream's tail, so the stream query (and the timed wait that asks it) after a read needs
   * no marker. n + 1 counts the read: if another command is counted meanwhile, the tail
   * is stale and the query marks afresh. */
  uint64_t n = atomic_load(&stream->enqueued);
  cl_event ev = NULL;
  cl_int err = CL.clEnqueueReadBuffer(stream->q, (cl_mem)src, CL_FALSE, src_offset, nbytes, dst, 0, NULL, &ev);
  if (err == CL_SUCCESS) ocl_stream_queued(stream, 1);
  if (err == CL_SUCCESS) ocl_count(OCL_CNT_flushes), CL.clFlush(stream->q);
  if (ev) {
    ocl_stream_set_tail(stream, ev, n + 1);
    CL.clReleaseEvent(ev);
  }
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueReadBuffer");
}

ral_status ocl_memcpy_d2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                          uint64_t src_offset, uint64_t nbytes, ral_stream stream) {
  (void)device;
  if (nbytes == 0) return RAL_OK;
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_copies);
  cl_int err = CL.clEnqueueCopyBuffer(stream->q, (cl_mem)src, (cl_mem)dst, src_offset, dst_offset, nbytes,
                                      0, NULL, NULL);
  if (err == CL_SUCCESS) ocl_stream_queued(stream, 0);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueCopyBuffer");
}

ral_status ocl_memset(int32_t device, void* dst, uint64_t offset, int32_t value, uint64_t nbytes,
                      ral_stream stream) {
  (void)device;
  if (nbytes == 0) return RAL_OK;
  cl_uchar byte = (cl_uchar)value;
  ocl_stream_hold(stream);
  ocl_count(OCL_CNT_fills);
  cl_int err = CL.clEnqueueFillBuffer(stream->q, (cl_mem)dst, &byte, 1, offset, nbytes, 0, NULL, NULL);
  if (err == CL_SUCCESS) ocl_stream_queued(stream, 0);
  return err == CL_SUCCESS ? RAL_OK : ocl_cl_fail(err, "clEnqueueFillBuffer");
}
