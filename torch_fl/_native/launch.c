/* launch.c -- rt_launch: unpack the compact call Python builds, validate every tensor
 * through the SecureContext and hand the call to the plugin. Sizes, strides and int
 * lists point straight into `packed`; descriptors live on the stack for typical calls. */
#include <stdlib.h>

#include "rt_internal.h"

#define STACK_TENSORS 64
#define STACK_SCALARS 64
#define MAX_ARGS (1 << 20)

typedef struct {
  const int64_t* p;
  int32_t n, pos;
} reader;

static int take(reader* r, int32_t count, const int64_t** out) {
  if (count < 0 || count > r->n - r->pos) return -1;
  *out = r->p + r->pos;
  r->pos += count;
  return 0;
}

static int unpack_tensor(reader* r, ral_tensor* t) {
  const int64_t* h;
  if (take(r, 4, &h)) return -1;
  t->data = (void*)(uintptr_t)h[0];
  t->byte_offset = (uint64_t)h[1];
  t->dtype = (int32_t)h[2];
  t->ndim = (int32_t)h[3];
  if (h[3] < 0 || h[3] > RAL_MAX_RANK) return -1;
  return take(r, t->ndim, &t->sizes) || take(r, t->ndim, &t->strides);
}

static int unpack_scalar(reader* r, ral_scalar* s, const double* floats, const char* const* strings) {
  const int64_t* v;
  if (take(r, 1, &v)) return -1;
  s->tag = (int32_t)v[0];
  s->count = 0;
  s->v.i = 0;
  switch (s->tag) {
    case RAL_SCALAR_NONE:
      return 0;
    case RAL_SCALAR_INT:
    case RAL_SCALAR_BOOL:
    case RAL_SCALAR_DTYPE:
      if (take(r, 1, &v)) return -1;
      s->v.i = v[0];
      return 0;
    case RAL_SCALAR_FLOAT:
      if (take(r, 1, &v) || !floats || v[0] < 0) return -1;
      s->v.f = floats[v[0]];
      return 0;
    case RAL_SCALAR_INT_LIST:
      if (take(r, 1, &v) || v[0] < 0 || v[0] > MAX_ARGS) return -1;
      s->count = (int32_t)v[0];
      return take(r, s->count, &s->v.list);
    case RAL_SCALAR_STRING:
      if (take(r, 1, &v) || !strings || v[0] < 0) return -1;
      s->v.s = strings[v[0]];
      return 0;
    default:
      return -1;
  }
}

static int validate_and_launch(rt_device* dev, int32_t stream, const rt_kernel* k,
                               ral_kernel_call* call, const char* op_name) {
  int n = call->n_outputs + call->n_inputs, st = RAL_OK;
  pthread_mutex_lock(&dev->lock);
  for (int i = 0; i < n && st == RAL_OK; i++)
    st = rt_sc_check_tensor_locked(dev, &call->tensors[i], i, op_name);
  if (st == RAL_OK) st = rt_stream_acquire_locked(dev, stream, &call->stream);
  pthread_mutex_unlock(&dev->lock);
  if (st != RAL_OK) return st;
  atomic_fetch_add_explicit(&dev->launches, 1, memory_order_relaxed);
  st = dev->plugin->api.launch(k->fn, call);
  if (st != RAL_OK) st = rt_plugin_fail(dev->plugin, st, "%s (kernel %s)", op_name, k->symbol);
  /* Checked mode: wait for the kernel, then look at the bytes past each of its tensors. */
  if (st == RAL_OK && rt_pool_guarded(dev) && (st = rt_wait_stream(dev, stream, call->stream)) == RAL_OK) {
    pthread_mutex_lock(&dev->lock);
    for (int i = 0; i < n && st == RAL_OK; i++)
      st = rt_pool_check_guard_locked(dev, &call->tensors[i], i, op_name, k->symbol);
    pthread_mutex_unlock(&dev->lock);
  }
  rt_stream_release(dev, stream);
  return st;
}

/* Public: validate and launch one kernel call (format in ral_runtime.h). */
int rt_launch(int32_t device, int32_t stream, int64_t kernel, const int64_t* packed,
              int32_t n_packed, const double* floats, const char* const* strings,
              const char* op_name) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  if (!op_name) op_name = "(unnamed op)";
  const rt_kernel* k = rt_kernel_get(kernel);
  if (!k) return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "%s: kernel handle %lld is not valid", op_name, (long long)kernel);
  if (k->plugin != dev->plugin)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "%s: kernel %s belongs to plugin [%s], not to device %d ([%s])",
                   op_name, k->symbol, k->plugin->rec.name, device, dev->plugin->rec.name);
  reader r = {packed, n_packed, 0};
  const int64_t* head;
  if (!packed || take(&r, 3, &head) || head[0] < 0 || head[1] < 0 || head[2] < 0 ||
      head[0] + head[1] > MAX_ARGS || head[2] > MAX_ARGS)
    return rt_fail(RAL_ERROR_INVALID_ARGUMENT, "%s: malformed packed call header", op_name);
  int32_t n_tensors = (int32_t)(head[0] + head[1]), n_scalars = (int32_t)head[2];

  ral_tensor tensor_stack[STACK_TENSORS];
  ral_scalar scalar_stack[STACK_SCALARS];
  ral_tensor* tensors = n_tensors <= STACK_TENSORS ? tensor_stack : malloc(sizeof *tensors * n_tensors);
  ral_scalar* scalars = n_scalars <= STACK_SCALARS ? scalar_stack : malloc(sizeof *scalars * n_scalars);
  if (!tensors || !scalars) {
    st = rt_fail(RAL_ERROR_OUT_OF_MEMORY, "%s: no host memory for %d tensor descriptors", op_name, n_tensors);
    goto out;
  }
  int bad = -1;
  for (int32_t i = 0; i < n_tensors && bad < 0; i++)
    if (unpack_tensor(&r, &tensors[i])) bad = i;
  if (bad >= 0) {
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "%s: malformed tensor %d in packed call", op_name, bad);
    goto out;
  }
  for (int32_t i = 0; i < n_scalars && bad < 0; i++)
    if (unpack_scalar(&r, &scalars[i], floats, strings)) bad = i;
  if (bad >= 0 || r.pos != r.n) {
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "%s: malformed scalar %d in packed call (%d of %d values read)",
                 op_name, bad, r.pos, r.n);
    goto out;
  }
  ral_kernel_call call = {
      .struct_size = sizeof call,
      .device = dev->local,
      .n_outputs = (int32_t)head[0],
      .n_inputs = (int32_t)head[1],
      .tensors = tensors,
      .n_scalars = n_scalars,
      .scalars = scalars,
      .op_name = op_name,
  };
  st = validate_and_launch(dev, stream, k, &call, op_name);
out:
  if (tensors != tensor_stack) free(tensors);
  if (scalars != scalar_stack) free(scalars);
  return st;
}
