/*
 * inline_cnn.c -- convolution (on oneDNN), batch norm and 2-d max pooling, forward and
 * backward, run on the calling thread over the buffers' host memory, for CPU runtimes whose
 * buffers are host memory (PoCL; inline.c says when a device qualifies).
 *
 * Why: PoCL runs the plugin's OpenCL CNN kernels (conv.c, bn.c, pool.c) correctly but about
 * 3-4x slower than PyTorch's CPU kernels on the same cores (im2col + a portable GEMM, one
 * work-item per channel for the batch-norm statistics), while the data is already host
 * memory. Here the convolutions run on oneDNN through the glue the host plugin uses
 * (plugins/common/dnnl_conv.c: the kernels PyTorch's CPU convolution runs), and batch norm and
 * pooling are C loops split over channels / planes on PyTorch's OpenMP team (the caller's own
 * omp_get_max_threads(), what torch.set_num_threads sets), as PyTorch's CPU kernels are.
 *
 * Ordering: these commands are big, so unlike inline_ops.c they do not fall back to queueing
 * when work is outstanding on the stream: ocl_inline_begin_drained waits for it (a finish)
 * and then holds the stream's inl_mu while the kernel runs, exactly as a small inline command
 * does (nothing queued after it starts before it ends). A stream whose queued work failed, a
 * GPU, TORCH_FL_OPENCL_INLINE=0 and kernel profiling keep the OpenCL kernels, as does every
 * call these loops do not cover (other dtypes, a buffer without host memory; convolutions
 * oneDNN declines: transposed, no libdnnl, TORCH_FL_OPENCL_DNNL=0).
 *
 * float16 / bfloat16: every loop here (and inline_pool.c's, rnn.c's) computes in float32. A
 * half operand is widened into a float32 shadow with its own sizes and strides after the
 * stream drained, and an output's shadow is rounded back once at the end (ocl_f32_*): the
 * float32 result rounded once, which is what PyTorch's CPU kernels for these types give
 * (they compute in float and store once). Convolutions first go to oneDNN on the operands
 * themselves: its bfloat16 primitives where the CPU has the instructions (PyTorch's CPU
 * bfloat16 convolution is the same library's, accumulating in float32 and rounding once);
 * where oneDNN declines the type (reference code, or float16 in oneDNN 2.6) the shadows
 * and its float32 primitive.
 */
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"
#include "ral_half.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CNN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CNN_VECTOR_CLONES
#endif

/* Split a loop over PyTorch's OpenMP team only when it is worth waking it. */
#define CNN_PARALLEL_WORK ((int64_t)1 << 15)

/* Host address of a tensor's first element, with every element it reaches inside its
 * buffer; NULL when the buffer has no host memory (or the view leaves it: the queued
 * path then reports the error). */
void* ocl_tensor_host(const ral_tensor* t) {
  if (!t || !t->data) return NULL;
  int64_t last = 0;
  for (int d = 0; d < t->ndim; d++) {
    if (t->sizes[d] == 0) return NULL;
    if (t->strides[d] < 0) return NULL;
    last += (t->sizes[d] - 1) * t->strides[d];
  }
  int64_t es = ocl_dtype_size(t->dtype);
  return ocl_host_span(t->data, t->byte_offset, (uint64_t)((last + 1) * es));
}

/* ---------------------------------------------------------------- float32 shadows */
/* Shadows are reused per thread: a fresh multi-megabyte malloc is an mmap whose pages fault
 * on first touch (as long as the conversion itself for a [32, 32, 32, 32] batch norm). Each
 * thread keeps up to SHADOW_SLOTS freed blocks, SHADOW_KEEP bytes in all; the cache is freed
 * when the thread ends. */
#define SHADOW_SLOTS 8
#define SHADOW_KEEP ((size_t)256 << 20)
typedef struct {
  float* p[SHADOW_SLOTS];
  size_t cap[SHADOW_SLOTS];
} shadow_cache;
static pthread_key_t g_shadow_key;
static pthread_once_t g_shadow_once = PTHREAD_ONCE_INIT;

static void shadow_cache_free(void* arg) {
  shadow_cache* sc = arg;
  for (int i = 0; i < SHADOW_SLOTS; i++) free(sc->p[i]);
  free(sc);
}

static void shadow_key_init(void) { pthread_key_create(&g_shadow_key, shadow_cache_free); }

static shadow_cache* shadow_cache_of_thread(void) {
  pthread_once(&g_shadow_once, shadow_key_init);
  shadow_cache* sc = pthread_getspecific(g_shadow_key);
  if (!sc && (sc = calloc(1, sizeof *sc)) && pthread_setspecific(g_shadow_key, sc) != 0) {
    free(sc);
    sc = NULL;
  }
  return sc;
}

/* The smallest cached block of at least `bytes`, else a new one; its capacity in *cap. */
static float* shadow_get(size_t bytes, size_t* cap) {
  shadow_cache* sc = shadow_cache_of_thread();
  int best = -1;
  for (int i = 0; sc && i < SHADOW_SLOTS; i++)
    if (sc->p[i] && sc->cap[i] >= bytes && (best < 0 || sc->cap[i] < sc->cap[best])) best = i;
  if (best >= 0) {
    float* p = sc->p[best];
    *cap = sc->cap[best];
    sc->p[best] = NULL;
    return p;
  }
  *cap = bytes;
  return malloc(bytes);
}

/* Back to the thread's cache, in an empty slot or in place of the smallest cached block when
 * that one is smaller, within SHADOW_KEEP bytes; else freed. */
static void shadow_put(float* p, size_t cap) {
  shadow_cache* sc = p ? shadow_cache_of_thread() : NULL;
  if (!sc) {
    free(p);
    return;
  }
  int slot = 0;
  size_t kept = 0;
  for (int i = 0; i < SHADOW_SLOTS; i++) {
    kept += sc->p[i] ? sc->cap[i] : 0;
    if (sc->p[slot] && (!sc->p[i] || sc->cap[i] < sc->cap[slot])) slot = i;
  }
  size_t evicted = sc->p[slot] ? sc->cap[slot] : 0;
  if ((sc->p[slot] && evicted >= cap) || kept - evicted + cap > SHADOW_KEEP) {
    free(p);
    return;
  }
  free(sc->p[slot]);
  sc->p[slot] = p;
  sc->cap[slot] = cap;
}

int ocl_f32_open(const ral_tensor* t, ocl_f32_view* v) {
  memset(v, 0, sizeof *v);
  if (!t) return 1;
  v->t = t;
  if (!ocl_cnn_dtype(t->dtype) || !(v->raw = ocl_tensor_host(t))) return 0;
  if (t->dtype == RAL_DTYPE_FLOAT32) {
    v->f = v->raw;
    return 1;
  }
  int64_t span = 1; /* the shadow mirrors the operand's strides: one float per element offset */
  for (int d = 0; d < t->ndim; d++) span += (t->sizes[d] - 1) * t->strides[d];
  v->f = shadow_get((size_t)span * sizeof(float), &v->cap);
  v->own = 1;
  return v->f != NULL;
}

/* Element offsets of row r of t seen as [rows, last dim]: the first element's offset. */
static int64_t row_offset(const ral_tensor* t, int64_t r) {
  int64_t off = 0;
  for (int d = t->ndim - 2; d >= 0; d--) {
    off += (r % t->sizes[d]) * t->strides[d];
    r /= t->sizes[d];
  }
  return off;
}

/* n contiguous 16-bit values <-> float. ral_half.h is branch-free, so these vectorize once the
 * cost model may add a scalar epilogue (the plugin builds at -O2, whose "very cheap" model
 * keeps them scalar: 1.7 ms per million bfloat16 results, about 8x the vector loop). */
#if defined(__GNUC__) && !defined(__clang__)
#define CNN_VECTORIZE __attribute__((optimize("tree-loop-vectorize", "vect-cost-model=dynamic")))
#else
#define CNN_VECTORIZE
#endif
CNN_VECTOR_CLONES CNN_VECTORIZE static void widen_run(float* restrict d, const uint16_t* restrict s, int bf, int64_t n) {
  if (bf)
    for (int64_t i = 0; i < n; i++) d[i] = ral_bf2f(s[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = ral_h2f(s[i]);
}

CNN_VECTOR_CLONES CNN_VECTORIZE static void round_run(uint16_t* restrict d, const float* restrict s, int bf, int64_t n) {
  if (bf)
    for (int64_t i = 0; i < n; i++) d[i] = ral_f2bf(s[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = ral_f2h(s[i]);
}

/* Elements of t when its elements fill [0, numel) exactly (contiguous in some dim order:
 * NCHW, channels_last), else 0. Sizes 1 and 0 dims aside, sorted strides must be 1, s0, s0*s1.. */
static int64_t dense_numel(const ral_tensor* t) {
  int64_t size[RAL_MAX_RANK], stride[RAL_MAX_RANK], n = 0, numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    numel *= t->sizes[d];
    if (t->sizes[d] == 1) continue;
    int64_t k = n++; /* insertion by stride */
    for (; k > 0 && stride[k - 1] > t->strides[d]; k--) {
      size[k] = size[k - 1];
      stride[k] = stride[k - 1];
    }
    size[k] = t->sizes[d];
    stride[k] = t->strides[d];
  }
  int64_t want = 1;
  for (int64_t k = 0; k < n; k++) {
    if (stride[k] != want) return 0;
    want *= size[k];
  }
  return numel;
}

/* Widen (to_f32) or round back every element t reaches, between its memory and the shadow. */
static void f32_convert(const ocl_f32_view* v, int to_f32) {
  const ral_tensor* t = v->t;
  uint16_t* h = v->raw;
  int bf = t->dtype == RAL_DTYPE_BFLOAT16;
  int64_t dense = dense_numel(t);
  if (dense) { /* one linear run in blocks over the team, whatever the dim order */
    const int64_t blk = 1 << 14;
#pragma omp parallel for schedule(static) if (dense >= CNN_PARALLEL_WORK)
    for (int64_t b0 = 0; b0 < dense; b0 += blk) {
      int64_t len = dense - b0 < blk ? dense - b0 : blk;
      if (to_f32) widen_run(v->f + b0, h + b0, bf, len);
      else round_run(h + b0, v->f + b0, bf, len);
    }
    return;
  }
  int64_t n = t->ndim ? t->sizes[t->ndim - 1] : 1, st = t->ndim ? t->strides[t->ndim - 1] : 0, rows = 1;
  for (int d = 0; d + 1 < t->ndim; d++) rows *= t->sizes[d];
#pragma omp parallel for schedule(static) if (rows * n >= CNN_PARALLEL_WORK)
  for (int64_t r = 0; r < rows; r++) {
    int64_t o = row_offset(t, r);
    if (st == 1) { /* unit stride: the loops below vectorize */
      if (to_f32) widen_run(v->f + o, h + o, bf, n);
      else round_run(h + o, v->f + o, bf, n);
      continue;
    }
    for (int64_t i = 0; i < n; i++, o += st) {
      if (to_f32) v->f[o] = bf ? ral_bf2f(h[o]) : ral_h2f(h[o]);
      else h[o] = bf ? ral_f2bf(v->f[o]) : ral_f2h(v->f[o]);
    }
  }
}

void ocl_f32_load(const ocl_f32_view* v) {
  if (v->own) f32_convert(v, 1);
}

void ocl_f32_store(const ocl_f32_view* v) {
  if (v->own) f32_convert(v, 0);
}

void ocl_f32_close(ocl_f32_view* v) {
  if (v->own) shadow_put(v->f, v->cap);
  memset(v, 0, sizeof *v);
}

/* Opens n operands (NULL entries stay empty); 0, with all closed, if one cannot be. */
static int f32_open_all(const ral_tensor* const* t, ocl_f32_view* v, int n) {
  for (int i = 0; i < n; i++)
    if (!ocl_f32_open(t[i], &v[i])) {
      for (int k = 0; k <= i; k++) ocl_f32_close(&v[k]);
      return 0;
    }
  return 1;
}

/* ---------------------------------------------------------------- convolution */
/* The call on oneDNN over float32 shadows of 16-bit operands (the operands' own memory for
 * float32 ones), outputs rounded back once: for a 16-bit call oneDNN declines natively. Runs
 * with the stream drained and held (the caller's ocl_inline_begin_drained). */
static int conv_through_shadows(ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* const t[],
                                const int is_out[]) {
  ocl_f32_view v[RAL_DNNL_N_OPERANDS];
  if (!f32_open_all(t, v, RAL_DNNL_N_OPERANDS)) return RAL_DNNL_DECLINED;
  ral_tensor tf[RAL_DNNL_N_OPERANDS];
  const ral_tensor* td[RAL_DNNL_N_OPERANDS] = {0};
  void* host[RAL_DNNL_N_OPERANDS] = {0};
  for (int i = 0; i < RAL_DNNL_N_OPERANDS; i++) {
    if (!t[i]) continue;
    tf[i] = *t[i];
    tf[i].dtype = RAL_DTYPE_FLOAT32;
    td[i] = &tf[i];
    host[i] = v[i].f;
    if (!is_out[i]) ocl_f32_load(&v[i]);
  }
  int r = ral_dnnl_conv(kind, g, td, host, omp_get_max_threads());
  if (r == RAL_DNNL_DONE)
    for (int i = 0; i < RAL_DNNL_N_OPERANDS; i++)
      if (is_out[i]) ocl_f32_store(&v[i]);
  for (int i = 0; i < RAL_DNNL_N_OPERANDS; i++) ocl_f32_close(&v[i]);
  return r;
}

int ocl_inline_conv(const ral_kernel_call* c, ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* x,
                    const ral_tensor* w, const ral_tensor* bias, const ral_tensor* y, ral_status* st) {
  if (!c->stream || !c->stream->inl || !ral_dnnl_available()) return 0;
  const ral_tensor* t[RAL_DNNL_N_OPERANDS] = {x, w, bias, y};
  void* host[RAL_DNNL_N_OPERANDS] = {0};
  for (int i = 0; i < RAL_DNNL_N_OPERANDS; i++)
    if (t[i] && !(ocl_cnn_dtype(t[i]->dtype) && (host[i] = ocl_tensor_host(t[i])))) return 0;
  int is_out[RAL_DNNL_N_OPERANDS] = {[RAL_DNNL_X] = kind == RAL_DNNL_BACKWARD_DATA,
                                     [RAL_DNNL_W] = kind == RAL_DNNL_BACKWARD_WEIGHTS,
                                     [RAL_DNNL_BIAS] = kind == RAL_DNNL_BACKWARD_WEIGHTS,
                                     [RAL_DNNL_Y] = kind == RAL_DNNL_FORWARD};
  if (!ocl_inline_begin_drained(c->stream)) return 0;
  /* oneDNN on the operands' own memory, whatever their dtype: its bf16/f16 primitives where
   * the CPU has them (PyTorch's CPU convolution for these types is the same library's) */
  int r = ral_dnnl_conv(kind, g, t, host, omp_get_max_threads());
  if (r == RAL_DNNL_DECLINED && x->dtype != RAL_DTYPE_FLOAT32) r = conv_through_shadows(kind, g, t, is_out);
  ocl_inline_end(c->stream);
  if (r == RAL_DNNL_DECLINED) return 0;
  ocl_count(OCL_CNT_inline_ops);
  *st = r == RAL_DNNL_DONE ? RAL_OK : ocl_fail(c, RAL_ERROR_INTERNAL, "oneDNN convolution failed");
  return 1;
}

/* ---------------------------------------------------------------- batch norm */
/* Row sums in 16 float lanes (one vector register with AVX-512), each block of 512 elements
 * flushed into double, so long rows keep double's accuracy at float's speed. */
typedef float cnn_v16 __attribute__((vector_size(64), aligned(4)));
#define CNN_BLOCK 512

static inline float v16_sum(cnn_v16 v) {
  float t = 0;
  for (int k = 0; k < 16; k++) t += v[k];
  return t;
}

/* s1 = sum of a[i] - m, s2 = sum of (a[i] - m)^2: the statistics pass. */
CNN_VECTOR_CLONES static void bn_row_moments(const float* a, int64_t n, float m, double* s1, double* s2) {
  double d1 = 0, d2 = 0;
  for (int64_t b0 = 0; b0 < n; b0 += CNN_BLOCK) {
    int64_t e = b0 + CNN_BLOCK < n ? b0 + CNN_BLOCK : n, i = b0;
    cnn_v16 l1 = {0}, l2 = {0};
    for (; i + 16 <= e; i += 16) {
      cnn_v16 d = *(const cnn_v16*)(a + i) - m;
      l1 += d;
      l2 += d * d;
    }
    float t1 = v16_sum(l1), t2 = v16_sum(l2);
    for (; i < e; i++) {
      float d = a[i] - m;
      t1 += d;
      t2 += d * d;
    }
    d1 += t1;
    d2 += t2;
  }
  *s1 = d1;
  *s2 = d2;
}

/* s1 = sum of g[i], s2 = sum of g[i] * (x[i] - m): the backward's pass. */
CNN_VECTOR_CLONES static void bn_row_grad_sums(const float* x, const float* g, int64_t n, float m, double* s1,
                                               double* s2) {
  double d1 = 0, d2 = 0;
  for (int64_t b0 = 0; b0 < n; b0 += CNN_BLOCK) {
    int64_t e = b0 + CNN_BLOCK < n ? b0 + CNN_BLOCK : n, i = b0;
    cnn_v16 l1 = {0}, l2 = {0};
    for (; i + 16 <= e; i += 16) {
      cnn_v16 gv = *(const cnn_v16*)(g + i);
      l1 += gv;
      l2 += gv * (*(const cnn_v16*)(x + i) - m);
    }
    float t1 = v16_sum(l1), t2 = v16_sum(l2);
    for (; i < e; i++) {
      t1 += g[i];
      t2 += g[i] * (x[i] - m);
    }
    d1 += t1;
    d2 += t2;
  }
  *s1 = d1;
  *s2 = d2;
}

/* out[i] = ka * a[i] + kb * (b[i] - m) + k0, the backward's apply pass; b NULL: ka * a[i] + k0,
 * the forward's (no 0 * b term, which would turn an infinite input into NaN). */
CNN_VECTOR_CLONES static void bn_row_apply(float* out, const float* a, const float* b, int64_t n, float ka, float kb,
                                           float m, float k0) {
  if (!b)
    for (int64_t i = 0; i < n; i++) out[i] = ka * a[i] + k0;
  else
    for (int64_t i = 0; i < n; i++) out[i] = ka * a[i] + kb * (b[i] - m) + k0;
}

static void bn_forward(const ocl_bn* g, float* const p[BN_N]) {
  int64_t N = g->N, C = g->C, S = g->S;
  double cnt = (double)(N * S);
#pragma omp parallel for schedule(dynamic, 1) if (N * C * S >= CNN_PARALLEL_WORK)
  for (int64_t c = 0; c < C; c++) {
    double mean, var, d1, d2;
    if (!g->training) {
      mean = p[BN_RM][c];
      var = p[BN_RV][c];
    } else { /* two passes: no cancellation in E[x^2] - E[x]^2; the first one shifted by the
              * channel's first element, which keeps the float lane sums small */
      double s = 0, q = 0;
      float shift = cnt > 0 ? p[BN_X][c * S] : 0.0f;
      for (int64_t n = 0; n < N; n++) {
        bn_row_moments(p[BN_X] + (n * C + c) * S, S, shift, &d1, &d2);
        s += d1;
      }
      mean = cnt > 0 ? shift + s / cnt : 0.0;
      for (int64_t n = 0; n < N; n++) {
        bn_row_moments(p[BN_X] + (n * C + c) * S, S, (float)mean, &d1, &d2);
        q += d2;
      }
      var = cnt > 0 ? q / cnt : 0.0;
    }
    double invstd = 1.0 / sqrt(var + (double)g->eps);
    double scale = (p[BN_W] ? p[BN_W][c] : 1.0) * invstd, shift = (p[BN_B] ? p[BN_B][c] : 0.0) - mean * scale;
    for (int64_t n = 0; n < N; n++)
      bn_row_apply(p[BN_Y] + (n * C + c) * S, p[BN_X] + (n * C + c) * S, NULL, S, (float)scale, 0.0f, 0.0f,
                   (float)shift);
    if (g->training) {
      double m = g->momentum;
      if (p[BN_SM]) p[BN_SM][c] = (float)mean;
      if (p[BN_SI]) p[BN_SI][c] = (float)invstd;
      if (p[BN_RM]) p[BN_RM][c] = (float)((1 - m) * p[BN_RM][c] + m * mean);
      if (p[BN_RV]) p[BN_RV][c] = (float)((1 - m) * p[BN_RV][c] + m * (cnt > 1 ? var * cnt / (cnt - 1) : var));
    }
  }
}

static void bn_backward(const ocl_bn* g, float* const p[BN_N]) {
  int64_t N = g->N, C = g->C, S = g->S;
  double cnt = (double)(N * S);
#pragma omp parallel for schedule(dynamic, 1) if (N * C * S >= CNN_PARALLEL_WORK)
  for (int64_t c = 0; c < C; c++) {
    double mean, invstd, sg = 0, sgd = 0, d1, d2;
    if (g->training) {
      mean = p[BN_SM][c];
      invstd = p[BN_SI][c];
    } else {
      mean = p[BN_RM][c];
      invstd = 1.0 / sqrt((double)p[BN_RV][c] + (double)g->eps);
    }
    for (int64_t n = 0; n < N; n++) { /* sum of grad and of grad * (x - mean) */
      bn_row_grad_sums(p[BN_X] + (n * C + c) * S, p[BN_G] + (n * C + c) * S, S, (float)mean, &d1, &d2);
      sg += d1;
      sgd += d2;
    }
    double sgx = sgd * invstd; /* sum of grad * xhat: grad_weight */
    if (p[BN_GW]) p[BN_GW][c] = (float)sgx;
    if (p[BN_GB]) p[BN_GB][c] = (float)sg;
    if (!p[BN_Y]) continue;
    double k = (p[BN_W] ? p[BN_W][c] : 1.0) * invstd;
    double mg = g->training && cnt > 0 ? sg / cnt : 0.0, mgx = g->training && cnt > 0 ? sgx / cnt : 0.0;
    /* gi = k * (g - mg - xhat * mgx) = k * g - k * invstd * mgx * (x - mean) - k * mg */
    for (int64_t n = 0; n < N; n++)
      bn_row_apply(p[BN_Y] + (n * C + c) * S, p[BN_G] + (n * C + c) * S, p[BN_X] + (n * C + c) * S, S, (float)k,
                   (float)(-k * invstd * mgx), (float)mean, (float)(-k * mg));
  }
}

int ocl_inline_bn(const ral_kernel_call* c, const ocl_bn* g, const ral_tensor* const ts[BN_N], int backward) {
  if (!c->stream || !c->stream->inl) return 0;
  ocl_f32_view v[BN_N];
  if (!f32_open_all(ts, v, BN_N)) return 0;
  float* p[BN_N];
  for (int i = 0; i < BN_N; i++) p[i] = v[i].f;
  int ok = p[BN_X] && (backward ? p[BN_G] && (g->training ? p[BN_SM] && p[BN_SI] : p[BN_RM] && p[BN_RV])
                                : p[BN_Y] && (g->training || (p[BN_RM] && p[BN_RV])));
  if (ok && (ok = ocl_inline_begin_drained(c->stream))) {
    /* the slots each direction writes; the others are read (running stats: both) */
    static const int fwd_out[BN_N] = {[BN_Y] = 1, [BN_SM] = 1, [BN_SI] = 1, [BN_RM] = 1, [BN_RV] = 1};
    static const int bwd_out[BN_N] = {[BN_Y] = 1, [BN_GW] = 1, [BN_GB] = 1};
    const int* out = backward ? bwd_out : fwd_out;
    for (int i = 0; i < BN_N; i++)
      if (!out[i] || i == BN_RM || i == BN_RV) ocl_f32_load(&v[i]);
    if (backward) bn_backward(g, p);
    else bn_forward(g, p);
    for (int i = 0; i < BN_N; i++)
      if (out[i] && (g->training || (i != BN_RM && i != BN_RV))) ocl_f32_store(&v[i]);
    ocl_inline_end(c->stream);
    ocl_count(OCL_CNT_inline_ops);
  }
  for (int i = 0; i < BN_N; i++) ocl_f32_close(&v[i]);
  return ok;
}

/* ---------------------------------------------------------------- 2-d max pooling */
/* One [H, W] plane, each operand with its own (row, column) element strides: x (xh, xw), y
 * (yh, yw), idx (ih_, iw_). The first maximum of each window, NaN winning (ATen CPU's rule,
 * as kernels/pool.cl's maxpool2d_fwd), its index within the plane; adaptive windows
 * (adaptive_max_pool2d, unit dilation) floor(o * I / O) .. ceil((o + 1) * I / O). Called with literal unit
 * column strides for dense planes, so the compiler keeps a contiguous loop for them. */
static inline void pool_plane_fwd(const ocl_pool* g, const float* x, int64_t xh, int64_t xw, float* y, int64_t yh,
                                  int64_t yw, int64_t* idx, int64_t ih_, int64_t iw_) {
  for (int64_t oh = 0; oh < g->OH; oh++) {
    int64_t h0 = oh * g->sh - g->ph, h1 = h0 + (g->kh - 1) * g->dh + 1;
    if (h1 > g->H) h1 = g->H;
    while (h0 < 0) h0 += g->dh;
    if (g->adaptive) h0 = oh * g->H / g->OH, h1 = ((oh + 1) * g->H + g->OH - 1) / g->OH;
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t w0 = ow * g->sw - g->pw, w1 = w0 + (g->kw - 1) * g->dw + 1;
      if (w1 > g->W) w1 = g->W;
      while (w0 < 0) w0 += g->dw;
      if (g->adaptive) w0 = ow * g->W / g->OW, w1 = ((ow + 1) * g->W + g->OW - 1) / g->OW;
      int64_t best = h0 * g->W + w0;
      float m = -INFINITY;
      for (int64_t ih = h0; ih < h1; ih += g->dh)
        for (int64_t iw = w0; iw < w1; iw += g->dw) {
          float v = x[ih * xh + iw * xw];
          if (v > m || isnan(v)) {
            m = v;
            best = ih * g->W + iw;
          }
        }
      y[oh * yh + ow * yw] = m;
      idx[oh * ih_ + ow * iw_] = best;
    }
  }
}

/* One plane's grad_input (strides gh, gw): zero, then each output's gradient (go: gyh, gyw;
 * idx: ih_, iw_) added at its index, in output order (CPU's order of summation); an index
 * outside the plane is skipped, as the queued kernel's gather never matches it. */
static inline void pool_plane_bwd(const ocl_pool* g, float* gi, int64_t gh, int64_t gw, const float* go, int64_t gyh,
                                  int64_t gyw, const int64_t* idx, int64_t ih_, int64_t iw_) {
  int64_t hw = g->H * g->W;
  for (int64_t h = 0; h < g->H; h++)
    for (int64_t w = 0; w < g->W; w++) gi[h * gh + w * gw] = 0.0f;
  for (int64_t oh = 0; oh < g->OH; oh++)
    for (int64_t ow = 0; ow < g->OW; ow++) {
      int64_t i = idx[oh * ih_ + ow * iw_];
      if (i >= 0 && i < hw) gi[(i / g->W) * gh + (i % g->W) * gw] += go[oh * gyh + ow * gyw];
    }
}

/* Whether an operand's planes are row-major and dense (row stride = width, column stride 1). */
static int dense_planes(const int64_t s[4], int64_t w) { return s[3] == 1 && s[2] == w; }

/* Whether a backward's [B, OH, OW] indices hold one outside its plane (the first in *bad): the
 * queued kernel records the same fault; CPU's kernel would write out of bounds. */
static int first_bad_index(const ocl_pool* g, const int64_t* pi, int64_t* bad) {
  int64_t hw = g->H * g->W;
  for (int64_t b = 0; b < g->B; b++)
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t v = pi[OCL_PLANE_AT(0, g->is, g->C, b, oh, ow)];
        if (v < 0 || v >= hw) return *bad = v, 1;
      }
  return 0;
}

int ocl_inline_maxpool(const ral_kernel_call* c, const ocl_pool* g, const ral_tensor* big, const ral_tensor* idx,
                       const ral_tensor* small, int backward, ral_status* st) {
  /* big: x (forward) or grad_input (backward), [B, H, W] with strides g->xs; small: y or
   * grad_output, [B, OH, OW] with g->ys; idx with g->is */
  if (!c->stream || !c->stream->inl || idx->dtype != RAL_DTYPE_INT64) return 0;
  int64_t* pi = ocl_tensor_host(idx);
  ocl_f32_view vb, vs;
  if (!pi || !ocl_f32_open(big, &vb)) return 0;
  if (!ocl_f32_open(small, &vs) || !ocl_inline_begin_drained(c->stream)) {
    ocl_f32_close(&vb);
    ocl_f32_close(&vs);
    return 0;
  }
  float *pb = vb.f, *ps = vs.f;
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW, bad;
  *st = RAL_OK;
  if (backward && first_bad_index(g, pi, &bad)) {
    ocl_inline_end(c->stream);
    ocl_f32_close(&vb);
    ocl_f32_close(&vs);
    *st = ocl_index_error(g->adaptive ? OCL_SITE_ADAPTIVE_MAX_POOL_BACKWARD : OCL_SITE_MAX_POOL_BACKWARD, (long long)bad,
                          0, (long long)hw, 0);
    return 1;
  }
  ocl_f32_load(backward ? &vs : &vb);
  int dense = dense_planes(g->xs, g->W) && dense_planes(g->ys, g->OW) && dense_planes(g->is, g->OW);
#pragma omp parallel for schedule(static) if (g->B * (hw + ohw) >= CNN_PARALLEL_WORK)
  for (int64_t b = 0; b < g->B; b++) {
    float* x = pb + OCL_PLANE_AT(0, g->xs, g->C, b, 0, 0);
    float* y = ps + OCL_PLANE_AT(0, g->ys, g->C, b, 0, 0);
    int64_t* ix = pi + OCL_PLANE_AT(0, g->is, g->C, b, 0, 0);
    if (backward && dense) pool_plane_bwd(g, x, g->W, 1, y, g->OW, 1, ix, g->OW, 1);
    else if (backward) pool_plane_bwd(g, x, g->xs[2], g->xs[3], y, g->ys[2], g->ys[3], ix, g->is[2], g->is[3]);
    else if (dense) pool_plane_fwd(g, x, g->W, 1, y, g->OW, 1, ix, g->OW, 1);
    else pool_plane_fwd(g, x, g->xs[2], g->xs[3], y, g->ys[2], g->ys[3], ix, g->is[2], g->is[3]);
  }
  ocl_f32_store(backward ? &vb : &vs);
  ocl_inline_end(c->stream);
  ocl_f32_close(&vb);
  ocl_f32_close(&vs);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}
