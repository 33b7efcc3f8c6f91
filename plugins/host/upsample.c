/*
 * upsample.c -- upsample_nearest2d and upsample_bilinear2d with their backward over
 * [N, C, H, W] operands of any strides, float32/float16/bfloat16 (computed in float). One
 * pool task per block of whole planes (planes.h). Source indices and weights are computed
 * per axis once per call with ATen's CPU formulas (UpSample.h: float scales, the 1x/2x
 * shortcuts of nearest, align_corners and the clamp at 0 of bilinear), so values match CPU's.
 */
#include <math.h>
#include <stdlib.h>

#include "planes.h"
#include "pool.h"

typedef struct {
  int64_t* i0; /* first source index per output index */
  int64_t* i1; /* second (bilinear), i0 or i0 + 1 */
  float* l0;   /* weight of i0 (bilinear); that of i1 is 1 - l0 */
} axis_map;

typedef struct {
  plane_operand a, b; /* forward: a = input, b = output; backward: a = grad_input, b = grad_output */
  axis_map mh, mw;
  int linear;
} up_job;

/* ATen's compute_scales_value<float>: 1 / scale when given and positive, else in / out. */
static float scale_of(const ral_kernel_call* c, int at, int64_t in, int64_t out) {
  double f;
  int64_t v;
  if (!host_scalar_is_none(c, at) && host_scalar_num(c, at, &f, &v) && f > 0) return (float)(1.0 / f);
  return (float)in / (float)out;
}

static int axis_alloc(axis_map* m, int64_t out) {
  m->i0 = malloc((size_t)(out + 1) * sizeof(int64_t));
  m->i1 = malloc((size_t)(out + 1) * sizeof(int64_t));
  m->l0 = malloc((size_t)(out + 1) * sizeof(float));
  return m->i0 && m->i1 && m->l0;
}

static void axis_free(axis_map* m) {
  free(m->i0);
  free(m->i1);
  free(m->l0);
}

/* nearest_idx: identity at 1x, a shift at 2x, else floor(o * scale) clamped. */
static void nearest_axis(axis_map* m, int64_t in, int64_t out, float scale) {
  for (int64_t o = 0; o < out; o++) {
    int64_t s;
    if (out == in) s = o;
    else if (out == 2 * in) s = o >> 1;
    else {
      s = (int64_t)floorf((float)o * scale);
      if (s > in - 1) s = in - 1;
    }
    m->i0[o] = m->i1[o] = s;
    m->l0[o] = 1.0f;
  }
}

/* area_pixel_compute_scale / _source_index (non-cubic) and guard_index_and_lambda. */
static void linear_axis(axis_map* m, int64_t in, int64_t out, int align, float scale) {
  float sc = align ? (out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f) : scale;
  for (int64_t o = 0; o < out; o++) {
    float r = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
    if (!align && r < 0) r = 0;
    int64_t i = (int64_t)floorf(r);
    if (i > in - 1) i = in - 1;
    float l = r - (float)i;
    l = l < 0 ? 0 : (l > 1 ? 1 : l);
    m->i0[o] = i;
    m->i1[o] = i + (i < in - 1 ? 1 : 0);
    m->l0[o] = 1.0f - l;
  }
}

/* One loop over the output: forward gathers a into b, backward scatters b's gradient into a. */
static void interpolate(const up_job* j, int64_t cb, float* a, float* b, int backward) {
  int64_t H = j->a.h, W = j->a.w, OH = j->b.h, OW = j->b.w;
  for (int64_t cc = 0; cc < cb; cc++) {
    float* p = a + cc * H * W;
    for (int64_t oh = 0; oh < OH; oh++) {
      float *r0 = p + j->mh.i0[oh] * W, *r1 = p + j->mh.i1[oh] * W, *q = b + (cc * OH + oh) * OW;
      if (!j->linear) {
        for (int64_t ow = 0; ow < OW; ow++) {
          if (backward) r0[j->mw.i0[ow]] += q[ow];
          else q[ow] = r0[j->mw.i0[ow]];
        }
        continue;
      }
      float h0 = j->mh.l0[oh], h1 = 1.0f - h0;
      for (int64_t ow = 0; ow < OW; ow++) {
        int64_t x0 = j->mw.i0[ow], x1 = j->mw.i1[ow];
        float w0 = j->mw.l0[ow], w1 = 1.0f - w0, v = q[ow];
        if (!backward) {
          q[ow] = h0 * (w0 * r0[x0] + w1 * r0[x1]) + h1 * (w0 * r1[x0] + w1 * r1[x1]);
          continue;
        }
        r0[x0] += h0 * w0 * v;
        r0[x1] += h0 * w1 * v;
        r1[x0] += h1 * w0 * v;
        r1[x1] += h1 * w1 * v;
      }
    }
  }
}

static void forward(void* job, int64_t n, int64_t c0, int64_t cb, const float* x, float* y) {
  interpolate(job, cb, (float*)x, y, 0);
}

static void backward(void* job, int64_t n, int64_t c0, int64_t cb, const float* g, float* gi) {
  interpolate(job, cb, gi, (float*)g, 1);
}

/* in_t: the low-resolution operand (input or grad_input), out_t the other; scales at `at`,
 * align_corners at `align_at` (-1: nearest). */
static ral_status upsample(const ral_kernel_call* c, const ral_tensor* in_t, const ral_tensor* out_t, int at,
                           int align_at, int is_backward) {
  up_job j = {.linear = align_at >= 0};
  const ral_tensor* ts[] = {in_t, out_t};
  for (int k = 0; k < 2; k++)
    if (ts[k]->dtype != RAL_DTYPE_FLOAT32 && ts[k]->dtype != RAL_DTYPE_FLOAT16 && ts[k]->dtype != RAL_DTYPE_BFLOAT16)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s; float32/float16/bfloat16 only", host_dtype_name(ts[k]->dtype));
  if (in_t->dtype != out_t->dtype) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and output dtypes differ");
  if (in_t->ndim != 4 || out_t->ndim != 4 || !plane_operand_of(&j.a, in_t) || !plane_operand_of(&j.b, out_t))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 4-d operands");
  if (j.a.n != j.b.n || j.a.c != j.b.c) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "batch or channel sizes differ");
  if ((j.a.h == 0 || j.a.w == 0) && j.b.h * j.b.w > 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input has an empty spatial dimension");
  float sh = scale_of(c, at, j.a.h, j.b.h), sw = scale_of(c, at + 1, j.a.w, j.b.w);
  ral_status s = RAL_OK;
  if (!axis_alloc(&j.mh, j.b.h) || !axis_alloc(&j.mw, j.b.w)) {
    s = host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for index tables");
  } else {
    int align = j.linear ? (int)host_scalar_int(c, align_at, 0) : 0;
    if (j.linear) {
      linear_axis(&j.mh, j.a.h, j.b.h, align, sh);
      linear_axis(&j.mw, j.a.w, j.b.w, align, sw);
    } else {
      nearest_axis(&j.mh, j.a.h, j.b.h, sh);
      nearest_axis(&j.mw, j.a.w, j.b.w, sw);
    }
    plane_run r = {.src = is_backward ? &j.b : &j.a, .dst = is_backward ? &j.a : &j.b, .job = &j,
                   .body = is_backward ? backward : forward, .accumulate = is_backward};
    if (j.a.h * j.a.w > 0 && !plane_run_all(&r)) s = host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a plane block");
  }
  axis_free(&j.mh);
  axis_free(&j.mw);
  return s;
}

/* upsample_nearest2d(self, output_size, scales_h?, scales_w?) -> out. */
ral_status host_upsample_nearest2d(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 1);
  return s != RAL_OK ? s : upsample(c, host_in(c, 0), host_out(c, 0), 1, -1, 0);
}

/* upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h?, scales_w?). */
ral_status host_upsample_nearest2d_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 2);
  return s != RAL_OK ? s : upsample(c, host_out(c, 0), host_in(c, 0), 2, -1, 1);
}

/* upsample_bilinear2d(self, output_size, align_corners, scales_h?, scales_w?) -> out. */
ral_status host_upsample_bilinear2d(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 2);
  return s != RAL_OK ? s : upsample(c, host_in(c, 0), host_out(c, 0), 2, 1, 0);
}

/* upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners,
 * scales_h?, scales_w?) -> grad_input. */
ral_status host_upsample_bilinear2d_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 1, 1, 3);
  return s != RAL_OK ? s : upsample(c, host_out(c, 0), host_in(c, 0), 3, 2, 1);
}
