/*
 * half.c -- float16/bfloat16 calls of the float32-only kernels (GEMM, softmax family, layer
 * norm, nll_loss, fused attention): each 16-bit operand is widened into a float32 scratch
 * buffer (exact), the float32 kernel runs, and each 16-bit output is rounded once from its
 * float32 scratch. That is PyTorch's CPU rule for these ops (accumulate in float, round the
 * result once), so the numbers match CPU's to the 16-bit type's rounding.
 */
#include <string.h>

#include "ocl.h"

#define HALF_MAX_TENSORS 16

ral_status ocl_half_via_f32(const ral_kernel_call* c, ral_status (*fn)(const ral_kernel_call*)) {
  int nt = c->n_outputs + c->n_inputs, any = 0;
  for (int i = 0; i < nt; i++) any |= !ocl_absent(&c->tensors[i]) && ocl_is_half(c->tensors[i].dtype);
  if (!any) return fn(c);
  if (nt > HALF_MAX_TENSORS)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "%d tensors: 16-bit float calls take at most %d", nt, HALF_MAX_TENSORS);
  ral_tensor ts[HALF_MAX_TENSORS];
  ocl_view wide[HALF_MAX_TENSORS];
  void* scratch[HALF_MAX_TENSORS] = {0};
  ral_status st = RAL_OK;
  for (int i = 0; i < nt && st == RAL_OK; i++) {
    const ral_tensor* t = &c->tensors[i];
    ts[i] = *t;
    if (ocl_absent(t) || !ocl_is_half(t->dtype)) continue;
    /* Host-unified scratch where the device has it (ocl_malloc), so inline GEMMs apply. */
    st = ocl_malloc(c->device, (uint64_t)ocl_numel(t) * 4u, &scratch[i]);
    if (st != RAL_OK) {
      st = ocl_fail(c, st, "no float32 scratch for 16-bit tensor %d: %s", i, ocl_last_error());
      break;
    }
    ral_tensor base = *t;
    base.data = scratch[i];
    base.byte_offset = 0;
    base.dtype = RAL_DTYPE_FLOAT32;
    ocl_view_contiguous(&wide[i], &base, t->ndim, t->sizes);
    ts[i] = wide[i].t;
    if (i >= c->n_outputs) st = ocl_copy_tensor(c, &ts[i], t); /* widening is exact */
  }
  if (st == RAL_OK) {
    ral_kernel_call wc = *c;
    wc.tensors = ts;
    st = fn(&wc);
  }
  for (int i = 0; i < c->n_outputs && st == RAL_OK; i++)
    if (scratch[i]) st = ocl_copy_tensor(c, &c->tensors[i], &ts[i]); /* the one rounding */
  /* Released now, freed by the runtime after the last queued command that uses them. */
  for (int i = 0; i < nt; i++)
    if (scratch[i]) ocl_free(c->device, scratch[i]);
  return st;
}
