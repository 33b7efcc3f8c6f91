/*
 * upsample.c -- upsample_nearest2d, _upsample_nearest_exact2d, upsample_bilinear2d and
 * upsample_bicubic2d with their backward, their 1-d forms (upsample_nearest1d, _upsample_nearest_exact1d,
 * upsample_linear1d: [N, C, L] as planes of one row) and 3-d forms (upsample_nearest3d,
 * _upsample_nearest_exact3d, upsample_trilinear3d: [N, C, D, H, W] as blocks of volumes), over
 * [N, C, H, W] operands of any strides, float32/float16/bfloat16 (computed in float). One
 * pool task per block of whole planes (planes.h). The per-axis source indices and weights and
 * the plane loops are plugins/common/resample.c (ATen's CPU formulas, shared with the OpenCL
 * plugin's host path), so values match CPU's.
 */
#include <stdlib.h>

#include "planes.h"
#include "pool.h"
#include "resample.h"

typedef struct {
  plane_operand a, b; /* forward: a = input, b = output; backward: a = grad_input, b = grad_output */
  ral_upsample g;
} up_job;

/* Elements of one input and one output plane (3-d: volume) in a block. */
static int64_t in_size(const ral_upsample* g) { return (g->three_d ? g->D : 1) * g->H * g->W; }
static int64_t out_size(const ral_upsample* g) { return (g->three_d ? g->OD : 1) * g->OH * g->OW; }

static void forward(void* job, int64_t n, int64_t c0, int64_t cb, const float* x, float* y) {
  const ral_upsample* g = &((up_job*)job)->g;
  for (int64_t cc = 0; cc < cb; cc++) ral_upsample_plane(g, x + cc * in_size(g), y + cc * out_size(g));
}

static void backward(void* job, int64_t n, int64_t c0, int64_t cb, const float* go, float* gi) {
  const ral_upsample* g = &((up_job*)job)->g;
  for (int64_t cc = 0; cc < cb; cc++) ral_upsample_plane_backward(g, gi + cc * in_size(g), go + cc * out_size(g));
}

/* ral_up_scale of the optional scale at scalar `at`. */
static float scale_of(const ral_kernel_call* c, int at, int64_t in, int64_t out) {
  double f = 0;
  int64_t v;
  int given = !host_scalar_is_none(c, at) && host_scalar_num(c, at, &f, &v);
  return ral_up_scale(given, f, in, out);
}

/* [N, C, L] as [N, C, 1, L] planes. */
static void one_row_planes(plane_operand* p, const ral_tensor* t) {
  *p = (plane_operand){.t = t, .n = t->sizes[0], .c = t->sizes[1], .d = 1, .h = 1, .w = t->sizes[2],
                       .sn = t->strides[0], .sc = t->strides[1], .sh = 0, .sw = t->strides[2]};
}

/* in_t: the low-resolution operand (input or grad_input), out_t the other; scales at `at`
 * (1-d: one scale; 3-d: three), align_corners at `align_at` (-1: nearest, -2: nearest-exact). */
static ral_status upsample(const ral_kernel_call* c, const ral_tensor* in_t, const ral_tensor* out_t, int at,
                           int align_at, int is_backward, int cubic) {
  up_job j = {.g.linear = align_at >= 0 && !cubic, .g.exact = align_at == -2, .g.cubic = cubic};
  const ral_tensor* ts[] = {in_t, out_t};
  for (int k = 0; k < 2; k++)
    if (ts[k]->dtype != RAL_DTYPE_FLOAT32 && ts[k]->dtype != RAL_DTYPE_FLOAT16 && ts[k]->dtype != RAL_DTYPE_BFLOAT16)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s; float32/float16/bfloat16 only", host_dtype_name(ts[k]->dtype));
  if (in_t->dtype != out_t->dtype) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and output dtypes differ");
  j.g.one_d = in_t->ndim == 3;
  j.g.three_d = in_t->ndim == 5;
  if (in_t->ndim != out_t->ndim) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "operands of different ranks");
  if (j.g.one_d) {
    one_row_planes(&j.a, in_t);
    one_row_planes(&j.b, out_t);
  } else if (j.g.three_d && !cubic) { /* no bicubic 3-d op */
    plane_operand_of3(&j.a, in_t);
    plane_operand_of3(&j.b, out_t);
  } else if (in_t->ndim != 4 || !plane_operand_of(&j.a, in_t) || !plane_operand_of(&j.b, out_t)) {
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 3-d, 4-d or 5-d operands");
  }
  if (j.a.n != j.b.n || j.a.c != j.b.c) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "batch or channel sizes differ");
  if ((j.a.d == 0 || j.a.h == 0 || j.a.w == 0) && j.b.d * j.b.h * j.b.w > 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input has an empty spatial dimension");
  j.g.D = j.a.d, j.g.H = j.a.h, j.g.W = j.a.w, j.g.OD = j.b.d, j.g.OH = j.b.h, j.g.OW = j.b.w;
  int td = j.g.three_d; /* the scales: (d, h, w) from `at` for 3-d, (h, w) for 2-d, (w) for 1-d */
  float sd = td ? scale_of(c, at, j.a.d, j.b.d) : 1.0f;
  float sh = j.g.one_d ? 1.0f : scale_of(c, at + td, j.a.h, j.b.h);
  float sw = scale_of(c, at + td + !j.g.one_d, j.a.w, j.b.w);
  int align = align_at >= 0 ? (int)host_scalar_int(c, align_at, 0) : 0;
  ral_status s = RAL_OK;
  if (!ral_upsample_tables(&j.g, align, sd, sh, sw)) {
    s = host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for index tables");
  } else {
    plane_run r = {.src = is_backward ? &j.b : &j.a, .dst = is_backward ? &j.a : &j.b, .job = &j,
                   .body = is_backward ? backward : forward, .accumulate = is_backward};
    if (j.a.d * j.a.h * j.a.w > 0 && !plane_run_all(&r)) s = host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a plane block");
  }
  ral_upsample_free(&j.g);
  return s;
}

/* Each entry point of RAL_UPSAMPLE_OPS (resample.h): its arity, then the shared body. */
#define HOST_UPSAMPLE_ENTRY(op, scale_at, align_at, backward, cubic)                                    \
  ral_status host_##op(const ral_kernel_call* c) {                                                     \
    ral_status s = host_check_arity(c, 1, 1, scale_at);                                                \
    if (s != RAL_OK) return s;                                                                         \
    return backward ? upsample(c, host_out(c, 0), host_in(c, 0), scale_at, align_at, 1, cubic)         \
                    : upsample(c, host_in(c, 0), host_out(c, 0), scale_at, align_at, 0, cubic);        \
  }
RAL_UPSAMPLE_OPS(HOST_UPSAMPLE_ENTRY)
#undef HOST_UPSAMPLE_ENTRY
