/* planted.c -- the template with general (strided, offset, broadcast) float32 add, addmm
 * and a float32/int64 copy_, each with one bug chosen at build time, for certify's
 * planted-bug tests (tests/test_certify.py). Without a BUG_* macro every kernel is right.
 *   BUG_ROUND_CAST      copy_ float -> int64 rounds (1.7 -> 2) instead of truncating
 *   BUG_IGNORE_STRIDES  every tensor is read and written as if contiguous
 *   BUG_IGNORE_OFFSET   byte_offset is ignored (a view that starts mid-allocation)
 *   BUG_IGNORE_ALPHA    add's alpha and addmm's alpha/beta are taken as 1
 *   BUG_RANK1_BIAS      addmm indexes a rank-1 bias by row instead of by column */
#include "common.h" /* first: template.c sets _POSIX_C_SOURCE */

#include <math.h>

static int64_t elem(const ral_tensor* t, int64_t i) {
#ifdef BUG_IGNORE_STRIDES
  (void)t;
  return i;
#else
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (i % t->sizes[d]) * t->strides[d];
    i /= t->sizes[d];
  }
  return off;
#endif
}

static char* base(const ral_tensor* t) {
#ifdef BUG_IGNORE_OFFSET
  return (char*)t->data;
#else
  return (char*)t->data + t->byte_offset;
#endif
}

static float* at_f32(const ral_tensor* t, int64_t i) { return (float*)base(t) + elem(t, i); }

static double scalar(const ral_kernel_call* c, int i) {
#ifdef BUG_IGNORE_ALPHA
  (void)c, (void)i;
  return 1.0;
#else
  return c->n_scalars > i ? ral_sdk_scalar_f64(&c->scalars[i], 1.0) : 1.0;
#endif
}

/* aten::add.Tensor(self, other, *, alpha): tensors out, self, other; scalars alpha. */
static ral_status planted_add_f32(const ral_kernel_call* c) {
  const ral_tensor *out = &c->tensors[0], *a = &c->tensors[1], *b = &c->tensors[2];
  float alpha = (float)scalar(c, 0);
  for (int64_t i = 0, n = ral_sdk_numel(out); i < n; i++) *at_f32(out, i) = *at_f32(a, i) + alpha * *at_f32(b, i);
  return RAL_OK;
}

/* aten::copy_(self, src, non_blocking): tensors self (out), self, src; float32/int64. */
static ral_status planted_copy(const ral_kernel_call* c) {
  const ral_tensor *dst = &c->tensors[0], *src = &c->tensors[2];
  for (int64_t i = 0, n = ral_sdk_numel(dst); i < n; i++) {
    char* s = base(src);
    if (src->dtype == RAL_DTYPE_INT64 && dst->dtype == RAL_DTYPE_INT64) {
      ((int64_t*)base(dst))[elem(dst, i)] = ((int64_t*)s)[elem(src, i)];
    } else if (dst->dtype == RAL_DTYPE_INT64) {
      float v = ((float*)s)[elem(src, i)];
#ifdef BUG_ROUND_CAST
      ((int64_t*)base(dst))[elem(dst, i)] = (int64_t)llrintf(v);
#else
      ((int64_t*)base(dst))[elem(dst, i)] = (int64_t)v;
#endif
    } else if (src->dtype == RAL_DTYPE_INT64) {
      ((float*)base(dst))[elem(dst, i)] = (float)((int64_t*)s)[elem(src, i)];
    } else {
      ((float*)base(dst))[elem(dst, i)] = ((float*)s)[elem(src, i)];
    }
  }
  return RAL_OK;
}

/* aten::addmm(self, mat1, mat2, *, beta, alpha): tensors out, self, mat1, mat2; self is
 * the bias of rank 0, 1 (one value per column) or 2. */
static ral_status planted_addmm_f32(const ral_kernel_call* c) {
  const ral_tensor *out = &c->tensors[0], *bias = &c->tensors[1], *m1 = &c->tensors[2], *m2 = &c->tensors[3];
  int64_t m = m1->sizes[0], k = m1->sizes[1], n = m2->sizes[1];
  float beta = (float)scalar(c, 0), alpha = (float)scalar(c, 1);
  const float *A = (const float*)base(m1), *B = (const float*)base(m2), *bb = (const float*)base(bias);
  float* C = (float*)base(out);
  for (int64_t i = 0; i < m; i++) {
    for (int64_t j = 0; j < n; j++) {
      float acc = 0;
      for (int64_t p = 0; p < k; p++)
        acc += A[i * m1->strides[0] + p * m1->strides[1]] * B[p * m2->strides[0] + j * m2->strides[1]];
      float b = 0;
      if (bias->ndim == 0) b = bb[0];
#ifdef BUG_RANK1_BIAS
      else if (bias->ndim == 1) b = bb[(i % bias->sizes[0]) * bias->strides[0]];
#else
      else if (bias->ndim == 1) b = bb[j * bias->strides[0]];
#endif
      else b = bb[i * bias->strides[0] + j * bias->strides[1]];
      C[i * out->strides[0] + j * out->strides[1]] = beta * b + alpha * acc;
    }
  }
  return RAL_OK;
}

static ral_status planted_get_kernel(const char* symbol, ral_kernel_fn* kernel) {
  if (strcmp(symbol, "planted_add_f32") == 0) *kernel = planted_add_f32;
  else if (strcmp(symbol, "planted_copy") == 0) *kernel = planted_copy;
  else if (strcmp(symbol, "planted_addmm_f32") == 0) *kernel = planted_addmm_f32;
  else return tpl_get_kernel(symbol, kernel);
  return RAL_OK;
}

static void customize(ral_plugin_api* api) { api->get_kernel = planted_get_kernel; }
