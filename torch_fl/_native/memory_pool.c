/* memory_pool.c -- the caching, stream-ordered allocator over the plugin's malloc.
 *
 * Size classes: multiples of 512 bytes below 1 MiB, multiples of 2 MiB above; a
 * request is served only from its exact class. A freed block remembers its stream:
 * that stream may reuse it at once (stream order makes it safe); another stream may
 * take it only once the owning stream is idle. A block recorded on other streams
 * (rt_record_stream) waits for those to be idle too. The limit counts reserved bytes. When
 * a request would pass the limit, or the plugin's malloc fails, the pool drains the
 * device's streams, hands every cached block back and tries once more.
 * Everything here runs under dev->lock; the fast path is a class lookup, a list pop
 * and a hash insert. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

/* How many cached blocks one request inspects before asking the plugin instead. */
#define MAX_SCAN 16
#define BLOCK_BATCH 256

void rt_pool_init(rt_device* dev) { dev->pool.stats.limit_bytes = g_rt.default_limit; }

int rt_pool_guarded(const rt_device* dev) {
  return g_rt.checked && (dev->info.flags & RAL_DEVICE_HOST_MAPPABLE);
}

/* Class size of a request, or 0 if it cannot be represented. */
static uint64_t size_class(uint64_t n) {
  if (n < RT_SMALL_LIMIT) return n == 0 ? RT_SMALL_STEP : (n + RT_SMALL_STEP - 1) & ~(uint64_t)(RT_SMALL_STEP - 1);
  if (n > UINT64_MAX - RT_LARGE_STEP) return 0;
  return (n + RT_LARGE_STEP - 1) & ~(uint64_t)(RT_LARGE_STEP - 1);
}

/* The cached-list head of a class; large classes get a heap cell when `create`. */
static rt_block** bucket(rt_pool* pool, uint64_t cls, int create) {
  if (cls <= RT_SMALL_LIMIT) return &pool->small[cls / RT_SMALL_STEP - 1];
  rt_block** cell = u64map_get(&pool->large, cls);
  if (!cell && create && (cell = calloc(1, sizeof *cell)) && u64map_put(&pool->large, cls, cell)) {
    free(cell);
    cell = NULL;
  }
  return cell;
}

static rt_block* unlink_at(rt_block** link) {
  rt_block* b = *link;
  *link = b->next;
  return b;
}

/* Whether every stream a block was recorded on (besides `sid`) is idle. */
static int uses_done(rt_device* dev, const rt_block* b, int32_t sid) {
  if (b->n_uses == RT_BLOCK_USES_ALL) {
    for (int32_t u = 0; u < dev->n_streams; u++)
      if (u != sid && !rt_stream_idle_locked(dev, u)) return 0;
    return 1;
  }
  for (int32_t i = 0; i < b->n_uses; i++)
    if (b->uses[i] != sid && !rt_stream_idle_locked(dev, b->uses[i])) return 0;
  return 1;
}

/* A cached block of class `cls` that stream `sid` may use now, or NULL. */
static rt_block* take_cached(rt_device* dev, uint64_t cls, int32_t sid) {
  rt_block** head = bucket(&dev->pool, cls, 0);
  if (!head || !*head) return NULL;
  int n = 0;
  for (rt_block** link = head; *link && n < MAX_SCAN; link = &(*link)->next, n++)
    if ((*link)->stream == sid && uses_done(dev, *link, sid)) return unlink_at(link);
  n = 0;
  for (rt_block** link = head; *link && n < MAX_SCAN; link = &(*link)->next, n++)
    if (rt_stream_idle_locked(dev, (*link)->stream) && uses_done(dev, *link, sid)) return unlink_at(link);
  return NULL;
}

static rt_block* new_record(rt_pool* pool) {
  if (!pool->spare) {
    /* Records are carved in batches and recycled, never freed: no malloc per call. */
    rt_block* batch = calloc(BLOCK_BATCH, sizeof *batch);
    if (!batch) return NULL;
    for (int i = 0; i < BLOCK_BATCH; i++) {
      batch[i].next = pool->spare;
      pool->spare = &batch[i];
    }
  }
  return unlink_at(&pool->spare);
}

static void release_block(rt_device* dev, rt_block* b) {
  u64map_remove(&dev->pool.held, b->ptr);
  if (!rt_device_hung(dev)) dev->plugin->api.free(dev->local, (void*)(uintptr_t)b->ptr);
  dev->pool.stats.reserved_bytes -= b->size;
  dev->pool.stats.num_plugin_frees++;
  dev->pool.stats.num_cached_blocks--;
  b->next = dev->pool.spare;
  dev->pool.spare = b;
}

static void release_list(rt_device* dev, rt_block** head) {
  while (head && *head) release_block(dev, unlink_at(head));
}

/* Drain the streams, then hand every cached block back to the plugin. */
static void reclaim_locked(rt_device* dev) {
  rt_pool* pool = &dev->pool;
  if (pool->stats.num_cached_blocks == 0) return;
  rt_streams_drain_locked(dev);
  for (uint32_t i = 0; i < RT_SMALL_CLASSES; i++) release_list(dev, &pool->small[i]);
  for (uint32_t i = 0; i < pool->large.cap; i++)
    if (pool->large.keys[i]) release_list(dev, pool->large.vals[i]);
}

static int oom(rt_device* dev, uint64_t nbytes, uint64_t cls, const char* plugin_msg) {
  rt_memory_stats* s = &dev->pool.stats;
  s->num_ooms++;
  char limit[48] = "none";
  if (s->limit_bytes) snprintf(limit, sizeof limit, "%" PRIu64 " bytes", s->limit_bytes);
  return rt_fail(RAL_ERROR_OUT_OF_MEMORY,
                 "device %d ([%s]): requested %" PRIu64 " bytes (block %" PRIu64
                 "); limit %s, allocated %" PRIu64 " bytes, reserved %" PRIu64 " bytes%s%s",
                 dev->global, dev->plugin->rec.name, nbytes, cls, limit, s->allocated_bytes,
                 s->reserved_bytes, plugin_msg[0] ? "; plugin malloc: " : "", plugin_msg);
}

/* What is wrong with a malloc answer outside the contract (the plugin's fault, not a full
 * device), or NULL. A pointer the pool already holds would make two blocks of one. */
static const char* malloc_garbage(rt_device* dev, int st, void* p) {
  if (st < RAL_OK || st > RAL_ERROR_LOAD_FAILED) return "a status outside the enum";
  if (st != RAL_OK) return NULL;
  if (!p) return "RAL_OK with a NULL pointer";
  if (u64map_get(&dev->pool.held, (uint64_t)(uintptr_t)p)) return "a pointer the pool already holds";
  return NULL;
}

/* Get a fresh block from the plugin, reclaiming the cache once if needed. */
static int grow_locked(rt_device* dev, uint64_t nbytes, uint64_t cls, rt_block** out) {
  rt_memory_stats* s = &dev->pool.stats;
  char plugin_msg[512] = "";
  for (int attempt = 0; attempt < 2; attempt++) {
    if (attempt) reclaim_locked(dev);
    if (s->limit_bytes && (cls > s->limit_bytes || s->reserved_bytes > s->limit_bytes - cls))
      continue;
    void* p = NULL;
    int st = dev->plugin->api.malloc(dev->local, cls, &p);
    const char* garbage = malloc_garbage(dev, st, p);
    if (garbage)
      return rt_plugin_fail(dev->plugin, RAL_ERROR_INTERNAL,
                            "malloc(%" PRIu64 " bytes) on device %d returned %s (status %d, %p)",
                            cls, dev->global, garbage, st, p);
    /* A host-mappable pointer must honour the ABI's 64-byte alignment: kernels and the CPU
     * fallback read it as typed data. (Opaque handles such as cl_mem carry no alignment.) */
    if (st == RAL_OK && (dev->info.flags & RAL_DEVICE_HOST_MAPPABLE) && ((uintptr_t)p & 63)) {
      dev->plugin->api.free(dev->local, p);
      return rt_plugin_fail(dev->plugin, RAL_ERROR_INTERNAL,
                            "malloc(%" PRIu64 " bytes) on device %d returned %p, which is not "
                            "64-byte aligned",
                            cls, dev->global, p);
    }
    if (st == RAL_OK) { /* p is a fresh pointer: checked above */
      rt_block* b = new_record(&dev->pool);
      if (!b || u64map_put(&dev->pool.held, (uint64_t)(uintptr_t)p, b) != 0) {
        if (b) {
          b->next = dev->pool.spare;
          dev->pool.spare = b;
        }
        dev->plugin->api.free(dev->local, p);
        return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for a block record");
      }
      b->ptr = (uint64_t)(uintptr_t)p;
      b->size = cls;
      s->reserved_bytes += cls;
      s->num_plugin_mallocs++;
      if (s->reserved_bytes > s->peak_reserved_bytes) s->peak_reserved_bytes = s->reserved_bytes;
      *out = b;
      return RAL_OK;
    }
    const char* msg = dev->plugin->api.last_error ? dev->plugin->api.last_error() : NULL;
    snprintf(plugin_msg, sizeof plugin_msg, "%.300s (status %s)", msg ? msg : "", rt_status_name(st));
  }
  return oom(dev, nbytes, cls, plugin_msg);
}

/* Public: allocate from the pool (0 bytes gives a valid minimal block). */
int rt_malloc(int32_t device, uint64_t nbytes, int32_t stream, uint64_t* ptr) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  int guarded = rt_pool_guarded(dev);
  uint64_t cls = guarded && nbytes > UINT64_MAX - RT_GUARD_BYTES ? 0 : size_class(nbytes + (guarded ? RT_GUARD_BYTES : 0));
  pthread_mutex_lock(&dev->lock);
  rt_memory_stats* s = &dev->pool.stats;
  rt_block* b = NULL;
  if (stream != 0 && (st = rt_stream_check_locked(dev, stream)) != RAL_OK)
    goto out;
  if (!cls) {
    st = oom(dev, nbytes, cls, "");
    goto out;
  }
  if ((b = take_cached(dev, cls, stream))) {
    s->num_cache_hits++;
    s->num_cached_blocks--;
  } else if ((st = grow_locked(dev, nbytes, cls, &b)) != RAL_OK) {
    goto out;
  }
  b->requested = nbytes;
  b->stream = stream;
  b->n_uses = 0;
  if (u64map_put(&dev->live, b->ptr, b) != 0) {
    b->next = NULL;
    s->num_cached_blocks++;
    release_block(dev, b);
    st = rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for the allocation table");
    goto out;
  }
  /* The bytes past the request are the kernel's no-go zone: rt_pool_check_guard_locked. */
  if (guarded) memset((unsigned char*)(uintptr_t)b->ptr + nbytes, RT_GUARD_BYTE, RT_GUARD_BYTES);
  s->allocated_bytes += nbytes;
  if (s->allocated_bytes > s->peak_allocated_bytes) s->peak_allocated_bytes = s->allocated_bytes;
  s->num_allocs++;
  s->num_live_blocks++;
  *ptr = b->ptr;
out:
  pthread_mutex_unlock(&dev->lock);
  return st;
}

/* Public: return a block to the pool (also accepted after the device is gone). */
int rt_free(int32_t device, uint64_t ptr) {
  rt_device* dev;
  int st = rt_dev_get_any(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  rt_block* b = u64map_remove(&dev->live, ptr);
  if (b) {
    rt_block** head = bucket(&dev->pool, b->size, 1);
    rt_memory_stats* s = &dev->pool.stats;
    s->allocated_bytes -= b->requested;
    s->num_frees++;
    s->num_live_blocks--;
    s->num_cached_blocks++;
    if (head) {
      b->next = *head;
      *head = b;
    } else {
      b->next = NULL;
      release_block(dev, b); /* no host memory for a bucket: give it straight back */
    }
  } else {
    st = rt_sc_check_locked(dev, ptr, 0, 0);
  }
  pthread_mutex_unlock(&dev->lock);
  return st;
}

/* Public: remember that a live block is also used by `stream` (Tensor.record_stream). */
int rt_record_stream(int32_t device, uint64_t ptr, int32_t stream) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  rt_block* b = u64map_get(&dev->live, ptr);
  if ((st = rt_stream_check_locked(dev, stream)) != RAL_OK) {
    /* keep the stream's own error */
  } else if (!b) {
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "record_stream: 0x%" PRIx64 " is not a live allocation of device %d",
                 ptr, dev->global);
  } else if (stream != b->stream && b->n_uses != RT_BLOCK_USES_ALL) {
    int known = 0;
    for (int32_t i = 0; i < b->n_uses; i++) known |= b->uses[i] == stream;
    if (!known) {
      if (b->n_uses < RT_BLOCK_USES)
        b->uses[b->n_uses++] = stream;
      else
        b->n_uses = RT_BLOCK_USES_ALL;
    }
  }
  pthread_mutex_unlock(&dev->lock);
  return st;
}

/* Public: copy the device's pool statistics. */
int rt_memory_stats_get(int32_t device, rt_memory_stats* out) {
  rt_device* dev;
  int st = rt_dev_get_any(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  *out = dev->pool.stats;
  pthread_mutex_unlock(&dev->lock);
  return RAL_OK;
}

/* Public: restart peak tracking from the current figures. */
int rt_reset_peak_stats(int32_t device) {
  rt_device* dev;
  int st = rt_dev_get_any(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  dev->pool.stats.peak_allocated_bytes = dev->pool.stats.allocated_bytes;
  dev->pool.stats.peak_reserved_bytes = dev->pool.stats.reserved_bytes;
  pthread_mutex_unlock(&dev->lock);
  return RAL_OK;
}

/* Public: zero the pool's cumulative counters (torch.cuda.reset_accumulated_memory_stats). */
int rt_reset_accumulated_stats(int32_t device) {
  rt_device* dev;
  int st = rt_dev_get_any(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  dev->pool.stats.num_allocs = dev->pool.stats.num_frees = dev->pool.stats.num_cache_hits = 0;
  dev->pool.stats.num_plugin_mallocs = dev->pool.stats.num_plugin_frees = dev->pool.stats.num_ooms = 0;
  pthread_mutex_unlock(&dev->lock);
  return RAL_OK;
}

/* Public: synchronize the device and give every cached block back. */
int rt_empty_cache(int32_t device) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  reclaim_locked(dev);
  pthread_mutex_unlock(&dev->lock);
  return RAL_OK;
}

/* Public: set the per-device limit on reserved bytes (0 = none). */
int rt_set_memory_limit(int32_t device, uint64_t limit_bytes) {
  rt_device* dev;
  int st = rt_dev_get_any(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  dev->pool.stats.limit_bytes = limit_bytes;
  pthread_mutex_unlock(&dev->lock);
  return RAL_OK;
}

int rt_pool_check_guard_locked(rt_device* dev, const ral_tensor* t, int arg, const char* op_name,
                               const char* symbol) {
  const rt_block* b = t->data ? u64map_get(&dev->live, (uint64_t)(uintptr_t)t->data) : NULL;
  if (!b) return RAL_OK; /* absent optional tensor */
  unsigned char* guard = (unsigned char*)(uintptr_t)b->ptr + b->requested;
  uint32_t first = RT_GUARD_BYTES;
  for (uint32_t i = 0; i < RT_GUARD_BYTES; i++)
    if (guard[i] != RT_GUARD_BYTE) {
      first = i;
      break;
    }
  if (first == RT_GUARD_BYTES) return RAL_OK;
  memset(guard, RT_GUARD_BYTE, RT_GUARD_BYTES);
  return rt_fail(RAL_ERROR_KERNEL_FAILED,
                 "[%s] %s (kernel %s): wrote past the end of tensor %d's allocation of %" PRIu64
                 " bytes on device %d (guard byte +%u changed; TORCH_FL_CHECKED=1); memory "
                 "near it may be corrupted",
                 dev->plugin->rec.name, op_name, symbol, arg, b->requested, dev->global, first);
}
