/*
 * template.c -- the smallest complete torch_fl plugin. Copy this directory to start
 * your own (see README.md). It drives RAL_TEMPLATE_DEVICE_COUNT (default 1) "devices"
 * whose memory is ordinary aligned host memory, runs every stream synchronously and
 * exports two float32 kernels. It includes ral_plugin.h and the optional header-only
 * ral_plugin_sdk.h, and nothing else of torch_fl.
 *
 * Plugin rules kept here: never abort, never print, report failures with a status and
 * a thread-local message that names the op.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RAL_SDK_IMPLEMENT_ERROR
#include "ral_plugin_sdk.h"

#define PLUGIN_NAME "template"
#define PLUGIN_VERSION "1.0.0"
#define MAX_DEVICES 8
#define ALIGNMENT 64

static int32_t g_device_count = 1;

#define fail ral_sdk_fail

static ral_status check_device(int32_t device) {
  if (device < 0 || device >= g_device_count)
    return fail(RAL_ERROR_INVALID_ARGUMENT, "device %d does not exist", device);
  return RAL_OK;
}

/* ---- lifecycle and devices ---- */

static ral_status tpl_init(void) {
  /* A real plugin loads its vendor runtime here and returns RAL_ERROR_MISSING_DEPS
   * (with a message naming the library) when it is absent. */
  const char* env = getenv("RAL_TEMPLATE_DEVICE_COUNT");
  long n = env ? strtol(env, NULL, 10) : 1;
  if (n < 0 || n > MAX_DEVICES)
    return fail(RAL_ERROR_INVALID_ARGUMENT, "RAL_TEMPLATE_DEVICE_COUNT=%s is not in 0..%d", env,
                MAX_DEVICES);
  g_device_count = (int32_t)n;
  return RAL_OK;
}

static void tpl_shutdown(void) {}

static ral_status tpl_device_count(int32_t* count) {
  *count = g_device_count;
  return RAL_OK;
}

static ral_status tpl_device_info(int32_t device, ral_device_info* info) {
  if (check_device(device) != RAL_OK) return RAL_ERROR_INVALID_ARGUMENT;
  ral_device_info mine;
  memset(&mine, 0, sizeof mine);
  mine.struct_size = sizeof mine;
  mine.dtype_mask = (1u << RAL_DTYPE_COUNT) - 1;
  /* Lets tests play a device without half precision (the router must refuse fp16 entries). */
  if (getenv("RAL_TEMPLATE_NO_FP16")) mine.dtype_mask &= ~(1u << RAL_DTYPE_FLOAT16);
  mine.flags = RAL_DEVICE_HOST_MAPPABLE;
  mine.max_rank = RAL_MAX_RANK;
  snprintf(mine.name, sizeof mine.name, "Template device %d", device);
  snprintf(mine.vendor, sizeof mine.vendor, "torch_fl");
  snprintf(mine.type, sizeof mine.type, "cpu");
  snprintf(mine.driver_version, sizeof mine.driver_version, PLUGIN_VERSION);
  /* Write only what the caller's struct has room for: it may be an older runtime. */
  ral_sdk_fill_struct(info, &mine, sizeof mine);
  return RAL_OK;
}

/* ---- memory ---- */

static ral_status tpl_malloc(int32_t device, uint64_t nbytes, void** ptr) {
  if (check_device(device) != RAL_OK) return RAL_ERROR_INVALID_ARGUMENT;
  uint64_t rounded = (nbytes + ALIGNMENT - 1) & ~(uint64_t)(ALIGNMENT - 1);
  *ptr = rounded >= nbytes ? aligned_alloc(ALIGNMENT, rounded) : NULL;
  if (!*ptr) return fail(RAL_ERROR_OUT_OF_MEMORY, "aligned_alloc(%llu) failed", (unsigned long long)nbytes);
  return RAL_OK;
}

static ral_status tpl_free(int32_t device, void* ptr) {
  (void)device;
  free(ptr);
  return RAL_OK;
}

static ral_status tpl_memcpy_h2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                                 uint64_t nbytes, ral_stream stream) {
  (void)device, (void)stream;
  memcpy((char*)dst + dst_offset, src, nbytes);
  return RAL_OK;
}

static ral_status tpl_memcpy_d2h(int32_t device, void* dst, const void* src, uint64_t src_offset,
                                 uint64_t nbytes, ral_stream stream) {
  (void)device, (void)stream;
  memcpy(dst, (const char*)src + src_offset, nbytes);
  return RAL_OK;
}

static ral_status tpl_memcpy_d2d(int32_t device, void* dst, uint64_t dst_offset, const void* src,
                                 uint64_t src_offset, uint64_t nbytes, ral_stream stream) {
  (void)device, (void)stream;
  memmove((char*)dst + dst_offset, (const char*)src + src_offset, nbytes);
  return RAL_OK;
}

static ral_status tpl_memset(int32_t device, void* dst, uint64_t offset, int32_t value,
                             uint64_t nbytes, ral_stream stream) {
  (void)device, (void)stream;
  memset((char*)dst + offset, value, nbytes);
  return RAL_OK;
}

/* ---- streams and events: work runs inline, so a stream is always idle ---- */

static char g_stream_token;

static ral_status tpl_stream_create(int32_t device, ral_stream* stream) {
  *stream = (ral_stream)&g_stream_token;
  return check_device(device);
}

static ral_status tpl_stream_noop(int32_t device, ral_stream stream) {
  (void)stream;
  return check_device(device);
}

typedef struct ral_event_s {
  struct timespec when;
} tpl_event;

static ral_status tpl_event_create(int32_t device, ral_event* event) {
  if (check_device(device) != RAL_OK) return RAL_ERROR_INVALID_ARGUMENT;
  *event = calloc(1, sizeof(tpl_event));
  return *event ? RAL_OK : fail(RAL_ERROR_OUT_OF_MEMORY, "no memory for an event");
}

static ral_status tpl_event_destroy(int32_t device, ral_event event) {
  (void)device;
  free(event);
  return RAL_OK;
}

static ral_status tpl_event_record(int32_t device, ral_event event, ral_stream stream) {
  (void)device, (void)stream;
  clock_gettime(CLOCK_MONOTONIC, &event->when);
  return RAL_OK;
}

static ral_status tpl_event_noop(int32_t device, ral_event event) {
  (void)device, (void)event;
  return RAL_OK;
}

static ral_status tpl_stream_wait_event(int32_t device, ral_stream stream, ral_event event) {
  (void)device, (void)stream, (void)event;
  return RAL_OK;
}

static ral_status tpl_event_elapsed_ms(int32_t device, ral_event start, ral_event end, float* ms) {
  (void)device;
  *ms = (float)((double)(end->when.tv_sec - start->when.tv_sec) * 1e3 +
                (double)(end->when.tv_nsec - start->when.tv_nsec) / 1e6);
  return RAL_OK;
}

/* ---- kernels ---- */

static float* f32(const ral_tensor* t) { return (float*)ral_sdk_data(t); }

/* One float32 output and two same-shaped contiguous float32 inputs. */
static ral_status check_binary_f32(const ral_kernel_call* call, const char* kernel) {
  if (call->n_outputs != 1 || call->n_inputs != 2)
    return fail(RAL_ERROR_INVALID_ARGUMENT, "%s (%s): expected 1 output and 2 inputs, got %d and %d",
                call->op_name, kernel, call->n_outputs, call->n_inputs);
  int64_t n = ral_sdk_numel(&call->tensors[0]);
  for (int i = 0; i < 3; i++) {
    const ral_tensor* t = &call->tensors[i];
    if (t->dtype != RAL_DTYPE_FLOAT32 || !ral_sdk_is_contiguous(t) || ral_sdk_numel(t) != n)
      return fail(RAL_ERROR_UNSUPPORTED,
                  "%s (%s): tensor %d must be a contiguous float32 tensor of %lld elements",
                  call->op_name, kernel, i, (long long)n);
  }
  return RAL_OK;
}

/* aten::add.Tensor: out = self + alpha * other (alpha is scalars[0]). */
static ral_status template_add_f32(const ral_kernel_call* call) {
  ral_status st = check_binary_f32(call, "template_add_f32");
  if (st != RAL_OK) return st;
  float alpha = (float)(call->n_scalars > 0 ? ral_sdk_scalar_f64(&call->scalars[0], 1.0) : 1.0);
  float *out = f32(&call->tensors[0]), *a = f32(&call->tensors[1]), *b = f32(&call->tensors[2]);
  for (int64_t i = 0, n = ral_sdk_numel(&call->tensors[0]); i < n; i++) out[i] = a[i] + alpha * b[i];
  return RAL_OK;
}

/* aten::mul.Tensor: out = self * other. */
static ral_status template_mul_f32(const ral_kernel_call* call) {
  ral_status st = check_binary_f32(call, "template_mul_f32");
  if (st != RAL_OK) return st;
  float *out = f32(&call->tensors[0]), *a = f32(&call->tensors[1]), *b = f32(&call->tensors[2]);
  for (int64_t i = 0, n = ral_sdk_numel(&call->tensors[0]); i < n; i++) out[i] = a[i] * b[i];
  return RAL_OK;
}

static const struct {
  const char* symbol;
  ral_kernel_fn fn;
} k_kernels[] = {
    {"template_add_f32", template_add_f32},
    {"template_mul_f32", template_mul_f32},
};

static ral_status tpl_get_kernel(const char* symbol, ral_kernel_fn* kernel) {
  for (size_t i = 0; i < sizeof k_kernels / sizeof k_kernels[0]; i++) {
    if (strcmp(symbol, k_kernels[i].symbol) == 0) {
      *kernel = k_kernels[i].fn;
      return RAL_OK;
    }
  }
  *kernel = NULL;
  return fail(RAL_ERROR_UNSUPPORTED, "no kernel named '%s'", symbol);
}

static ral_status tpl_launch(ral_kernel_fn kernel, const ral_kernel_call* call) {
  /* Synchronous: an asynchronous plugin would queue (a copy of) the call instead. */
  return kernel(call);
}

static const ral_plugin_api k_api = {
    .struct_size = sizeof(ral_plugin_api),
    .abi_major = RAL_ABI_MAJOR,
    .abi_minor = RAL_ABI_MINOR,
    .plugin_name = PLUGIN_NAME,
    .plugin_version = PLUGIN_VERSION,
    .init = tpl_init,
    .shutdown = tpl_shutdown,
    .device_count = tpl_device_count,
    .device_info = tpl_device_info,
    .malloc = tpl_malloc,
    .free = tpl_free,
    .memcpy_h2d = tpl_memcpy_h2d,
    .memcpy_d2h = tpl_memcpy_d2h,
    .memcpy_d2d = tpl_memcpy_d2d,
    .stream_create = tpl_stream_create,
    .stream_destroy = tpl_stream_noop,
    .stream_synchronize = tpl_stream_noop,
    .stream_query = tpl_stream_noop,
    .event_create = tpl_event_create,
    .event_destroy = tpl_event_destroy,
    .event_record = tpl_event_record,
    .event_synchronize = tpl_event_noop,
    .event_query = tpl_event_noop,
    .stream_wait_event = tpl_stream_wait_event,
    .event_elapsed_ms = tpl_event_elapsed_ms,
    .get_kernel = tpl_get_kernel,
    .launch = tpl_launch,
    .last_error = ral_sdk_last_error,
    .memset = tpl_memset,
    /* compile / module_get_kernel / module_destroy: no run-time compiler here. */
};

/* The one exported symbol: hand the runtime our table (it checks the versions). */
RAL_PLUGIN_EXPORT const ral_plugin_api* ral_plugin_entry_v1(uint16_t runtime_abi_major,
                                                            uint16_t runtime_abi_minor) {
  (void)runtime_abi_major, (void)runtime_abi_minor;
  return &k_api;
}
