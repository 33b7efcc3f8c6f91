/*
 * plugin.c -- the entry symbol, the API table, devices and the kernel table.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host.h"
#include "pool.h"
#include "runtime.h"

#define HOST_PLUGIN_VERSION "1.0.0"

/* ---------------------------------------------------------------- kernels */
typedef struct {
  const char* name;
  ral_kernel_fn fn;
} kernel_entry;

#define HOST_KERNEL_ENTRY(name) {#name, name},
static const kernel_entry kernel_table[] = {HOST_KERNELS(HOST_KERNEL_ENTRY)};
#undef HOST_KERNEL_ENTRY
#define KERNEL_COUNT (sizeof kernel_table / sizeof kernel_table[0])

static ral_status host_get_kernel(const char* symbol, ral_kernel_fn* kernel) {
  if (!kernel) return host_error(RAL_ERROR_INVALID_ARGUMENT, "get_kernel: null output");
  *kernel = NULL;
  if (!symbol) return host_error(RAL_ERROR_INVALID_ARGUMENT, "get_kernel: null symbol");
  for (size_t i = 0; i < KERNEL_COUNT; i++)
    if (strcmp(kernel_table[i].name, symbol) == 0) {
      *kernel = kernel_table[i].fn;
      return RAL_OK;
    }
  return host_error(RAL_ERROR_UNSUPPORTED, "host plugin has no kernel named '%s'", symbol);
}

const char* host_kernel_name(ral_kernel_fn fn) {
  for (size_t i = 0; i < KERNEL_COUNT; i++)
    if (kernel_table[i].fn == fn) return kernel_table[i].name;
  return NULL;
}

/* ---------------------------------------------------------------- devices */
static int32_t g_device_count = 1;
static char g_cpu_model[96] = "unknown";

/* The model line of /proc/cpuinfo, e.g. "AMD EPYC 7B13"; "unknown" if unreadable. */
static void read_cpu_model(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char* v = strchr(line, ':');
    if (!v) break;
    v++;
    while (*v == ' ' || *v == '\t') v++;
    snprintf(g_cpu_model, sizeof g_cpu_model, "%s", v);
    g_cpu_model[strcspn(g_cpu_model, "\n")] = 0;
    break;
  }
  fclose(f);
}

int host_device_valid(int32_t device) { return device >= 0 && device < g_device_count; }

static ral_status host_init(void) {
  const char* env = getenv("RAL_HOST_DEVICE_COUNT");
  g_device_count = 1;
  if (env && *env) {
    char* end;
    long n = strtol(env, &end, 10);
    if (*end || n < 0 || n > 64)
      return host_error(RAL_ERROR_INVALID_ARGUMENT,
                        "RAL_HOST_DEVICE_COUNT='%s' is not a count in 0..64", env);
    g_device_count = (int32_t)n;
  }
  read_cpu_model();
  host_blas_load(); /* a failure is reported by the first matmul */
  return host_runtime_init(g_device_count);
}

static void host_shutdown(void) {
  host_runtime_shutdown();
  host_pool_shutdown();
}

static ral_status host_device_count(int32_t* count) {
  if (!count) return host_error(RAL_ERROR_INVALID_ARGUMENT, "device_count: null output");
  *count = g_device_count;
  return RAL_OK;
}

static ral_status host_device_info(int32_t device, ral_device_info* info) {
  if (!info) return host_error(RAL_ERROR_INVALID_ARGUMENT, "device_info: null output");
  if (!host_device_valid(device))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "host device %d does not exist", device);
  /* Write only the fields that fit in the caller's struct (it may be an older ABI). */
  ral_device_info mine;
  memset(&mine, 0, sizeof mine);
  mine.struct_size = info->struct_size;
  mine.dtype_mask = (1u << RAL_DTYPE_COUNT) - 1u;
  mine.flags = RAL_DEVICE_HOST_MAPPABLE | RAL_DEVICE_FP16 | RAL_DEVICE_BF16;
  mine.max_rank = RAL_MAX_RANK;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  mine.total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  mine.max_alloc_size = mine.total_memory;
  snprintf(mine.name, sizeof mine.name, "Host CPU (%s)", g_cpu_model);
  snprintf(mine.vendor, sizeof mine.vendor, "torch_fl");
  snprintf(mine.type, sizeof mine.type, "cpu");
  snprintf(mine.driver_version, sizeof mine.driver_version, "host " HOST_PLUGIN_VERSION);
  size_t n = info->struct_size < sizeof mine ? info->struct_size : sizeof mine;
  if (n > sizeof(uint32_t)) memcpy((char*)info + sizeof(uint32_t), (char*)&mine + sizeof(uint32_t),
                                   n - sizeof(uint32_t));
  return RAL_OK;
}

/* ---------------------------------------------------------------- table */
static const ral_plugin_api host_api = {
    .struct_size = sizeof(ral_plugin_api),
    .abi_major = RAL_ABI_MAJOR,
    .abi_minor = RAL_ABI_MINOR,
    .plugin_name = "host",
    .plugin_version = HOST_PLUGIN_VERSION,
    .init = host_init,
    .shutdown = host_shutdown,
    .device_count = host_device_count,
    .device_info = host_device_info,
    .malloc = host_malloc,
    .free = host_free,
    .memcpy_h2d = host_memcpy_h2d,
    .memcpy_d2h = host_memcpy_d2h,
    .memcpy_d2d = host_memcpy_d2d,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .stream_synchronize = host_stream_synchronize,
    .stream_query = host_stream_query,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_synchronize = host_event_synchronize,
    .event_query = host_event_query,
    .stream_wait_event = host_stream_wait_event,
    .event_elapsed_ms = host_event_elapsed_ms,
    .get_kernel = host_get_kernel,
    .launch = host_launch,
    .last_error = host_last_error,
    .memset = host_memset,
    .compile = host_compile,
    .module_get_kernel = host_module_get_kernel,
    .module_destroy = host_module_destroy,
};

RAL_PLUGIN_EXPORT const ral_plugin_api* ral_plugin_entry_v1(uint16_t runtime_abi_major,
                                                            uint16_t runtime_abi_minor) {
  (void)runtime_abi_minor;
  return runtime_abi_major == RAL_ABI_MAJOR ? &host_api : NULL;
}
