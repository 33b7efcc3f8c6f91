/* kernels.c -- the kernel table: a handle is 1 + an index into chunks that never
 * move, so rt_launch reads an entry without a lock. Writers hold g_rt.lock. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

#define CHUNK 256
#define MAX_CHUNKS 4096

static rt_kernel* g_chunks[MAX_CHUNKS];
static atomic_long g_count;

const rt_kernel* rt_kernel_get(int64_t handle) {
  if (handle < 1 || handle > atomic_load_explicit(&g_count, memory_order_acquire)) return NULL;
  int64_t i = handle - 1;
  return &g_chunks[i / CHUNK][i % CHUNK];
}

static int add_locked(rt_plugin* p, ral_kernel_fn fn, const char* symbol, int64_t* handle) {
  long n = atomic_load(&g_count);
  if (n >= (long)CHUNK * MAX_CHUNKS) return rt_fail(RAL_ERROR_INTERNAL, "kernel table is full");
  if (!g_chunks[n / CHUNK] && !(g_chunks[n / CHUNK] = calloc(CHUNK, sizeof(rt_kernel))))
    return rt_fail(RAL_ERROR_OUT_OF_MEMORY, "no host memory for the kernel table");
  rt_kernel* k = &g_chunks[n / CHUNK][n % CHUNK];
  k->plugin = p;
  k->fn = fn;
  k->symbol = strdup(symbol);
  atomic_store_explicit(&g_count, n + 1, memory_order_release);
  *handle = n + 1;
  return RAL_OK;
}

static int lookup_locked(rt_device* dev, const char* symbol, int64_t* handle) {
  rt_plugin* p = dev->plugin;
  long n = atomic_load(&g_count);
  for (long i = 0; i < n; i++) {
    const rt_kernel* k = &g_chunks[i / CHUNK][i % CHUNK];
    if (k->plugin == p && k->symbol && strcmp(k->symbol, symbol) == 0) {
      *handle = i + 1;
      return RAL_OK;
    }
  }
  ral_kernel_fn fn = NULL;
  int st = p->api.get_kernel(symbol, &fn);
  if (st == RAL_OK && !fn) st = RAL_ERROR_UNSUPPORTED;
  if (st != RAL_OK) return rt_plugin_fail(p, st, "get_kernel('%s') for device %d", symbol, dev->global);
  return add_locked(p, fn, symbol, handle);
}

/* Public: resolve a kernel symbol of the device's plugin (same symbol => same handle). */
int rt_kernel_lookup(int32_t device, const char* symbol, int64_t* handle) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  if (!symbol) return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "kernel symbol is NULL");
  pthread_mutex_lock(&g_rt.lock);
  st = lookup_locked(dev, symbol, handle);
  pthread_mutex_unlock(&g_rt.lock);
  return st;
}

static int compile_locked(rt_device* dev, const char* lang, const char* source,
                          const char* options, const char* kernel_name, int64_t* handle) {
  rt_plugin* p = dev->plugin;
  if (!p->rec.has_compile)
    return rt_fail(RAL_ERROR_UNSUPPORTED, "[%s] device %d cannot compile (no compile entry)",
                   p->rec.name, dev->global);
  ral_module module = NULL;
  int st = p->api.compile(dev->local, lang, source, options ? options : "", &module);
  if (st != RAL_OK) return rt_plugin_fail(p, st, "compile (%s) for device %d", lang, dev->global);
  ral_kernel_fn fn = NULL;
  st = p->api.module_get_kernel(module, kernel_name, &fn);
  if (st == RAL_OK && !fn) st = RAL_ERROR_UNSUPPORTED;
  if (st == RAL_OK) return add_locked(p, fn, kernel_name, handle);
  st = rt_plugin_fail(p, st, "module_get_kernel('%s') for device %d", kernel_name, dev->global);
  p->api.module_destroy(module);
  return st;
}

/* Public: compile source through the plugin and resolve one kernel in it. Modules live
 * as long as the process: their kernels stay referenced by the table. */
int rt_kernel_compile(int32_t device, const char* lang, const char* source, const char* options,
                      const char* kernel_name, int64_t* handle) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  if (!lang || !source || !kernel_name)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "compile needs lang, source and kernel_name");
  pthread_mutex_lock(&g_rt.lock);
  st = compile_locked(dev, lang, source, options, kernel_name, handle);
  pthread_mutex_unlock(&g_rt.lock);
  return st;
}
