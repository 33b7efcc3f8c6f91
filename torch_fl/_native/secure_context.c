/* secure_context.c -- every pointer, offset and extent handed to a plugin is checked
 * against the device's live-allocation table first. The table (dev->live) maps the
 * exact pointer the plugin's malloc returned to its rt_block, which carries the
 * requested size: an access past the requested size is refused even when it would
 * still fit in the rounded-up block. Callers hold dev->lock. */
#include <inttypes.h>

#include "rt_internal.h"

uint64_t rt_dtype_size(int32_t dtype) {
  static const uint8_t sizes[RAL_DTYPE_COUNT] = {1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 8, 16};
  return dtype >= 0 && dtype < RAL_DTYPE_COUNT ? sizes[dtype] : 0;
}

int rt_sc_check_locked(rt_device* dev, uint64_t ptr, uint64_t offset, uint64_t nbytes) {
  const rt_block* b = u64map_get(&dev->live, ptr);
  if (!b)
    return rt_fail(RAL_ERROR_INVALID_POINTER, "buffer 0x%" PRIx64 " not mapped to device %d",
                   ptr, dev->global);
  /* An empty view touches no memory, so only its base must be live (PyTorch lets a
   * zero-element view carry any storage offset, e.g. the tail slice of a padded tensor). */
  if (nbytes == 0) return RAL_OK;
  if (offset > b->requested || nbytes > b->requested - offset)
    return rt_fail(RAL_ERROR_INVALID_POINTER,
                   "offset %" PRIu64 " + %" PRIu64 " bytes exceeds buffer 0x%" PRIx64
                   " of %" PRIu64 " bytes on device %d",
                   offset, nbytes, ptr, b->requested, dev->global);
  return RAL_OK;
}

/* Bytes spanned by a strided view: 0 if any size is 0, else
 * itemsize * (1 + sum((size_i - 1) * stride_i)). -1 on a malformed descriptor. */
static int extent_of(const ral_tensor* t, uint64_t* out) {
  uint64_t span = 0;
  for (int k = 0; k < t->ndim; k++) {
    int64_t size = t->sizes[k], stride = t->strides[k];
    if (size < 0 || stride < 0) return -1;
    if (size == 0) {
      *out = 0;
      return 0;
    }
    uint64_t step;
    if (__builtin_mul_overflow((uint64_t)(size - 1), (uint64_t)stride, &step) ||
        __builtin_add_overflow(span, step, &span))
      return -1;
  }
  if (__builtin_add_overflow(span, 1, &span) ||
      __builtin_mul_overflow(span, rt_dtype_size(t->dtype), out))
    return -1;
  return 0;
}

int rt_sc_check_tensor_locked(rt_device* dev, const ral_tensor* t, int arg, const char* op_name) {
  if (t->dtype == RAL_DTYPE_COUNT && !t->data && t->ndim == 0) return RAL_OK; /* absent */
  uint64_t extent = 0;
  int st;
  if (t->dtype < 0 || t->dtype >= RAL_DTYPE_COUNT)
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "invalid dtype code %d", t->dtype);
  else if (t->ndim < 0 || t->ndim > RAL_MAX_RANK)
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "invalid ndim %d (max %d)", t->ndim, RAL_MAX_RANK);
  else if (extent_of(t, &extent) != 0)
    st = rt_fail(RAL_ERROR_INVALID_ARGUMENT, "negative or overflowing sizes/strides");
  else
    st = rt_sc_check_locked(dev, (uint64_t)(uintptr_t)t->data, t->byte_offset, extent);
  if (st != RAL_OK) rt_error_append(" (tensor %d of %s)", arg, op_name ? op_name : "kernel");
  return st;
}

/* Public: validate a device range without touching it. */
int rt_check_pointer(int32_t device, uint64_t ptr, uint64_t offset, uint64_t nbytes) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  pthread_mutex_lock(&dev->lock);
  st = rt_sc_check_locked(dev, ptr, offset, nbytes);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

/* Public: host address of a validated range on a host-mappable device. */
int rt_host_address(int32_t device, uint64_t ptr, uint64_t offset, uint64_t nbytes,
                    uint64_t* host_addr) {
  rt_device* dev;
  int st = rt_dev_get(device, &dev);
  if (st != RAL_OK) return st;
  if (!(dev->info.flags & RAL_DEVICE_HOST_MAPPABLE))
    return rt_fail(RAL_ERROR_UNSUPPORTED, "device %d ([%s] %s) is not host-mappable", device,
                   dev->plugin->rec.name, dev->info.name);
  st = rt_check_pointer(device, ptr, offset, nbytes);
  if (st == RAL_OK) *host_addr = ptr + offset;
  return st;
}
