/*
 * planes.c -- plane blocks of strided [N, C, H, W] operands (planes.h).
 */
#include "planes.h"

#include <stdlib.h>
#include <string.h>

#include "pool.h"

int plane_operand_of(plane_operand* p, const ral_tensor* t) {
  p->t = t;
  p->d = 1, p->sd = 0;
  if (t->ndim == 3) {
    p->n = 1;
    p->sn = 0;
    p->c = t->sizes[0], p->h = t->sizes[1], p->w = t->sizes[2];
    p->sc = t->strides[0], p->sh = t->strides[1], p->sw = t->strides[2];
    return 1;
  }
  if (t->ndim != 4) return 0;
  p->n = t->sizes[0], p->c = t->sizes[1], p->h = t->sizes[2], p->w = t->sizes[3];
  p->sn = t->strides[0], p->sc = t->strides[1], p->sh = t->strides[2], p->sw = t->strides[3];
  return 1;
}

int plane_operand_of3(plane_operand* p, const ral_tensor* t) {
  int r = t->ndim;
  if (r != 4 && r != 5) return 0;
  p->t = t;
  p->n = r == 5 ? t->sizes[0] : 1, p->sn = r == 5 ? t->strides[0] : 0;
  p->c = t->sizes[r - 4], p->d = t->sizes[r - 3], p->h = t->sizes[r - 2], p->w = t->sizes[r - 1];
  p->sc = t->strides[r - 4], p->sd = t->strides[r - 3], p->sh = t->strides[r - 2], p->sw = t->strides[r - 1];
  return 1;
}

static int64_t plane_block(int64_t C, int64_t plane_a, int64_t plane_b) {
  int64_t plane = plane_a > plane_b ? plane_a : plane_b;
  int64_t cb = plane > 0 ? (1 << 16) / plane : C;
  if (cb < 1) cb = 1;
  return cb < C ? cb : (C > 0 ? C : 1);
}

/* Element (n, c, row, 0) of p, as bytes; row = z * h + y over a volume's depth and height. */
static char* at(const plane_operand* p, int64_t n, int64_t c, int64_t row) {
  size_t es = host_dtype_size(p->t->dtype);
  return host_ptr(p->t) + (n * p->sn + c * p->sc + (row / p->h) * p->sd + (row % p->h) * p->sh) * (int64_t)es;
}

/* A channels_last operand (channel stride below the width stride) is read and written in
 * runs of up to RUN consecutive channels per (h, w) rather than one element per cache line
 * per plane. */
#define RUN 64

static int channel_runs(const plane_operand* p, int64_t cb) { return cb > 1 && p->sc < p->sw; }

/* Moves channels [c0, c0 + cb) of sample n between p and the float block buf[cb][h][w]. */
static void plane_move(const plane_operand* p, int64_t n, int64_t c0, int64_t cb, float* buf, int store) {
  /* rows H of a volume run over depth and height; HW is a whole plane or volume */
  int64_t es = (int64_t)host_dtype_size(p->t->dtype), H = p->d * p->h, W = p->w, HW = H * W;
  int32_t dt = p->t->dtype, f32 = RAL_DTYPE_FLOAT32;
  if (channel_runs(p, cb)) {
    float run[RUN];
    for (int64_t c = 0; c < cb; c += RUN) {
      int64_t k = cb - c < RUN ? cb - c : RUN;
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < W; w++) {
          char* e = at(p, n, c0 + c, h) + w * p->sw * es;
          float* b = buf + c * HW + h * W + w;
          if (store) {
            for (int64_t i = 0; i < k; i++) run[i] = b[i * HW];
            host_store_row(e, p->sc * es, dt, run, f32, k);
          } else {
            host_load_row(run, f32, e, p->sc * es, dt, k);
            for (int64_t i = 0; i < k; i++) b[i * HW] = run[i];
          }
        }
    }
    return;
  }
  if (dt == f32 && p->sw == 1) { /* float32 rows: plain copies (the whole block when dense) */
    int dense = p->sh == W && p->sc == HW && (p->d == 1 || p->sd == p->h * W);
    for (int64_t c = 0; c < (dense ? 1 : cb); c++)
      for (int64_t h = 0; h < (dense ? 1 : H); h++) {
        float* row = (float*)at(p, n, c0 + c, h);
        float* b = buf + (c * H + h) * W;
        size_t bytes = (size_t)(dense ? cb * HW : W) * sizeof(float);
        if (store) memcpy(row, b, bytes);
        else memcpy(b, row, bytes);
      }
    return;
  }
  for (int64_t c = 0; c < cb; c++)
    for (int64_t h = 0; h < H; h++) {
      if (store) host_store_row(at(p, n, c0 + c, h), p->sw * es, dt, buf + (c * H + h) * W, f32, W);
      else host_load_row(buf + (c * H + h) * W, f32, at(p, n, c0 + c, h), p->sw * es, dt, W);
    }
}

void plane_load(const plane_operand* p, int64_t n, int64_t c0, int64_t cb, float* dst) {
  plane_move(p, n, c0, cb, dst, 0);
}

void plane_store(const plane_operand* p, int64_t n, int64_t c0, int64_t cb, const float* src) {
  plane_move(p, n, c0, cb, (float*)src, 1);
}

static void run_tasks(int64_t t0, int64_t t1, void* arg) {
  plane_run* r = arg;
  int64_t in = r->src->d * r->src->h * r->src->w, out = r->dst->d * r->dst->h * r->dst->w;
  float* src = malloc((size_t)(r->cb * (in + out) + 1) * sizeof(float));
  if (!src) {
    r->failed = 1;
    return;
  }
  float* dst = src + r->cb * in;
  for (int64_t t = t0; t < t1; t++) {
    int64_t n = t / r->blocks, c0 = (t % r->blocks) * r->cb;
    int64_t cb = r->src->c - c0 < r->cb ? r->src->c - c0 : r->cb;
    plane_load(r->src, n, c0, cb, src);
    if (r->accumulate) memset(dst, 0, (size_t)(cb * out) * sizeof(float));
    r->body(r->job, n, c0, cb, src, dst);
    plane_store(r->dst, n, c0, cb, dst);
  }
  free(src);
}

ral_status plane_avg_options(const ral_kernel_call* c, int* count_include_pad, int64_t* divisor) {
  *count_include_pad = (int)host_scalar_int(c, 4, 1);
  *divisor = host_scalar_int(c, 5, 0);
  if (!host_scalar_is_none(c, 5) && *divisor == 0)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "divisor must be not zero");
  return RAL_OK;
}

int plane_run_all(plane_run* r) {
  int64_t in = r->src->d * r->src->h * r->src->w, out = r->dst->d * r->dst->h * r->dst->w;
  r->cb = plane_block(r->src->c, in, out);
  r->blocks = (r->src->c + r->cb - 1) / r->cb;
  r->failed = 0;
  if (r->src->n * r->blocks > 0 && out > 0) host_parallel_for(r->src->n * r->blocks, 1, run_tasks, r);
  return !r->failed;
}
