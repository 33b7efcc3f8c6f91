/*
 * resample.h -- the per-plane math of 2-d average pooling (plain and adaptive) and of
 * nearest / bilinear / bicubic upsampling over one contiguous float [H, W] plane and its [OH, OW]
 * result (nearest / trilinear: a [D, H, W] volume) (resample.c), with ATen's CPU window, divisor and source-index rules. Shared by the
 * host plugin (over its float plane blocks, plugins/host/pool2d.c, upsample.c) and the OpenCL
 * plugin's host path (over host-unified buffers, plugins/opencl/inline_pool.c); each plugin
 * compiles the source into its own library.
 */
#ifndef RAL_RESAMPLE_H
#define RAL_RESAMPLE_H

#include <stdint.h>

/* Average pooling of an [H, W] plane into [OH, OW]. adaptive: windows
 * floor(o * I / O) .. ceil((o + 1) * I / O) and no other field used; else kernel, stride,
 * padding, count_include_pad and divisor (0: none). */
typedef struct {
  int64_t H, W, OH, OW;
  int64_t kh, kw, sh, sw, ph, pw, divisor;
  int count_include_pad, adaptive;
} ral_avg_pool;

/*! Window [h0, h1) x [w0, w1) of output (oh, ow), clipped to the input, and its divisor. */
float ral_avg_pool_window(const ral_avg_pool* g, int64_t oh, int64_t ow, int64_t* h0, int64_t* h1, int64_t* w0,
                          int64_t* w1);
/*! y[OH, OW] = the window averages of x[H, W] (an empty window gives 0). */
void ral_avg_pool_plane(const ral_avg_pool* g, const float* x, float* y);
/*! gi[H, W] += each output's gradient / divisor over its window, in output order (CPU's). */
void ral_avg_pool_plane_backward(const ral_avg_pool* g, float* gi, const float* go);

/* Source indices of one axis, per output index o: i0[o], i1[o] (bilinear: i0 or i0 + 1;
 * nearest: i0) with weights l0[o] and 1 - l0[o]. Bicubic: i0[o] the unclamped
 * floor of the source index (may be -1; taps i0 - 1 .. i0 + 2, each clamped into the axis)
 * and l0[o] its fraction t (ral_cubic_weights gives the four weights). */
typedef struct {
  int64_t* i0;
  int64_t* i1;
  float* l0;
} ral_up_axis;

/* Upsampling of an [H, W] plane into [OH, OW] through two axis tables; bicubic (cubic 1,
 * linear 0): four taps per axis with A = -0.75; nearest (linear 0, cubic 0)
 * picks floor(o * scale), or with `exact` floor((o + 0.5) * scale) (nearest-exact). one_d:
 * a 1-d signal (H = OH = 1), linear along W alone (CPU's linear1d: no row weights, so an
 * infinity is not multiplied by a zero row weight). three_d: a [D, H, W] volume into
 * [OD, OH, OW] through a third (depth) table, nearest or trilinear (CPU's generic loop: each
 * depth tap's bilinear value times its weight, the two added; the backward adds the eight
 * d * h * w * gradient terms of each output in CPU's order). */
typedef struct {
  int64_t H, W, OH, OW;
  ral_up_axis h, w;
  int linear, exact, one_d, cubic;
  int64_t D, OD; /* three_d only */
  ral_up_axis d;
  int three_d;
} ral_upsample;

/*! ATen's compute_scales_value<float>: 1 / scale when one is given (`given`) and positive,
 *  else in / out. */
float ral_up_scale(int given, double scale, int64_t in, int64_t out);
/*! The source step of a linear or cubic axis: (in - 1) / (out - 1) with align_corners, else `scale`. */
float ral_up_linear_step(int64_t in, int64_t out, int align, float scale);
/*! Fills g->h and g->w, and with three_d g->d (allocated; 0 when out of memory) for sizes D, H,
 *  W, OD, OH, OW, g->linear, g->exact, align_corners and the scales of ral_up_scale (scale_d
 *  unused unless three_d); free with ral_upsample_free. */
int ral_upsample_tables(ral_upsample* g, int align, float scale_d, float scale_h, float scale_w);
void ral_upsample_free(ral_upsample* g);
/*! ATen's get_cubic_upsample_coefficients (A = -0.75) for fraction t: w[0..3] of taps
 *  i0 - 1 .. i0 + 2. */
void ral_cubic_weights(float t, float w[4]);
/*! y[OH, OW] from x[H, W] (three_d: y[OD, OH, OW] from x[D, H, W]). */
void ral_upsample_plane(const ral_upsample* g, const float* x, float* y);
/*! gi[H, W] += the gradient go[OH, OW] spread back, in output order (CPU's); three_d: volumes. */
void ral_upsample_plane_backward(const ral_upsample* g, float* gi, const float* go);

/*! Channels-last forms over one sample: x [H][W][C] and y [OH][OW][C] (channels dense),
 *  the same windows and indices with each output's C channels at once, so every element sees
 *  the same operations in the same order as in the plane forms. Backward forms add into gi. */
void ral_avg_pool_cl(const ral_avg_pool* g, int64_t C, const float* x, float* y);
void ral_avg_pool_cl_backward(const ral_avg_pool* g, int64_t C, float* gi, const float* go);
void ral_upsample_cl(const ral_upsample* g, int64_t C, const float* x, float* y);
void ral_upsample_cl_backward(const ral_upsample* g, int64_t C, float* gi, const float* go);

/* 3-d pooling of one [D, H, W] volume into [OD, OH, OW] (max_pool3d_with_indices,
 * avg_pool3d and their backward), every operand with its own element strides over (d, h, w)
 * (st[3]), so each plugin passes its float blocks or its buffers as they lie. Axis order in
 * the arrays: depth, height, width. Max pooling: CPU's window (dilation; the first in-volume
 * element is the index when nothing beats -inf), first maximum, NaN wins, index flat per
 * volume (d * H * W + h * W + w); with `adaptive` (adaptive_max_pool3d) over the adaptive
 * windows below, dilation 1. Average pooling: CPU's padded window clipped to the volume,
 * divisor (0: none) or count_include_pad; an empty window gives 0. adaptive
 * (_adaptive_avg_pool3d): windows floor(o * I / O) .. ceil((o + 1) * I / O), the sum divided by
 * each extent in turn (CPU's sum / kd / kh / kw); k, s, p unused. Backward forms zero gi,
 * then add each output's gradient in output order (CPU's). */
typedef struct {
  int64_t in[3], out[3], k[3], s[3], p[3], dil[3], divisor;
  int count_include_pad, adaptive;
} ral_pool3;

/*! y, idx = each window's maximum and its flat index in the volume. */
void ral_max_pool3_volume(const ral_pool3* g, const float* x, const int64_t xs[3], float* y, const int64_t ys[3],
                          int64_t* idx, const int64_t is[3]);
/*! Whether idx holds an index outside the volume (the first in *bad). */
int ral_max_pool3_bad_index(const ral_pool3* g, const int64_t* idx, const int64_t is[3], int64_t* bad);
/*! gi = 0, then each gradient added at its index (one outside the volume is skipped: check first). */
void ral_max_pool3_volume_backward(const ral_pool3* g, float* gi, const int64_t gs[3], const float* go,
                                   const int64_t os[3], const int64_t* idx, const int64_t is[3]);
/*! Window lo[a] .. hi[a] of output o[3], clipped to the volume, and its divisor. */
float ral_avg_pool3_window(const ral_pool3* g, const int64_t o[3], int64_t lo[3], int64_t hi[3]);
/*! y = the window averages of x. */
void ral_avg_pool3_volume(const ral_pool3* g, const float* x, const int64_t xs[3], float* y, const int64_t ys[3]);
/*! gi = 0, then each output's gradient / divisor added over its window. */
void ral_avg_pool3_volume_backward(const ral_pool3* g, float* gi, const int64_t gs[3], const float* go,
                                   const int64_t os[3]);

/*
 * The upsampling ops both plugins serve and where their call keeps its scalars (one table, so
 * the plugins cannot disagree): X(op, scale_at, align_at, backward, cubic).
 * - scale_at: index of the first optional scale (scales_h; scales_w follows for 2-d ops);
 *   the scalars before it are the sizes and align_corners, so it is also the least scalar count;
 * - align_at: align_corners' index for linear modes; -1 nearest, -2 nearest-exact;
 * - backward: 0 = (self) -> out; 1 = (grad_output) -> grad_input;
 * - cubic: 1 for bicubic (align_at then holds align_corners' index, as for linear modes).
 * The 1-d forms ([N, C, L], planes of one row) take the 2-d layouts with a single scale; the
 * 3-d forms ([N, C, D, H, W]) the same layouts with three scales (scales_d, scales_h, scales_w).
 */
#define RAL_UPSAMPLE_OPS(X)                                 \
  X(upsample_nearest2d, 1, -1, 0, 0)                         \
  X(upsample_nearest2d_backward, 2, -1, 1, 0)                \
  X(upsample_bilinear2d, 2, 1, 0, 0)                         \
  X(upsample_bilinear2d_backward, 3, 2, 1, 0)                \
  X(upsample_nearest_exact2d, 1, -2, 0, 0)                   \
  X(upsample_nearest_exact2d_backward, 2, -2, 1, 0)          \
  X(upsample_nearest1d, 1, -1, 0, 0)                         \
  X(upsample_nearest1d_backward, 2, -1, 1, 0)                \
  X(upsample_nearest_exact1d, 1, -2, 0, 0)                   \
  X(upsample_nearest_exact1d_backward, 2, -2, 1, 0)          \
  X(upsample_linear1d, 2, 1, 0, 0)                           \
  X(upsample_linear1d_backward, 3, 2, 1, 0)                  \
  X(upsample_bicubic2d, 2, 1, 0, 1)                          \
  X(upsample_bicubic2d_backward, 3, 2, 1, 1)                 \
  X(upsample_nearest3d, 1, -1, 0, 0)                         \
  X(upsample_nearest3d_backward, 2, -1, 1, 0)                \
  X(upsample_nearest_exact3d, 1, -2, 0, 0)                   \
  X(upsample_nearest_exact3d_backward, 2, -2, 1, 0)          \
  X(upsample_trilinear3d, 2, 1, 0, 0)                        \
  X(upsample_trilinear3d_backward, 3, 2, 1, 0)

#endif /* RAL_RESAMPLE_H */
