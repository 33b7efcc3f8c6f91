/*
 * resample.c -- 2-d average pooling and nearest / bilinear / bicubic upsampling of one float
 * plane (resample.h). Windows, divisors, source indices and weights follow ATen's CPU kernels
 * (AvgPoolKernel.cpp, AdaptivePooling.h, UpSample.h: float scales, nearest's 1x/2x shortcuts,
 * align_corners and bilinear's clamp at 0; bicubic: UpSampleKernel.cpp's forward and
 * UpSampleBicubic2d.cpp's backward, A = -0.75, taps clamped into the plane), and each
 * backward adds in CPU's order (output by output), so results match CPU's.
 */
#include "resample.h"

#include <math.h>
#include <stdlib.h>

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---------------------------------------------------------------- average pooling */
float ral_avg_pool_window(const ral_avg_pool* g, int64_t oh, int64_t ow, int64_t* h0, int64_t* h1, int64_t* w0,
                          int64_t* w1) {
  if (g->adaptive) { /* floor(o * I / O) .. ceil((o + 1) * I / O) */
    *h0 = oh * g->H / g->OH, *h1 = ((oh + 1) * g->H + g->OH - 1) / g->OH;
    *w0 = ow * g->W / g->OW, *w1 = ((ow + 1) * g->W + g->OW - 1) / g->OW;
    return (float)((*h1 - *h0) * (*w1 - *w0));
  }
  int64_t hs = oh * g->sh - g->ph, ws = ow * g->sw - g->pw;
  int64_t he = imin(hs + g->kh, g->H + g->ph), we = imin(ws + g->kw, g->W + g->pw);
  int64_t padded = (he - hs) * (we - ws);
  *h0 = imax(hs, 0), *w0 = imax(ws, 0), *h1 = imin(he, g->H), *w1 = imin(we, g->W);
  if (g->divisor) return (float)g->divisor;
  return (float)(g->count_include_pad ? padded : (*h1 - *h0) * (*w1 - *w0));
}

void ral_avg_pool_plane(const ral_avg_pool* g, const float* x, float* y) {
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t h0, h1, w0, w1;
      float d = ral_avg_pool_window(g, oh, ow, &h0, &h1, &w0, &w1), s = 0.0f;
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) s += x[h * g->W + w];
      y[oh * g->OW + ow] = h0 < h1 && w0 < w1 ? s / d : 0.0f;
    }
}

void ral_avg_pool_plane_backward(const ral_avg_pool* g, float* gi, const float* go) {
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t h0, h1, w0, w1;
      float v = go[oh * g->OW + ow] / ral_avg_pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) gi[h * g->W + w] += v;
    }
}

/* ---------------------------------------------------------------- upsampling */
float ral_up_scale(int given, double scale, int64_t in, int64_t out) {
  if (given && scale > 0) return (float)(1.0 / scale);
  return (float)in / (float)out;
}

float ral_up_linear_step(int64_t in, int64_t out, int align, float scale) {
  if (!align) return scale;
  return out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.0f;
}

/* nearest_idx: identity at 1x, a shift at 2x, else floor(o * scale) clamped;
 * nearest_exact_idx (exact): floor((o + 0.5) * scale) clamped, no shortcuts. ATen computes
 * (o + 0.5) * scale in double and floorf rounds it to float first: the correctly rounded
 * float product, which is what the float product here is (o + 0.5 is exact below 2^23). */
static void nearest_axis(ral_up_axis* m, int64_t in, int64_t out, float scale, int exact) {
  for (int64_t o = 0; o < out; o++) {
    int64_t s;
    if (exact) s = imin((int64_t)floorf(((float)o + 0.5f) * scale), in - 1);
    else if (out == in) s = o;
    else if (out == 2 * in) s = o >> 1;
    else s = imin((int64_t)floorf((float)o * scale), in - 1);
    m->i0[o] = m->i1[o] = s;
    m->l0[o] = 1.0f;
  }
}

/* compute_source_index_and_lambda: a copy at equal sizes (even with a scale given), else
 * area_pixel_compute_source_index (non-cubic) and guard_index_and_lambda. */
static void linear_axis(ral_up_axis* m, int64_t in, int64_t out, int align, float scale) {
  float sc = ral_up_linear_step(in, out, align, scale);
  for (int64_t o = 0; o < out; o++) {
    if (out == in) {
      m->i0[o] = m->i1[o] = o;
      m->l0[o] = 1.0f;
      continue;
    }
    float r = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
    if (!align && r < 0) r = 0;
    int64_t i = imin((int64_t)floorf(r), in - 1);
    float l = r - (float)i;
    l = l < 0 ? 0 : (l > 1 ? 1 : l);
    m->i0[o] = i;
    m->i1[o] = i + (i < in - 1 ? 1 : 0);
    m->l0[o] = 1.0f - l;
  }
}

/* area_pixel_compute_source_index (cubic: no clamp at 0) and guard_index_and_lambda: the
 * floor index (may be -1) and its fraction. */
static void cubic_axis(ral_up_axis* m, int64_t in, int64_t out, int align, float scale) {
  float sc = ral_up_linear_step(in, out, align, scale);
  for (int64_t o = 0; o < out; o++) {
    float r = align ? sc * (float)o : sc * ((float)o + 0.5f) - 0.5f;
    int64_t i = imin((int64_t)floorf(r), in - 1);
    float l = r - (float)i;
    m->i0[o] = m->i1[o] = i;
    m->l0[o] = l < 0 ? 0 : (l > 1 ? 1 : l);
  }
}

void ral_cubic_weights(float t, float w[4]) {
  const float A = -0.75f;
  float x1 = t + 1.0f, x2 = 1.0f - t, x3 = x2 + 1.0f; /* as ATen's float(t + 1.0) etc. */
  w[0] = ((A * x1 - 5 * A) * x1 + 8 * A) * x1 - 4 * A;
  w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
  w[2] = ((A + 2) * x2 - (A + 3)) * x2 * x2 + 1;
  w[3] = ((A * x3 - 5 * A) * x3 + 8 * A) * x3 - 4 * A;
}

static int axis_alloc(ral_up_axis* m, int64_t out) {
  m->i0 = malloc((size_t)(out + 1) * sizeof(int64_t));
  m->i1 = malloc((size_t)(out + 1) * sizeof(int64_t));
  m->l0 = malloc((size_t)(out + 1) * sizeof(float));
  return m->i0 && m->i1 && m->l0;
}

static void axis_free(ral_up_axis* m) {
  free(m->i0);
  free(m->i1);
  free(m->l0);
  m->i0 = m->i1 = NULL;
  m->l0 = NULL;
}

/* One axis's table of the mode g says. */
static void axis_fill(const ral_upsample* g, ral_up_axis* m, int64_t in, int64_t out, int align, float scale) {
  if (g->cubic) cubic_axis(m, in, out, align, scale);
  else if (g->linear) linear_axis(m, in, out, align, scale);
  else nearest_axis(m, in, out, scale, g->exact);
}

int ral_upsample_tables(ral_upsample* g, int align, float scale_d, float scale_h, float scale_w) {
  if (!axis_alloc(&g->h, g->OH) || !axis_alloc(&g->w, g->OW)) return 0;
  if (g->three_d && !axis_alloc(&g->d, g->OD)) return 0;
  if (g->three_d) axis_fill(g, &g->d, g->D, g->OD, align, scale_d);
  axis_fill(g, &g->h, g->H, g->OH, align, scale_h);
  axis_fill(g, &g->w, g->W, g->OW, align, scale_w);
  return 1;
}

void ral_upsample_free(ral_upsample* g) {
  axis_free(&g->h);
  axis_free(&g->w);
  axis_free(&g->d);
}

/* Tap k (0..3) of cubic source index i, clamped into [0, n). */
static int64_t tap(int64_t i, int k, int64_t n) { return imax(imin(i - 1 + k, n - 1), 0); }

/* Bicubic: forward as UpSampleKernel.cpp's generic 2-d loop (each row's taps summed along W,
 * then the rows along H, left to right); backward as UpSampleBicubic2d.cpp's (per output:
 * columns outer, rows inner, each gradient * row weight * column weight). */
static void bicubic(const ral_upsample* g, float* x, float* y, int backward) {
  int64_t W = g->W, H = g->H;
  if (backward && H == g->OH && W == g->OW) { /* CPU's backward copies at equal sizes, even where
                                                * a given scale made its forward interpolate */
    for (int64_t i = 0; i < H * W; i++) x[i] += y[i];
    return;
  }
  for (int64_t oh = 0; oh < g->OH; oh++) {
    float wh[4];
    int64_t ih = g->h.i0[oh];
    ral_cubic_weights(g->h.l0[oh], wh);
    for (int64_t ow = 0; ow < g->OW; ow++) {
      float ww[4];
      int64_t iw = g->w.i0[ow];
      ral_cubic_weights(g->w.l0[ow], ww);
      float* q = y + oh * g->OW + ow;
      if (backward) {
        float v = *q;
        for (int i = 0; i < 4; i++)
          for (int j = 0; j < 4; j++) x[tap(ih, j, H) * W + tap(iw, i, W)] += v * wh[j] * ww[i];
        continue;
      }
      float out = 0.0f;
      for (int j = 0; j < 4; j++) {
        const float* r = x + tap(ih, j, H) * W;
        float t = r[tap(iw, 0, W)] * ww[0];
        for (int i = 1; i < 4; i++) t += r[tap(iw, i, W)] * ww[i];
        out = j == 0 ? t * wh[0] : out + t * wh[j];
      }
      *q = out;
    }
  }
}

/* One output plane y[OH, OW] (a loop over the output: forward gathers x into y, backward
 * scatters y's gradient into x). x0 is the input plane read; with `deep` (trilinear) x1 is the
 * second depth tap, d0 the weight of x0 and 1 - d0 that of x1, each tap's bilinear value (or
 * term of the backward) weighted as CPU's 3-d loops do. */
static void interpolate_plane(const ral_upsample* g, float* x0, float* x1, float d0, int deep, float* y, int backward) {
  int64_t W = g->W, OW = g->OW;
  const ral_up_axis *mh = &g->h, *mw = &g->w;
  float d1 = 1.0f - d0;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    float *r0 = x0 + mh->i0[oh] * W, *r1 = x0 + mh->i1[oh] * W, *q = y + oh * OW;
    float *s0 = x1 + mh->i0[oh] * W, *s1 = x1 + mh->i1[oh] * W;
    if (!g->linear) {
      for (int64_t ow = 0; ow < OW; ow++) {
        if (backward) r0[mw->i0[ow]] += q[ow];
        else q[ow] = r0[mw->i0[ow]];
      }
      continue;
    }
    float h0 = mh->l0[oh], h1 = 1.0f - h0;
    for (int64_t ow = 0; ow < OW; ow++) {
      int64_t x0 = mw->i0[ow], x1 = mw->i1[ow];
      float w0 = mw->l0[ow], w1 = 1.0f - w0, v = q[ow];
      if (g->one_d) { /* linear1d */
        if (!backward) {
          q[ow] = w0 * r0[x0] + w1 * r0[x1];
          continue;
        }
        r0[x0] += w0 * v;
        r0[x1] += w1 * v;
        continue;
      }
      if (!backward) {
        float t = h0 * (w0 * r0[x0] + w1 * r0[x1]) + h1 * (w0 * r1[x0] + w1 * r1[x1]);
        q[ow] = deep ? d0 * t + d1 * (h0 * (w0 * s0[x0] + w1 * s0[x1]) + h1 * (w0 * s1[x0] + w1 * s1[x1])) : t;
        continue;
      }
      r0[x0] += d0 * h0 * w0 * v; /* 2-d: d0 = 1, exactly h0 * w0 * v */
      r0[x1] += d0 * h0 * w1 * v;
      r1[x0] += d0 * h1 * w0 * v;
      r1[x1] += d0 * h1 * w1 * v;
      if (!deep) continue;
      s0[x0] += d1 * h0 * w0 * v;
      s0[x1] += d1 * h0 * w1 * v;
      s1[x0] += d1 * h1 * w0 * v;
      s1[x1] += d1 * h1 * w1 * v;
    }
  }
}

/* A plane, or (three_d) a volume plane by plane along the output depth. */
static void interpolate(const ral_upsample* g, float* x, float* y, int backward) {
  if (g->cubic) {
    bicubic(g, x, y, backward);
    return;
  }
  if (!g->three_d) {
    interpolate_plane(g, x, x, 1.0f, 0, y, backward);
    return;
  }
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
  for (int64_t od = 0; od < g->OD; od++)
    interpolate_plane(g, x + g->d.i0[od] * hw, x + g->d.i1[od] * hw, g->d.l0[od], g->linear, y + od * ohw, backward);
}

void ral_upsample_plane(const ral_upsample* g, const float* x, float* y) { interpolate(g, (float*)x, y, 0); }

void ral_upsample_plane_backward(const ral_upsample* g, float* gi, const float* go) {
  interpolate(g, gi, (float*)go, 1);
}

/* ---------------------------------------------------------------- channels-last forms */
void ral_avg_pool_cl(const ral_avg_pool* g, int64_t C, const float* x, float* y) {
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t h0, h1, w0, w1;
      float d = ral_avg_pool_window(g, oh, ow, &h0, &h1, &w0, &w1), *o = y + (oh * g->OW + ow) * C;
      for (int64_t c = 0; c < C; c++) o[c] = 0.0f;
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
          const float* p = x + (h * g->W + w) * C;
          for (int64_t c = 0; c < C; c++) o[c] += p[c];
        }
      int empty = !(h0 < h1 && w0 < w1);
      for (int64_t c = 0; c < C; c++) o[c] = empty ? 0.0f : o[c] / d;
    }
}

void ral_avg_pool_cl_backward(const ral_avg_pool* g, int64_t C, float* gi, const float* go) {
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t h0, h1, w0, w1;
      float d = ral_avg_pool_window(g, oh, ow, &h0, &h1, &w0, &w1);
      const float* q = go + (oh * g->OW + ow) * C;
      for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
          float* p = gi + (h * g->W + w) * C;
          for (int64_t c = 0; c < C; c++) p[c] += q[c] / d;
        }
    }
}

/* interpolate() with the channels innermost. */
static void interpolate_cl(const ral_upsample* g, int64_t C, float* x, float* y, int backward) {
  const ral_up_axis *mh = &g->h, *mw = &g->w;
  for (int64_t oh = 0; oh < g->OH; oh++) {
    float *r0 = x + mh->i0[oh] * g->W * C, *r1 = x + mh->i1[oh] * g->W * C;
    float h0 = mh->l0[oh], h1 = 1.0f - h0;
    for (int64_t ow = 0; ow < g->OW; ow++) {
      float *q = y + (oh * g->OW + ow) * C, *a = r0 + mw->i0[ow] * C, *b = r0 + mw->i1[ow] * C;
      float *e = r1 + mw->i0[ow] * C, *f = r1 + mw->i1[ow] * C;
      float w0 = mw->l0[ow], w1 = 1.0f - w0;
      if (!g->linear) {
        for (int64_t c = 0; c < C; c++) {
          if (backward) a[c] += q[c];
          else q[c] = a[c];
        }
      } else if (g->one_d) {
        for (int64_t c = 0; c < C; c++) {
          if (!backward) {
            q[c] = w0 * a[c] + w1 * b[c];
            continue;
          }
          a[c] += w0 * q[c];
          b[c] += w1 * q[c];
        }
      } else {
        for (int64_t c = 0; c < C; c++) {
          if (!backward) {
            q[c] = h0 * (w0 * a[c] + w1 * b[c]) + h1 * (w0 * e[c] + w1 * f[c]);
            continue;
          }
          float v = q[c];
          a[c] += h0 * w0 * v;
          b[c] += h0 * w1 * v;
          e[c] += h1 * w0 * v;
          f[c] += h1 * w1 * v;
        }
      }
    }
  }
}

void ral_upsample_cl(const ral_upsample* g, int64_t C, const float* x, float* y) {
  interpolate_cl(g, C, (float*)x, y, 0);
}

void ral_upsample_cl_backward(const ral_upsample* g, int64_t C, float* gi, const float* go) {
  interpolate_cl(g, C, gi, (float*)go, 1);
}

/* ---------------------------------------------------------------- 3-d pooling */
/* Element (d, h, w) of an operand with strides st. */
#define AT3(st, a, b, c) ((a) * (st)[0] + (b) * (st)[1] + (c) * (st)[2])

void ral_max_pool3_volume(const ral_pool3* g, const float* x, const int64_t xs[3], float* y, const int64_t ys[3],
                          int64_t* idx, const int64_t is[3]) {
  int64_t H = g->in[1], W = g->in[2], o[3], lo[3], hi[3];
  for (o[0] = 0; o[0] < g->out[0]; o[0]++)
    for (o[1] = 0; o[1] < g->out[1]; o[1]++)
      for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
        for (int a = 0; a < 3; a++) { /* MaxPoolKernel.cpp's window: end clipped, start stepped in */
          if (g->adaptive) { /* AdaptiveMaxPoolKernel.cpp's: floor(o * I / O) .. ceil((o + 1) * I / O) */
            lo[a] = o[a] * g->in[a] / g->out[a], hi[a] = ((o[a] + 1) * g->in[a] + g->out[a] - 1) / g->out[a];
            continue;
          }
          lo[a] = o[a] * g->s[a] - g->p[a];
          hi[a] = imin(lo[a] + (g->k[a] - 1) * g->dil[a] + 1, g->in[a]);
          while (lo[a] < 0) lo[a] += g->dil[a];
        }
        int64_t best = (lo[0] * H + lo[1]) * W + lo[2];
        float m = -INFINITY;
        for (int64_t d = lo[0]; d < hi[0]; d += g->dil[0])
          for (int64_t h = lo[1]; h < hi[1]; h += g->dil[1])
            for (int64_t w = lo[2]; w < hi[2]; w += g->dil[2]) {
              float e = x[AT3(xs, d, h, w)];
              if (e > m || isnan(e)) {
                m = e;
                best = (d * H + h) * W + w;
              }
            }
        y[AT3(ys, o[0], o[1], o[2])] = m;
        idx[AT3(is, o[0], o[1], o[2])] = best;
      }
}

int ral_max_pool3_bad_index(const ral_pool3* g, const int64_t* idx, const int64_t is[3], int64_t* bad) {
  int64_t n = g->in[0] * g->in[1] * g->in[2];
  for (int64_t d = 0; d < g->out[0]; d++)
    for (int64_t h = 0; h < g->out[1]; h++)
      for (int64_t w = 0; w < g->out[2]; w++) {
        int64_t v = idx[AT3(is, d, h, w)];
        if (v < 0 || v >= n) return *bad = v, 1;
      }
  return 0;
}

/* gi = 0 over the whole volume. */
static void zero3(const ral_pool3* g, float* gi, const int64_t gs[3]) {
  for (int64_t d = 0; d < g->in[0]; d++)
    for (int64_t h = 0; h < g->in[1]; h++)
      for (int64_t w = 0; w < g->in[2]; w++) gi[AT3(gs, d, h, w)] = 0.0f;
}

void ral_max_pool3_volume_backward(const ral_pool3* g, float* gi, const int64_t gs[3], const float* go,
                                   const int64_t os[3], const int64_t* idx, const int64_t is[3]) {
  int64_t H = g->in[1], W = g->in[2], n = g->in[0] * H * W;
  zero3(g, gi, gs);
  for (int64_t d = 0; d < g->out[0]; d++)
    for (int64_t h = 0; h < g->out[1]; h++)
      for (int64_t w = 0; w < g->out[2]; w++) {
        int64_t v = idx[AT3(is, d, h, w)];
        if (v >= 0 && v < n) gi[AT3(gs, v / (H * W), v / W % H, v % W)] += go[AT3(os, d, h, w)];
      }
}

float ral_avg_pool3_window(const ral_pool3* g, const int64_t o[3], int64_t lo[3], int64_t hi[3]) {
  int64_t padded = 1, inside = 1;
  for (int a = 0; a < 3; a++) { /* AvgPoolKernel.cpp's cpu_avg_pool3d window */
    if (g->adaptive) {
      lo[a] = o[a] * g->in[a] / g->out[a], hi[a] = ((o[a] + 1) * g->in[a] + g->out[a] - 1) / g->out[a];
      inside *= hi[a] - lo[a];
      continue;
    }
    int64_t start = o[a] * g->s[a] - g->p[a], end = imin(start + g->k[a], g->in[a] + g->p[a]);
    padded *= end - start;
    lo[a] = imax(start, 0), hi[a] = imin(end, g->in[a]);
    inside *= hi[a] - lo[a];
  }
  if (g->divisor && !g->adaptive) return (float)g->divisor;
  return (float)(g->count_include_pad && !g->adaptive ? padded : inside);
}

/* v over the divisor dv of window lo .. hi; adaptive: over each extent in turn, as CPU's
 * AdaptiveAvgPoolKernel.cpp (sum / kd / kh / kw). */
static float avg3_div(const ral_pool3* g, float v, float dv, const int64_t lo[3], const int64_t hi[3]) {
  if (!g->adaptive) return v / dv;
  return v / (float)(hi[0] - lo[0]) / (float)(hi[1] - lo[1]) / (float)(hi[2] - lo[2]);
}

/* Whether the clipped window lo .. hi is empty along some axis. */
static int empty3(const int64_t lo[3], const int64_t hi[3]) { return lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]; }

void ral_avg_pool3_volume(const ral_pool3* g, const float* x, const int64_t xs[3], float* y, const int64_t ys[3]) {
  int64_t o[3], lo[3], hi[3];
  for (o[0] = 0; o[0] < g->out[0]; o[0]++)
    for (o[1] = 0; o[1] < g->out[1]; o[1]++)
      for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
        float dv = ral_avg_pool3_window(g, o, lo, hi), sum = 0.0f;
        for (int64_t d = lo[0]; d < hi[0]; d++)
          for (int64_t h = lo[1]; h < hi[1]; h++)
            for (int64_t w = lo[2]; w < hi[2]; w++) sum += x[AT3(xs, d, h, w)];
        y[AT3(ys, o[0], o[1], o[2])] = empty3(lo, hi) ? 0.0f : avg3_div(g, sum, dv, lo, hi);
      }
}

void ral_avg_pool3_volume_backward(const ral_pool3* g, float* gi, const int64_t gs[3], const float* go,
                                   const int64_t os[3]) {
  int64_t o[3], lo[3], hi[3];
  zero3(g, gi, gs);
  for (o[0] = 0; o[0] < g->out[0]; o[0]++)
    for (o[1] = 0; o[1] < g->out[1]; o[1]++)
      for (o[2] = 0; o[2] < g->out[2]; o[2]++) {
        float dv = ral_avg_pool3_window(g, o, lo, hi), v = avg3_div(g, go[AT3(os, o[0], o[1], o[2])], dv, lo, hi);
        for (int64_t d = lo[0]; d < hi[0]; d++)
          for (int64_t h = lo[1]; h < hi[1]; h++)
            for (int64_t w = lo[2]; w < hi[2]; w++) gi[AT3(gs, d, h, w)] += v;
      }
}
