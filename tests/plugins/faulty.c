/* faulty.c -- kernels that fail. Its streams defer kernels until synchronize(), like a
 * real asynchronous device:
 *   faulty_kernel       queued; fails at the next synchronize (asynchronous error);
 *   faulty_sync_kernel  fails inside launch (synchronous error);
 *   faulty_noop_kernel  queued; keeps the stream busy until synchronize.
 * The template's own kernels still run inline. */
#include "common.h"

struct ral_stream_s {
  int pending;
  int failed;
  char message[256];
};

/* The three bodies differ on purpose: identical functions may be folded into one
 * address, and launch tells them apart by address. */
static ral_status faulty_kernel(const ral_kernel_call* call) {
  return fail(RAL_ERROR_KERNEL_FAILED, "%s (kernel faulty_kernel): injected failure",
              call->op_name);
}
static ral_status faulty_sync_kernel(const ral_kernel_call* call) {
  (void)call;
  return fail(RAL_ERROR_KERNEL_FAILED, "injected failure");
}
static ral_status faulty_noop_kernel(const ral_kernel_call* call) { (void)call; return RAL_OK; }

static ral_status faulty_get_kernel(const char* symbol, ral_kernel_fn* kernel) {
  if (strcmp(symbol, "faulty_kernel") == 0) *kernel = faulty_kernel;
  else if (strcmp(symbol, "faulty_sync_kernel") == 0) *kernel = faulty_sync_kernel;
  else if (strcmp(symbol, "faulty_noop_kernel") == 0) *kernel = faulty_noop_kernel;
  else return tpl_get_kernel(symbol, kernel);
  return RAL_OK;
}

static ral_status faulty_launch(ral_kernel_fn kernel, const ral_kernel_call* call) {
  struct ral_stream_s* s = call->stream;
  if (kernel != faulty_kernel && kernel != faulty_noop_kernel) return kernel(call);
  s->pending++;
  if (kernel == faulty_kernel && !s->failed) {
    s->failed = 1;
    snprintf(s->message, sizeof s->message, "%s (kernel faulty_kernel): injected failure",
             call->op_name);
  }
  return RAL_OK;
}

static ral_status faulty_stream_create(int32_t device, ral_stream* stream) {
  *stream = calloc(1, sizeof(struct ral_stream_s));
  return *stream ? check_device(device) : fail(RAL_ERROR_OUT_OF_MEMORY, "no memory for a stream");
}

static ral_status faulty_stream_destroy(int32_t device, ral_stream stream) {
  (void)device;
  free(stream);
  return RAL_OK;
}

static ral_status faulty_stream_synchronize(int32_t device, ral_stream stream) {
  (void)device;
  stream->pending = 0;
  if (!stream->failed) return RAL_OK;
  stream->failed = 0;
  return fail(RAL_ERROR_KERNEL_FAILED, "%s", stream->message);
}

static ral_status faulty_stream_query(int32_t device, ral_stream stream) {
  (void)device;
  return stream->pending ? RAL_ERROR_NOT_READY : RAL_OK;
}

static void customize(ral_plugin_api* api) {
  api->get_kernel = faulty_get_kernel;
  api->launch = faulty_launch;
  api->stream_create = faulty_stream_create;
  api->stream_destroy = faulty_stream_destroy;
  api->stream_synchronize = faulty_stream_synchronize;
  api->stream_query = faulty_stream_query;
}
