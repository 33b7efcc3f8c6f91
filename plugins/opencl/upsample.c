/*
 * upsample.c -- upsample_nearest2d, _upsample_nearest_exact2d, upsample_bilinear2d and
 * upsample_bicubic2d with their backward (and the 1-d nearest/linear forms, and the 3-d
 * nearest / nearest-exact / trilinear forms over [N, C, D, H, W]) over
 * [N, C, H, W] float32, float16 or bfloat16 of any strides (so outputs take CPU's layout, channels_last included):
 * kernels/upsample.cl, or on a CPU runtime with host-unified buffers the host loops
 * (inline_pool.c). The scales and steps come from plugins/common/resample.c, which the host
 * plugin uses too, so both plugins pick the same source indices as CPU.
 */
#include <string.h>

#include "ocl.h"
#include "resample.h"

/* ral_up_scale of the optional scale at scalar `at` (None: from the sizes). */
static float scale_of(const ral_kernel_call* c, int at, int64_t in, int64_t out) {
  double f = 0;
  int64_t v;
  int given = ocl_scalar_num(c, at, &f, &v); /* before f is read: argument order is unspecified */
  return ral_up_scale(given, f, in, out);
}

/* lo: the low-resolution operand (input, or grad_input), hi the other; scales at scalar
 * `at`, align_corners at `align_at` (-1: nearest, -2: nearest-exact). */
static ral_status upsample(const ral_kernel_call* c, const ral_tensor* lo, const ral_tensor* hi, int at, int align_at,
                           int backward, int cubic) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (!ocl_cnn_dtype(t->dtype) || t->dtype != lo->dtype) /* the kernels take one dtype: g.dt */
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "upsampling takes float32/float16/bfloat16 of one dtype, tensor %d is %s",
                      i, ocl_dtype_name(t->dtype));
  }
  if (lo->ndim < 3 || lo->ndim > 5 || (cubic && lo->ndim != 4) || hi->ndim != lo->ndim)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 3-d, 4-d or 5-d operands of one rank");
  if (lo->sizes[0] != hi->sizes[0] || lo->sizes[1] != hi->sizes[1])
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "batch or channel sizes differ");
  ocl_upsample g;
  memset(&g, 0, sizeof g);
  g.one_d = lo->ndim == 3; /* [N, C, L]: planes of one row (H stride unused) */
  g.three_d = lo->ndim == 5; /* [N, C, D, H, W]: depth strides apart, (n, c, h, w) as 2-d */
  g.C = lo->sizes[1];
  for (int i = 0; i < 4; i++) {
    int d = g.one_d ? (i < 2 ? i : i - 1) : (g.three_d && i >= 2 ? i + 1 : i);
    g.xs[i] = g.one_d && i == 2 ? 0 : lo->strides[d];
    g.ys[i] = g.one_d && i == 2 ? 0 : hi->strides[d];
  }
  g.B = lo->sizes[0] * lo->sizes[1];
  g.D = g.three_d ? lo->sizes[2] : 1, g.OD = g.three_d ? hi->sizes[2] : 1;
  g.xsd = g.three_d ? lo->strides[2] : 0, g.ysd = g.three_d ? hi->strides[2] : 0;
  g.H = g.one_d ? 1 : lo->sizes[lo->ndim - 2], g.W = lo->sizes[lo->ndim - 1];
  g.OH = g.one_d ? 1 : hi->sizes[hi->ndim - 2], g.OW = hi->sizes[hi->ndim - 1];
  if ((g.D == 0 || g.H == 0 || g.W == 0) && g.OD * g.OH * g.OW > 0)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input has an empty spatial dimension");
  if (ocl_numel(lo) == 0) return RAL_OK;
  if (ocl_numel(hi) == 0) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output sizes must be greater than 0");
  g.linear = align_at >= 0 && !cubic;
  g.cubic = cubic;
  g.exact = align_at == -2;
  g.align = align_at >= 0 ? ocl_scalar_i(c, align_at, 0) != 0 : 0;
  int td = g.three_d; /* the scales: (d, h, w) from `at` for 3-d, (h, w) for 2-d, (w) for 1-d */
  float sd = td ? scale_of(c, at, g.D, g.OD) : 1.0f;
  float sh = g.one_d ? 1.0f : scale_of(c, at + td, g.H, g.OH), sw = scale_of(c, at + td + !g.one_d, g.W, g.OW);
  g.step_d = align_at >= 0 ? ral_up_linear_step(g.D, g.OD, g.align, sd) : sd;
  g.step_h = align_at >= 0 ? ral_up_linear_step(g.H, g.OH, g.align, sh) : sh;
  g.step_w = align_at >= 0 ? ral_up_linear_step(g.W, g.OW, g.align, sw) : sw;
  g.dt = lo->dtype;
  g.off_x = ocl_elem_off(lo);
  g.off_y = ocl_elem_off(hi);
  if (ocl_inline_upsample(c, &g, lo, hi, backward)) return RAL_OK; /* a CPU runtime with host-unified buffers */
  ocl_arg a[4] = {ocl_mem(backward ? lo : hi), ocl_mem(backward ? hi : lo), OCL_VAL(g)};
  if (backward) {
    int64_t per = g.OH / (g.H ? g.H : 1) + 2, pw = g.OW / (g.W ? g.W : 1) + 2, pd = g.OD / (g.D ? g.D : 1) + 1;
    if (cubic) return ocl_enqueue_rows(c, OCL_K_bicubic2d_bwd, 3, a, g.B * g.H, g.W * 64 * per * pw);
    return ocl_enqueue_rows(c, OCL_K_upsample2d_bwd, 3, a, g.B * g.D * g.H, g.W * per * pw * pd * (td ? 2 : 1));
  }
  if (cubic) return ocl_enqueue_rows(c, OCL_K_bicubic2d_fwd, 3, a, g.B * g.OH, g.OW * 16);
  return ocl_enqueue_rows(c, OCL_K_upsample2d_fwd, 3, a, g.B * g.OD * g.OH, g.OW * (td ? 8 : 4));
}

/* Each entry point of RAL_UPSAMPLE_OPS (resample.h): its arity, then the shared body. */
#define OCL_UPSAMPLE_ENTRY(op, scale_at, align_at, backward, cubic)                                     \
  ral_status ocl_##op(const ral_kernel_call* c) {                                                      \
    ral_status s = ocl_check_arity(c, 1, 1, scale_at);                                                 \
    if (s != RAL_OK) return s;                                                                         \
    return backward ? upsample(c, ocl_out(c, 0), ocl_in(c, 0), scale_at, align_at, 1, cubic)          \
                    : upsample(c, ocl_in(c, 0), ocl_out(c, 0), scale_at, align_at, 0, cubic);         \
  }
RAL_UPSAMPLE_OPS(OCL_UPSAMPLE_ENTRY)
#undef OCL_UPSAMPLE_ENTRY
