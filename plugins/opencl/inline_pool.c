/*
 * inline_pool.c -- 2-d average pooling (plain and adaptive), nearest / bilinear / bicubic
 * upsampling (and 3-d nearest / trilinear, volume by volume) and 3-d max / average pooling (ocl_inline_pool3, each volume through its strides),
 * forward and backward, run on the calling thread over the buffers' host memory
 * for CPU runtimes whose buffers are host memory (PoCL), as inline_cnn.c does for max
 * pooling and for the same reasons: the data is host memory already, and a loop over planes
 * on PyTorch's OpenMP team beats a round trip through the runtime's worker threads.
 *
 * The plane math is the host plugin's (plugins/common/resample.c), one source for both
 * plugins. Operands have any strides: when both sides are dense channels_last, the
 * channels-last forms run one sample per task with the channels innermost (as ATen's CPU
 * kernels for that layout); otherwise a plane whose rows are not dense (sliced, mixed
 * layouts) is gathered into, or scattered from, a per-thread scratch plane. Ordering and
 * fallbacks are inline_cnn.c's (ocl_inline_begin_drained: outstanding work finishes first;
 * GPUs, TORCH_FL_OPENCL_INLINE=0, kernel profiling and buffers without host memory keep the
 * OpenCL kernels of pool.cl / upsample.cl). float16 / bfloat16 operands run through float32
 * shadows, widened after the drain and rounded back once (inline_cnn.c, ocl_f32_*).
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"
#include "resample.h"

/* Split the planes over PyTorch's OpenMP team only when it is worth waking it. */
#define POOL_PARALLEL_WORK ((int64_t)1 << 15)

/* One side's planes: host address of element 0, element strides over (n, c, h, w); a side of
 * 3-d upsampling holds [D, H, W] volumes (depth stride sd; else D = 1). */
typedef struct {
  float* p;
  const int64_t* s;
  int64_t C, H, W;
  int64_t D, sd;
} planes_of;

static float* plane_at(const planes_of* v, int64_t b) { return v->p + (b / v->C) * v->s[0] + (b % v->C) * v->s[1]; }
static int rows_dense(const planes_of* v) {
  return v->s[3] == 1 && (v->s[2] == v->W || v->H == 1) && (v->D == 1 || v->sd == v->H * v->W);
}

/* Plane (volume) b into dst[D][H][W] (gather) or from src[D][H][W] back (scatter). */
static void plane_copy(const planes_of* v, int64_t b, float* dense, int to_dense) {
  float* q = plane_at(v, b);
  for (int64_t z = 0; z < v->D; z++)
    for (int64_t h = 0; h < v->H; h++)
      for (int64_t w = 0; w < v->W; w++) {
        float* e = q + z * v->sd + h * v->s[2] + w * v->s[3];
        float* f = dense + (z * v->H + h) * v->W + w;
        if (to_dense) *f = *e;
        else *e = *f;
      }
}

/* One plane: forward reads big (x) and writes small (y); backward adds small's gradient
 * into big (zeroed first). */
typedef void (*plane_body)(const void* job, float* big, float* small, int backward);

static void avg_body(const void* job, float* big, float* small, int backward) {
  if (backward) ral_avg_pool_plane_backward(job, big, small);
  else ral_avg_pool_plane(job, big, small);
}

static void up_body(const void* job, float* big, float* small, int backward) {
  if (backward) ral_upsample_plane_backward(job, big, small);
  else ral_upsample_plane(job, big, small);
}

/* One channels_last sample ([H][W][C] and [OH][OW][C]), as plane_body. */
typedef void (*sample_body)(const void* job, int64_t C, float* big, float* small, int backward);

static void avg_sample(const void* job, int64_t C, float* big, float* small, int backward) {
  if (backward) ral_avg_pool_cl_backward(job, C, big, small);
  else ral_avg_pool_cl(job, C, big, small);
}

static void up_sample(const void* job, int64_t C, float* big, float* small, int backward) {
  if (backward) ral_upsample_cl_backward(job, C, big, small);
  else ral_upsample_cl(job, C, big, small);
}

/* Whether v's samples are dense channels_last [H][W][C] blocks (any sample stride). */
static int channels_last(const planes_of* v) {
  return v->C > 1 && v->s[1] == 1 && v->s[3] == v->C && (v->s[2] == v->W * v->C || v->H == 1);
}

/* body over the N = B / C channels_last samples, one task each (the stream drained). */
static int run_samples(int64_t B, planes_of* big, planes_of* small, int backward, sample_body body,
                       const void* job) {
  int64_t C = big->C, N = B / C, hwc = big->H * big->W * C, ohwc = small->H * small->W * C;
#pragma omp parallel for schedule(static) if (N > 1 && N * (hwc + ohwc) >= POOL_PARALLEL_WORK)
  for (int64_t n = 0; n < N; n++) {
    float *pb = big->p + n * big->s[0], *ps = small->p + n * small->s[0];
    if (backward) memset(pb, 0, (size_t)hwc * sizeof(float));
    body(job, C, pb, ps, backward);
  }
  return 1;
}

/* body over B planes of big and small on PyTorch's OpenMP team (the stream drained); 0
 * (nothing done: queue the command) when there is no scratch. */
static int run_planes(int64_t B, planes_of* big, planes_of* small, int backward, plane_body body,
                      const void* job) {
  int64_t hw = big->D * big->H * big->W, ohw = small->D * small->H * small->W;
  int dense_big = rows_dense(big), dense_small = rows_dense(small);
  int team = omp_get_max_threads();
  float* scratch = NULL;
  if (!dense_big || !dense_small) {
    scratch = malloc((size_t)team * (size_t)(hw + ohw) * sizeof(float));
    if (!scratch) return 0;
  }
#pragma omp parallel for schedule(static) num_threads(team) if (B * (hw + ohw) >= POOL_PARALLEL_WORK)
  for (int64_t b = 0; b < B; b++) {
    float* mine = scratch ? scratch + (size_t)omp_get_thread_num() * (size_t)(hw + ohw) : NULL;
    float* pb = dense_big ? plane_at(big, b) : mine;
    float* ps = dense_small ? plane_at(small, b) : mine + hw;
    if (backward) { /* grad_input written, grad_output read */
      memset(pb, 0, (size_t)hw * sizeof(float));
      if (!dense_small) plane_copy(small, b, ps, 1);
    } else if (!dense_big) {
      plane_copy(big, b, pb, 1);
    }
    body(job, pb, ps, backward);
    if (backward && !dense_big) plane_copy(big, b, pb, 0);
    if (!backward && !dense_small) plane_copy(small, b, ps, 0);
  }
  free(scratch);
  return 1;
}

/* big and small with float32 host memory (their own, or float16/bfloat16 widened into
 * shadows: inline_cnn.c's ocl_f32_*) as plane views, or 0 with nothing open. */
typedef struct {
  ocl_f32_view big, small;
  planes_of pb, ps;
} pool_host;

static int host_planes(const ral_kernel_call* c, const ral_tensor* big, const ral_tensor* small, int64_t C,
                       const int64_t* xs, const int64_t* ys, int64_t H, int64_t W, int64_t OH, int64_t OW,
                       pool_host* h) {
  if (!c->stream || !c->stream->inl || !ocl_f32_open(big, &h->big)) return 0;
  if (!ocl_f32_open(small, &h->small)) {
    ocl_f32_close(&h->big);
    return 0;
  }
  h->pb = (planes_of){h->big.f, xs, C, H, W, 1, 0};
  h->ps = (planes_of){h->small.f, ys, C, OH, OW, 1, 0};
  return 1;
}

/* Runs the planes (or channels_last samples) with the stream drained: the read side widened
 * first, the written side rounded back after; the views closed. 0: queue the command. */
static int run_host(const ral_kernel_call* c, pool_host* h, int64_t B, int backward, int cl, plane_body pbody,
                    sample_body sbody, const void* job) {
  int done = ocl_inline_begin_drained(c->stream);
  if (done) {
    ocl_f32_load(backward ? &h->small : &h->big);
    done = cl ? run_samples(B, &h->pb, &h->ps, backward, sbody, job)
              : run_planes(B, &h->pb, &h->ps, backward, pbody, job);
    if (done) ocl_f32_store(backward ? &h->big : &h->small);
    ocl_inline_end(c->stream);
  }
  ocl_f32_close(&h->big);
  ocl_f32_close(&h->small);
  if (done) ocl_count(OCL_CNT_inline_ops);
  return done;
}

int ocl_inline_avgpool(const ral_kernel_call* c, const ocl_pool* g, const ral_tensor* big, const ral_tensor* small,
                       int backward) {
  pool_host h;
  if (!host_planes(c, big, small, g->C, g->xs, g->ys, g->H, g->W, g->OH, g->OW, &h)) return 0;
  ral_avg_pool a = {.H = g->H, .W = g->W, .OH = g->OH, .OW = g->OW, .kh = g->kh, .kw = g->kw, .sh = g->sh,
                    .sw = g->sw, .ph = g->ph, .pw = g->pw, .divisor = g->divisor,
                    .count_include_pad = g->count_include_pad, .adaptive = g->adaptive};
  int cl = channels_last(&h.pb) && channels_last(&h.ps);
  return run_host(c, &h, g->B, backward, cl, avg_body, avg_sample, &a);
}

int ocl_inline_upsample(const ral_kernel_call* c, const ocl_upsample* g, const ral_tensor* big,
                        const ral_tensor* small, int backward) {
  pool_host h;
  if (!host_planes(c, big, small, g->C, g->xs, g->ys, g->H, g->W, g->OH, g->OW, &h)) return 0;
  h.pb.D = g->D, h.pb.sd = g->xsd, h.ps.D = g->OD, h.ps.sd = g->ysd; /* 2-d: D = 1 */
  /* the tables from the steps upsample.c computed: the scale of a nearest axis is its step,
   * and a linear axis's step is ral_up_linear_step of its scale (align_corners ignores it) */
  ral_upsample u = {.H = g->H, .W = g->W, .OH = g->OH, .OW = g->OW, .linear = g->linear, .exact = g->exact,
                    .one_d = g->one_d, .cubic = g->cubic, .D = g->D, .OD = g->OD, .three_d = g->three_d};
  /* bicubic and 3-d have plane (volume) forms only */
  int cl = !g->cubic && !g->three_d && channels_last(&h.pb) && channels_last(&h.ps);
  int done = 0;
  if (ral_upsample_tables(&u, g->align, g->step_d, g->step_h, g->step_w)) /* else the queued kernels */
    done = run_host(c, &h, g->B, backward, cl, up_body, up_sample, &u);
  else
    ocl_f32_close(&h.big), ocl_f32_close(&h.small);
  ral_upsample_free(&u);
  return done;
}

/* ---------------------------------------------------------------- 3-d pooling */
/* Volume b's element 0 of an operand with strides s over (n, c, d, h, w). */
static size_t volume_at(const ocl_pool3* g, const int64_t* s, int64_t b) {
  return (size_t)((b / g->C) * s[0] + (b % g->C) * s[1]);
}

int ocl_inline_pool3(const ral_kernel_call* c, const ocl_pool3* g, const ral_tensor* big, const ral_tensor* idx,
                     const ral_tensor* small, int backward, ral_status* st) {
  if (!c->stream || !c->stream->inl) return 0;
  int64_t* pi = idx ? ocl_tensor_host(idx) : NULL;
  ocl_f32_view vb, vs;
  if ((idx && !pi) || !ocl_f32_open(big, &vb)) return 0;
  if (!ocl_f32_open(small, &vs) || !ocl_inline_begin_drained(c->stream)) {
    ocl_f32_close(&vb);
    ocl_f32_close(&vs);
    return 0;
  }
  float *pb = vb.f, *ps = vs.f;
  ral_pool3 v = {.divisor = g->divisor, .count_include_pad = g->count_include_pad, .adaptive = g->adaptive};
  for (int a = 0; a < 3; a++)
    v.in[a] = g->I[a], v.out[a] = g->O[a], v.k[a] = g->k[a], v.s[a] = g->s[a], v.p[a] = g->p[a], v.dil[a] = g->d[a];
  const int64_t *xs = g->xs + 2, *ys = g->ys + 2, *is = g->is + 2; /* (d, h, w) strides */
  int64_t work = g->B * (v.in[0] * v.in[1] * v.in[2] + v.out[0] * v.out[1] * v.out[2]), bad = 0;
  *st = RAL_OK;
  if (idx && backward) /* checked before anything is written: the queued kernel records the same fault */
    for (int64_t b = 0; b < g->B; b++)
      if (ral_max_pool3_bad_index(&v, pi + volume_at(g, g->is, b), is, &bad)) {
        ocl_inline_end(c->stream);
        ocl_f32_close(&vb);
        ocl_f32_close(&vs);
        *st = ocl_index_error(g->adaptive ? OCL_SITE_ADAPTIVE_MAX_POOL3D_BACKWARD : OCL_SITE_MAX_POOL3D_BACKWARD,
                              (long long)bad, 0,
                              (long long)(v.in[0] * v.in[1] * v.in[2]), 0);
        return 1;
      }
  ocl_f32_load(backward ? &vs : &vb);
#pragma omp parallel for schedule(static) if (work >= POOL_PARALLEL_WORK)
  for (int64_t b = 0; b < g->B; b++) {
    float *x = pb + volume_at(g, g->xs, b), *y = ps + volume_at(g, g->ys, b);
    int64_t* ix = idx ? pi + volume_at(g, g->is, b) : NULL;
    if (idx && backward) ral_max_pool3_volume_backward(&v, x, xs, y, ys, ix, is);
    else if (idx) ral_max_pool3_volume(&v, x, xs, y, ys, ix, is);
    else if (backward) ral_avg_pool3_volume_backward(&v, x, xs, y, ys);
    else ral_avg_pool3_volume(&v, x, xs, y, ys);
  }
  ocl_f32_store(backward ? &vb : &vs);
  ocl_inline_end(c->stream);
  ocl_f32_close(&vb);
  ocl_f32_close(&vs);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}
