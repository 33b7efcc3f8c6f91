/*
 * memory.c -- device memory owned by the plugin, and the copy/memset entries.
 *
 * Every block carries a 64-byte header in front of the pointer we hand out, so free()
 * knows how the block was obtained. Large blocks come straight from mmap with
 * MADV_HUGEPAGE: a fresh 64 MB tensor then costs 32 page faults instead of 16384.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "host.h"
#include "pool.h"
#include "runtime.h"

#define HEADER 64
#define MMAP_THRESHOLD (4u << 20)
#define MAGIC_HEAP 0x7261686f73746870ull /* "rahosthp" */
#define MAGIC_MMAP 0x7261686f73746d6dull /* "rahostmm" */

typedef struct {
  uint64_t magic;
  uint64_t total; /* bytes obtained, header included */
} block_header;

ral_status host_malloc(int32_t device, uint64_t nbytes, void** ptr) {
  if (!ptr) return host_error(RAL_ERROR_INVALID_ARGUMENT, "malloc: null output");
  *ptr = NULL;
  if (!host_device_valid(device))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "malloc: host device %d does not exist", device);
  if (nbytes == 0 || nbytes > (UINT64_MAX >> 2))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "malloc: bad size %llu",
                      (unsigned long long)nbytes);
  uint64_t total = nbytes + HEADER;
  block_header* h;
  if (total >= MMAP_THRESHOLD) {
    void* p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = NULL;
    if (p) madvise(p, total, MADV_HUGEPAGE); /* advisory: ignore failure */
    h = p;
    if (h) h->magic = MAGIC_MMAP;
  } else {
    void* p = NULL;
    h = posix_memalign(&p, 64, total) == 0 ? p : NULL;
    if (h) h->magic = MAGIC_HEAP;
  }
  if (!h)
    return host_error(RAL_ERROR_OUT_OF_MEMORY, "host device %d: cannot allocate %llu bytes",
                      device, (unsigned long long)nbytes);
  h->total = total;
  *ptr = (char*)h + HEADER;
  return RAL_OK;
}

ral_status host_free(int32_t device, void* ptr) {
  (void)device;
  if (!ptr) return RAL_OK;
  block_header* h = (block_header*)((char*)ptr - HEADER);
  if (h->magic == MAGIC_MMAP) {
    h->magic = 0;
    munmap(h, h->total);
  } else if (h->magic == MAGIC_HEAP) {
    h->magic = 0;
    free(h);
  } else {
    return host_error(RAL_ERROR_INVALID_POINTER, "free: %p was not allocated by the host plugin",
                      ptr);
  }
  return RAL_OK;
}

typedef struct {
  void* dst;
  const void* src;
  uint64_t nbytes;
} copy_job;

/* Chunks [c0, c1) of 1 MiB. */
static void copy_chunks(int64_t c0, int64_t c1, void* arg) {
  const copy_job* j = arg;
  uint64_t off = (uint64_t)c0 << 20, end = (uint64_t)c1 << 20;
  if (end > j->nbytes) end = j->nbytes;
  memcpy((char*)j->dst + off, (const char*)j->src + off, end - off);
}

void host_memcpy_parallel(void* dst, const void* src, uint64_t nbytes) {
  const uint64_t chunk = 1u << 20;
  if (dst == src || nbytes == 0) return;
  if (nbytes < 4 * chunk) {
    memmove(dst, src, nbytes);
    return;
  }
  copy_job j = {dst, src, nbytes};
  host_parallel_for((int64_t)((nbytes + chunk - 1) / chunk), 1, copy_chunks, &j);
}

ral_status host_memcpy_h2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                           uint64_t nbytes, ral_stream stream) {
  return host_stream_copy(device, stream, (char*)dst + dst_offset, src, nbytes, HOST_COPY_H2D);
}

ral_status host_memcpy_d2h(int32_t device, void* dst, const void* src, uint64_t src_offset,
                           uint64_t nbytes, ral_stream stream) {
  return host_stream_copy(device, stream, dst, (const char*)src + src_offset, nbytes,
                          HOST_COPY_D2H);
}

ral_status host_memcpy_d2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                           uint64_t src_offset, uint64_t nbytes, ral_stream stream) {
  return host_stream_copy(device, stream, (char*)dst + dst_offset,
                          (const char*)src + src_offset, nbytes, HOST_COPY_D2D);
}

ral_status host_memset(int32_t device, void* dst, uint64_t offset, int32_t value,
                       uint64_t nbytes, ral_stream stream) {
  return host_stream_memset(device, stream, (char*)dst + offset, value, nbytes);
}
