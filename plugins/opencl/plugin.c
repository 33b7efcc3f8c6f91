/*
 * plugin.c -- the OpenCL plugin's entry: loads the ICD loader at init, makes one ral
 * device per OpenCL device of every platform, and hands the runtime its table.
 * Kernels are asynchronous: each op enqueues on the stream's in-order command queue.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

#define PLUGIN_NAME "opencl"
#define PLUGIN_VERSION "1.0.0"
#define MAX_PLATFORMS 16

ocl_device g_dev[OCL_MAX_DEVICES];
int g_ndev;
static int g_initialized;

ocl_device* ocl_device_get(int32_t device) {
  if (device < 0 || device >= g_ndev) {
    ocl_error(RAL_ERROR_INVALID_ARGUMENT, "opencl device %d does not exist (%d devices)", device, g_ndev);
    return NULL;
  }
  return &g_dev[device];
}

static void device_str(cl_device_id id, cl_device_info what, char* out, size_t cap) {
  out[0] = 0;
  if (CL.clGetDeviceInfo(id, what, cap, out, NULL) != CL_SUCCESS) out[0] = 0;
  out[cap - 1] = 0;
}

/* Fill the descriptor fields we read once; returns 0 if the device is unusable. */
static int probe_device(ocl_device* d) {
  char ext[8192];
  device_str(d->id, CL_DEVICE_NAME, d->name, sizeof d->name);
  device_str(d->id, CL_DEVICE_VENDOR, d->vendor, sizeof d->vendor);
  device_str(d->id, CL_DRIVER_VERSION, d->driver, sizeof d->driver);
  device_str(d->id, CL_DEVICE_EXTENSIONS, ext, sizeof ext);
  d->fp64 = strstr(ext, "cl_khr_fp64") != NULL;
  cl_device_type type = 0;
  CL.clGetDeviceInfo(d->id, CL_DEVICE_TYPE, sizeof type, &type, NULL);
  snprintf(d->type, sizeof d->type, "%s",
           type & CL_DEVICE_TYPE_GPU ? "gpu" : type & CL_DEVICE_TYPE_CPU ? "cpu" : "accelerator");
  /* A CPU runtime (PoCL) runs a work-group as a loop on one core: its kernels get few
   * work-groups of long sequential runs instead of one element per work-item (ocl_cpu_*). */
  d->cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  CL.clGetDeviceInfo(d->id, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL);
  CL.clGetDeviceInfo(d->id, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->global_mem, &d->global_mem, NULL);
  CL.clGetDeviceInfo(d->id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d->max_wg, &d->max_wg, NULL);
  CL.clGetDeviceInfo(d->id, CL_DEVICE_ADDRESS_BITS, sizeof d->addr_bits, &d->addr_bits, NULL);
  /* The GEMM tile choice (blas.c) reads the SIMD width the runtime prefers for float. */
  CL.clGetDeviceInfo(d->id, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, sizeof d->vec_f32, &d->vec_f32, NULL);
  cl_bool compiler = CL_FALSE;
  CL.clGetDeviceInfo(d->id, CL_DEVICE_COMPILER_AVAILABLE, sizeof compiler, &compiler, NULL);
  cl_int err;
  d->ctx = compiler ? CL.clCreateContext(NULL, 1, &d->id, NULL, NULL, &err) : NULL;
  if (!d->ctx) return 0;
  pthread_mutex_init(&d->lock, NULL);
  d->host_mem = ocl_inline_probe(d);
  return 1;
}

static void add_platform_devices(cl_platform_id platform) {
  cl_device_id ids[OCL_MAX_DEVICES];
  cl_uint n = 0;
  if (CL.clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, ids, &n) != CL_SUCCESS) return;
  char pname[128] = "";
  CL.clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof pname, pname, NULL);
  pname[sizeof pname - 1] = 0;
  for (cl_uint i = 0; i < n && g_ndev < OCL_MAX_DEVICES; i++) {
    ocl_device* d = &g_dev[g_ndev];
    memset(d, 0, sizeof *d);
    d->platform = platform;
    d->id = ids[i];
    snprintf(d->platform_name, sizeof d->platform_name, "%s", pname);
    if (probe_device(d)) g_ndev++;
  }
}

static void release_devices(void) {
  for (int i = 0; i < g_ndev; i++) {
    ocl_programs_release(&g_dev[i]);
    if (g_dev[i].ctx) CL.clReleaseContext(g_dev[i].ctx);
    pthread_mutex_destroy(&g_dev[i].lock);
  }
  g_ndev = 0;
}

static ral_status no_platform(const char* what) {
  const char* vendors = getenv("OCL_ICD_VENDORS");
  ral_status st = ocl_error(RAL_ERROR_MISSING_DEPS, "no OpenCL platform/ICD found (OCL_ICD_VENDORS=%s): %s",
                            vendors ? vendors : "unset, /etc/OpenCL/vendors", what);
  /* Unload the ICD loader: it reads the vendor list once, so a retry after the ICD is
   * installed (rescan) must start from a fresh loader. */
  release_devices();
  ocl_cl_unload();
  return st;
}

static ral_status ocl_init(void) {
  if (g_initialized) return RAL_OK;
  ral_status st = ocl_cl_load();
  if (st != RAL_OK) return st;
  cl_platform_id platforms[MAX_PLATFORMS];
  cl_uint np = 0;
  cl_int err = CL.clGetPlatformIDs(MAX_PLATFORMS, platforms, &np);
  if (err != CL_SUCCESS || np == 0)
    return no_platform(err == CL_SUCCESS ? "0 platforms" : ocl_cl_error_name(err));
  for (cl_uint p = 0; p < np && p < MAX_PLATFORMS; p++) add_platform_devices(platforms[p]);
  if (g_ndev == 0) return no_platform("platforms exist but none has a usable device with a compiler");
  g_initialized = 1;
  return RAL_OK;
}

static void ocl_shutdown(void) {
  release_devices();
  ocl_cl_unload();
  g_initialized = 0;
}

static ral_status ocl_device_count(int32_t* count) {
  *count = g_ndev;
  return RAL_OK;
}

static ral_status ocl_device_info(int32_t device, ral_device_info* info) {
  ocl_device* d = ocl_device_get(device);
  if (!d) return RAL_ERROR_INVALID_ARGUMENT;
  ral_device_info mine;
  memset(&mine, 0, sizeof mine);
  mine.struct_size = sizeof mine;
  /* float64 arithmetic needs cl_khr_fp64, so without it float64 is not advertised. The
   * 16-bit float types are not gated on cl_khr_fp16: every kernel loads and stores them
   * through vload_half/vstore_half (core OpenCL 1.2) or ral_half.h's bit conversions and
   * computes in float, as the host plugin and PyTorch's CPU kernels do. */
  mine.dtype_mask = (1u << RAL_DTYPE_BOOL) | (1u << RAL_DTYPE_UINT8) | (1u << RAL_DTYPE_INT8) |
                    (1u << RAL_DTYPE_INT16) | (1u << RAL_DTYPE_INT32) | (1u << RAL_DTYPE_INT64) |
                    (1u << RAL_DTYPE_FLOAT16) | (1u << RAL_DTYPE_BFLOAT16) | (1u << RAL_DTYPE_FLOAT32);
  if (d->fp64) mine.dtype_mask |= 1u << RAL_DTYPE_FLOAT64;
  mine.flags = RAL_DEVICE_FP16 | RAL_DEVICE_BF16 | (strcmp(d->type, "gpu") == 0 ? RAL_DEVICE_HAS_DMA : 0);
  mine.max_rank = OCL_MAXR;
  mine.total_memory = d->global_mem;
  mine.max_alloc_size = d->max_alloc;
  snprintf(mine.name, sizeof mine.name, "%s", d->name);
  snprintf(mine.vendor, sizeof mine.vendor, "%s", d->vendor);
  snprintf(mine.type, sizeof mine.type, "%s", d->type);
  snprintf(mine.driver_version, sizeof mine.driver_version, "%s", d->driver);
  /* Write only what the caller's struct has room for: it may be an older runtime. */
  size_t n = info->struct_size < sizeof mine ? info->struct_size : sizeof mine;
  memcpy(info, &mine, n);
  info->struct_size = (uint32_t)n;
  return RAL_OK;
}

#define OCL_KERNEL_ROW(name) {#name, name},
static const struct {
  const char* symbol;
  ral_kernel_fn fn;
} k_kernels[] = {OCL_KERNELS(OCL_KERNEL_ROW)};
#undef OCL_KERNEL_ROW

static ral_status ocl_get_kernel(const char* symbol, ral_kernel_fn* kernel) {
  for (size_t i = 0; i < sizeof k_kernels / sizeof k_kernels[0]; i++) {
    if (strcmp(symbol, k_kernels[i].symbol) == 0) {
      *kernel = k_kernels[i].fn;
      return RAL_OK;
    }
  }
  *kernel = NULL;
  return ocl_error(RAL_ERROR_UNSUPPORTED, "no kernel named '%s'", symbol);
}

static ral_status ocl_launch(ral_kernel_fn kernel, const ral_kernel_call* call) {
  if (!ocl_device_get(call->device)) return RAL_ERROR_INVALID_ARGUMENT;
  if (!call->stream) return ocl_fail(call, RAL_ERROR_INVALID_ARGUMENT, "no stream");
  ral_status st = ocl_check_rank(call);
  /* Every kernel only enqueues; the call struct is not needed after it returns. */
  return st != RAL_OK ? st : kernel(call);
}

static const ral_plugin_api k_api = {
    .struct_size = sizeof(ral_plugin_api),
    .abi_major = RAL_ABI_MAJOR,
    .abi_minor = RAL_ABI_MINOR,
    .plugin_name = PLUGIN_NAME,
    .plugin_version = PLUGIN_VERSION,
    .init = ocl_init,
    .shutdown = ocl_shutdown,
    .device_count = ocl_device_count,
    .device_info = ocl_device_info,
    .malloc = ocl_malloc,
    .free = ocl_free,
    .memcpy_h2d = ocl_memcpy_h2d,
    .memcpy_d2h = ocl_memcpy_d2h,
    .memcpy_d2d = ocl_memcpy_d2d,
    .stream_create = ocl_stream_create,
    .stream_destroy = ocl_stream_destroy,
    .stream_synchronize = ocl_stream_synchronize,
    .stream_query = ocl_stream_query,
    .event_create = ocl_event_create,
    .event_destroy = ocl_event_destroy,
    .event_record = ocl_event_record,
    .event_synchronize = ocl_event_synchronize,
    .event_query = ocl_event_query,
    .stream_wait_event = ocl_stream_wait_event,
    .event_elapsed_ms = ocl_event_elapsed_ms,
    .get_kernel = ocl_get_kernel,
    .launch = ocl_launch,
    .last_error = ocl_last_error,
    .memset = ocl_memset,
    .compile = ocl_compile,
    .module_get_kernel = ocl_module_get_kernel,
    .module_destroy = ocl_module_destroy,
};

_Atomic uint64_t ocl_counters[OCL_N_COUNTERS];

/* Outside the plugin ABI, for tests and tools (ctypes on this library): how many OpenCL
 * calls of each kind the plugin made since load. Copies min(cap, count) values into out
 * and returns the count; ral_opencl_counter_name(i) names counter i (NULL past the end). */
RAL_PLUGIN_EXPORT int ral_opencl_counters(uint64_t* out, int cap) {
  for (int i = 0; i < OCL_N_COUNTERS && i < cap; i++) out[i] = atomic_load(&ocl_counters[i]);
  return OCL_N_COUNTERS;
}

#define OCL_COUNTER_NAME(name) #name,
static const char* const k_counter_names[] = {OCL_COUNTERS(OCL_COUNTER_NAME)};
#undef OCL_COUNTER_NAME

RAL_PLUGIN_EXPORT const char* ral_opencl_counter_name(int i) {
  return i >= 0 && i < OCL_N_COUNTERS ? k_counter_names[i] : NULL;
}

/* The entry point: hand the runtime our table (it checks the versions). */
RAL_PLUGIN_EXPORT const ral_plugin_api* ral_plugin_entry_v1(uint16_t runtime_abi_major,
                                                            uint16_t runtime_abi_minor) {
  (void)runtime_abi_major, (void)runtime_abi_minor;
  return &k_api;
}
