/*
 * runtime.h -- the non-kernel entries of the API table (memory, copies, streams,
 * events, launch), implemented in memory.c and stream.c.
 */
#ifndef HOST_RUNTIME_H
#define HOST_RUNTIME_H

#include "ral_plugin.h"

int host_device_valid(int32_t device);

ral_status host_runtime_init(int32_t device_count);
void host_runtime_shutdown(void);

ral_status host_malloc(int32_t device, uint64_t nbytes, void** ptr);
ral_status host_free(int32_t device, void* ptr);
ral_status host_memcpy_h2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                           uint64_t nbytes, ral_stream stream);
ral_status host_memcpy_d2h(int32_t device, void* dst, const void* src, uint64_t src_offset,
                           uint64_t nbytes, ral_stream stream);
ral_status host_memcpy_d2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                           uint64_t src_offset, uint64_t nbytes, ral_stream stream);
ral_status host_memset(int32_t device, void* dst, uint64_t offset, int32_t value,
                       uint64_t nbytes, ral_stream stream);

ral_status host_stream_create(int32_t device, ral_stream* stream);
ral_status host_stream_destroy(int32_t device, ral_stream stream);
ral_status host_stream_synchronize(int32_t device, ral_stream stream);
ral_status host_stream_query(int32_t device, ral_stream stream);
ral_status host_event_create(int32_t device, ral_event* event);
ral_status host_event_destroy(int32_t device, ral_event event);
ral_status host_event_record(int32_t device, ral_event event, ral_stream stream);
ral_status host_event_synchronize(int32_t device, ral_event event);
ral_status host_event_query(int32_t device, ral_event event);
ral_status host_stream_wait_event(int32_t device, ral_stream stream, ral_event event);
ral_status host_event_elapsed_ms(int32_t device, ral_event start, ral_event end, float* ms);
ral_status host_launch(ral_kernel_fn kernel, const ral_kernel_call* call);

/* How a byte copy is queued (stream.c): whether the source must be consumed before
 * returning (host->device), and whether a direct copy on the caller is cheap enough. */
typedef enum { HOST_COPY_H2D, HOST_COPY_D2H, HOST_COPY_D2D } host_copy_kind;
ral_status host_stream_copy(int32_t device, ral_stream stream, void* dst, const void* src,
                            uint64_t nbytes, host_copy_kind kind);
ral_status host_stream_memset(int32_t device, ral_stream stream, void* dst, int value,
                              uint64_t nbytes);
/* compile.c: the jit entries (contract at the top of compile.c and in README.md). */
ral_status host_compile(int32_t device, const char* lang, const char* source, const char* options,
                        ral_module* module);
ral_status host_module_get_kernel(ral_module module, const char* name, ral_kernel_fn* kernel);
ral_status host_module_destroy(ral_module module);

/*! memcpy split across OpenMP threads when large. */
void host_memcpy_parallel(void* dst, const void* src, uint64_t nbytes);
/* A snapshot buffer of nbytes for a copy queued behind a busy stream (staging.c): reused
 * after host_staging_free, so its pages are not faulted in afresh per copy. NULL if out of memory. */
void* host_staging_alloc(uint64_t nbytes);
/* Release a buffer from host_staging_alloc (NULL is ignored); any thread. */
void host_staging_free(void* buf);

#endif /* HOST_RUNTIME_H */
