/*
 * inline_ops.c -- the C kernels a small command runs on the calling thread when its stream
 * is idle (inline.c says when): float32 GEMM, sum/mean, and the common float32
 * element-wise ops. Each computes what its OpenCL kernel computes (same formulas, same
 * descriptors: ocl_mmgeom, ocl_rgeom, ocl_geom); sums accumulate in double. Anything else
 * (other dtypes, ops, or work above OCL_INLINE_WORK) is queued as before.
 */
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

/* GCC builds these loops for the best x86 vector unit present (ifunc); PoCL's own kernels
 * are compiled for the host CPU too. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define OCL_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define OCL_VECTOR_CLONES
#endif

/* Host addresses of the call's tensors' buffers, all of them or none (a buffer the
 * plugin made for itself, e.g. a GEMM panel, has none: the command is then queued). */
static int host_all(const ral_tensor* const* ts, int nt, unsigned char** hp) {
  for (int k = 0; k < nt; k++)
    if (!(hp[k] = ocl_host_ptr(ts[k]->data))) return 0;
  return 1;
}

/* ---------------------------------------------------------------- GEMM */
/* Eight float lanes as a GCC vector: each target clone widens it to its own registers. */
typedef float ocl_v8f __attribute__((vector_size(32)));

static inline ocl_v8f load8(const float* p) {
  ocl_v8f v;
  memcpy(&v, p, sizeof v); /* rows carry no alignment promise */
  return v;
}

static inline float lanes_sum(ocl_v8f v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

/* row[j] = a . b_j for j < nn, with a and each b_j (stride sb_n apart) contiguous over K.
 * Four b rows per pass, so each load of a feeds four multiply-adds: nn.Linear's x @ W.t()
 * at 32x64x64 went from ~20 to a few microseconds (the loop of single dot products was
 * bound by its loads and horizontal sums). Inlined into each target clone of gemm_f32. */
__attribute__((always_inline)) static inline void dot_rows(const float* a, const float* b, int64_t sb_n, int64_t K, int64_t nn, float* row) {
  int64_t j = 0;
  for (; j + 4 <= nn; j += 4) {
    const float* b0 = b + j * sb_n;
    const float* b1 = b0 + sb_n;
    const float* b2 = b1 + sb_n;
    const float* b3 = b2 + sb_n;
    ocl_v8f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
      ocl_v8f av = load8(a + k);
      s0 += av * load8(b0 + k);
      s1 += av * load8(b1 + k);
      s2 += av * load8(b2 + k);
      s3 += av * load8(b3 + k);
    }
    float t0 = lanes_sum(s0), t1 = lanes_sum(s1), t2 = lanes_sum(s2), t3 = lanes_sum(s3);
    for (; k < K; k++) {
      t0 += a[k] * b0[k];
      t1 += a[k] * b1[k];
      t2 += a[k] * b2[k];
      t3 += a[k] * b3[k];
    }
    row[j] = t0;
    row[j + 1] = t1;
    row[j + 2] = t2;
    row[j + 3] = t3;
  }
  for (; j < nn; j++) {
    const float* bj = b + j * sb_n;
    ocl_v8f s0 = {0};
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) s0 += load8(a + k) * load8(bj + k);
    float t = lanes_sum(s0);
    for (; k < K; k++) t += a[k] * bj[k];
    row[j] = t;
  }
}

/* Register-blocked product for products of at least BLK_ROWS rows: B (any strides) packed
 * into [K, N rounded up to BLK_COLS] row-major, then each block of BLK_ROWS rows x BLK_COLS
 * columns of C accumulates over K in eight vectors (broadcast a[m, k] times a row of packed
 * B), summing each element in k order. nn.Linear's 32x64x64 took 16 us as dot products of
 * rows, bound by their loads and horizontal sums (the latency loop's largest share on ral:1);
 * here BLK_ROWS rows share each load of B. Eight-lane vectors: every target clone keeps the
 * accumulators in registers (sixteen-lane ones ran 30x slower in the AVX2 and default clones). */
#define BLK_ROWS 4
#define BLK_COLS 16
typedef float ocl_v8f_u __attribute__((vector_size(32), aligned(4))); /* rows carry no alignment promise */

/* Writes one row of a block: alpha * acc (+ beta * the addend) into C's columns [n0, n0 + BLK_COLS) clipped to N. */
__attribute__((always_inline)) static inline void block_store(const ocl_mmgeom* g, float* C, const float* I, int64_t b,
                                                              int64_t m, int64_t n0, ocl_v8f lo, ocl_v8f hi) {
  int64_t nn = g->N - n0 < BLK_COLS ? g->N - n0 : BLK_COLS;
  float* c = C + g->off_c + b * g->sc_b + m * g->sc_m;
  const float* in = g->has_in ? I + g->off_i + b * g->si_b + m * g->si_m : NULL;
  lo *= g->alpha;
  hi *= g->alpha;
  if (nn == BLK_COLS && g->sc_n == 1 && (!in || g->si_n == 1)) { /* a whole row of the block, dense */
    if (in) {
      lo += g->beta * *(const ocl_v8f_u*)(in + n0);
      hi += g->beta * *(const ocl_v8f_u*)(in + n0 + 8);
    }
    *(ocl_v8f_u*)(c + n0) = lo;
    *(ocl_v8f_u*)(c + n0 + 8) = hi;
    return;
  }
  float out[BLK_COLS];
  *(ocl_v8f_u*)out = lo;
  *(ocl_v8f_u*)(out + 8) = hi;
  for (int64_t j = 0; j < nn; j++) {
    float v = out[j];
    /* beta == 0 ignores self entirely (has_in is 0 then), NaNs included */
    if (in) v += g->beta * in[(n0 + j) * g->si_n];
    c[(n0 + j) * g->sc_n] = v;
  }
}

/* BLK_ROWS rows of C from m0 (all present), columns from n0, batch b: eight accumulators. */
__attribute__((always_inline)) static inline void gemm_block4(const ocl_mmgeom* g, float* C, const float* A,
                                                              const float* Bp, int64_t np, const float* I, int64_t b,
                                                              int64_t m0, int64_t n0) {
  ocl_v8f c00 = {0}, c01 = {0}, c10 = {0}, c11 = {0}, c20 = {0}, c21 = {0}, c30 = {0}, c31 = {0};
  const int64_t sm = g->sa_m, sk = g->sa_k, K = g->K;
  const float* a = A + g->off_a + b * g->sa_b + m0 * sm;
  const float* bk = Bp + n0;
  for (int64_t k = 0; k < K; k++, bk += np, a += sk) {
    ocl_v8f b0 = *(const ocl_v8f_u*)bk, b1 = *(const ocl_v8f_u*)(bk + 8);
    float a0 = a[0], a1 = a[sm], a2 = a[2 * sm], a3 = a[3 * sm];
    c00 += a0 * b0;
    c01 += a0 * b1;
    c10 += a1 * b0;
    c11 += a1 * b1;
    c20 += a2 * b0;
    c21 += a2 * b1;
    c30 += a3 * b0;
    c31 += a3 * b1;
  }
  block_store(g, C, I, b, m0, n0, c00, c01);
  block_store(g, C, I, b, m0 + 1, n0, c10, c11);
  block_store(g, C, I, b, m0 + 2, n0, c20, c21);
  block_store(g, C, I, b, m0 + 3, n0, c30, c31);
}

/* One row of C (the rows left below a block), columns from n0. */
__attribute__((always_inline)) static inline void gemm_block1(const ocl_mmgeom* g, float* C, const float* A,
                                                              const float* Bp, int64_t np, const float* I, int64_t b,
                                                              int64_t m, int64_t n0) {
  ocl_v8f c0 = {0}, c1 = {0};
  const float* a = A + g->off_a + b * g->sa_b + m * g->sa_m;
  const float* bk = Bp + n0;
  for (int64_t k = 0; k < g->K; k++, bk += np) {
    float av = a[k * g->sa_k];
    c0 += av * *(const ocl_v8f_u*)bk;
    c1 += av * *(const ocl_v8f_u*)(bk + 8);
  }
  block_store(g, C, I, b, m, n0, c0, c1);
}

/* B's [K, N] block of batch b into bp, row-major with np >= N columns (the rest zero). */
__attribute__((always_inline)) static inline void pack_b(const ocl_mmgeom* g, const float* bb, float* bp, int64_t np) {
  for (int64_t k = 0; k < g->K; k++) memset(bp + k * np + g->N, 0, (size_t)(np - g->N) * sizeof(float));
  if (g->sb_n == 1) { /* rows of B contiguous: copied as they are */
    for (int64_t k = 0; k < g->K; k++) memcpy(bp + k * np, bb + k * g->sb_k, (size_t)g->N * sizeof(float));
    return;
  }
  int64_t j0 = 0;
  for (; j0 + 8 <= g->N; j0 += 8) /* x @ W.t(): 8 rows of W at a time, one vector store per k */
    for (int64_t k = 0; k < g->K; k++) {
      const float* src = bb + j0 * g->sb_n + k * g->sb_k;
      ocl_v8f v = {src[0], src[g->sb_n], src[2 * g->sb_n], src[3 * g->sb_n],
                   src[4 * g->sb_n], src[5 * g->sb_n], src[6 * g->sb_n], src[7 * g->sb_n]};
      *(ocl_v8f_u*)(bp + k * np + j0) = v;
    }
  for (int64_t j = j0; j < g->N; j++)
    for (int64_t k = 0; k < g->K; k++) bp[k * np + j] = bb[j * g->sb_n + k * g->sb_k];
}

/* 0 when the packed copy of B cannot be allocated (the caller takes the row loops). The
 * multiply-adds are fused (this file is built with -std=c11, which leaves them separate). */
OCL_VECTOR_CLONES __attribute__((optimize("fp-contract=fast")))
static int gemm_f32_blocked(const ocl_mmgeom* g, float* C, const float* A, const float* B, const float* I) {
  int64_t np = (g->N + BLK_COLS - 1) / BLK_COLS * BLK_COLS;
  float* bp = malloc((size_t)(g->K * np) * sizeof(float));
  if (!bp) return 0;
  for (int64_t b = 0; b < g->batch; b++) {
    pack_b(g, B + g->off_b + b * g->sb_b, bp, np);
    int64_t m0 = 0;
    for (; m0 + BLK_ROWS <= g->M; m0 += BLK_ROWS)
      for (int64_t n0 = 0; n0 < g->N; n0 += BLK_COLS) gemm_block4(g, C, A, bp, np, I, b, m0, n0);
    for (; m0 < g->M; m0++)
      for (int64_t n0 = 0; n0 < g->N; n0 += BLK_COLS) gemm_block1(g, C, A, bp, np, I, b, m0, n0);
  }
  free(bp);
  return 1;
}

/* The blocked kernel needs 256-bit vector registers: built for SSE2 alone (the default
 * clone, or another architecture) its eight-lane accumulators run 8x slower than the row loops. */
static int blocked_gemm_pays(void) {
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

OCL_VECTOR_CLONES
static void gemm_f32(const ocl_mmgeom* g, float* C, const float* A, const float* B, const float* I) {
  float row[256];
  /* fewer rows than a block: packing B would cost as much as the product */
  if (g->M >= BLK_ROWS && blocked_gemm_pays() && gemm_f32_blocked(g, C, A, B, I)) return;
  for (int64_t b = 0; b < g->batch; b++)
    for (int64_t m = 0; m < g->M; m++) {
      const float* a = A + g->off_a + b * g->sa_b + m * g->sa_m;
      const float* bb = B + g->off_b + b * g->sb_b;
      float* c = C + g->off_c + b * g->sc_b + m * g->sc_m;
      const float* in = g->has_in ? I + g->off_i + b * g->si_b + m * g->si_m : NULL;
      for (int64_t n0 = 0; n0 < g->N; n0 += 256) {
        int64_t nn = g->N - n0 < 256 ? g->N - n0 : 256;
        if (g->sb_n == 1) { /* rows of B contiguous: row += a[k] * B[k, :] */
          memset(row, 0, (size_t)nn * sizeof(float));
          for (int64_t k = 0; k < g->K; k++) {
            float ak = a[k * g->sa_k];
            const float* br = bb + k * g->sb_k + n0;
            for (int64_t j = 0; j < nn; j++) row[j] += ak * br[j];
          }
        } else if (g->sa_k == 1 && g->sb_k == 1) { /* x @ W.t(): dot products of rows */
          dot_rows(a, bb + n0 * g->sb_n, g->sb_n, g->K, nn, row);
        } else {
          for (int64_t j = 0; j < nn; j++) {
            const float* bc = bb + (n0 + j) * g->sb_n;
            float s = 0;
            for (int64_t k = 0; k < g->K; k++) s += a[k * g->sa_k] * bc[k * g->sb_k];
            row[j] = s;
          }
        }
        for (int64_t j = 0; j < nn; j++) {
          float v = g->alpha * row[j];
          /* beta == 0 ignores self entirely (has_in is 0 then), NaNs included */
          if (in) v += g->beta * in[(n0 + j) * g->si_n];
          c[(n0 + j) * g->sc_n] = v;
        }
      }
    }
}

int ocl_inline_gemm(const ral_kernel_call* c, const ocl_mmgeom* g, const ral_tensor* out, const ral_tensor* a,
                    const ral_tensor* b, const ral_tensor* in) {
  if (!c->stream || !c->stream->inl || g->batch * g->M * g->N * (g->K > 0 ? g->K : 1) > OCL_INLINE_WORK) return 0;
  const ral_tensor* ts[4] = {out, a, b, in ? in : out};
  unsigned char* hp[4];
  if (!host_all(ts, 4, hp) || !ocl_inline_begin(c->stream)) return 0;
  gemm_f32(g, (float*)hp[0], (const float*)hp[1], (const float*)hp[2], (const float*)hp[3]);
  ocl_inline_end(c->stream);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}

/* ---------------------------------------------------------------- sum / mean */
/* Element offset of linear index i over sizes/strides of `nd` dims (row-major). */
static int64_t walk_off(int64_t i, int nd, const int64_t* size, const int64_t* st) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; d--) {
    off += (i % size[d]) * st[d];
    i /= size[d];
  }
  return off;
}

OCL_VECTOR_CLONES
static double sum_run(const float* x, int64_t n, int64_t st) {
  double acc[8] = {0};
  int64_t k = 0;
  if (st == 1)
    for (; k + 8 <= n; k += 8)
      for (int l = 0; l < 8; l++) acc[l] += (double)x[k + l];
  double s = 0;
  for (; k < n; k++) s += (double)x[k * st];
  for (int l = 0; l < 8; l++) s += acc[l];
  return s;
}

int ocl_inline_reduce(const ral_kernel_call* c, const ocl_rgeom* g, const ral_tensor* out, const ral_tensor* in) {
  if (!c->stream || !c->stream->inl || (g->op != RD_SUM && g->op != RD_MEAN) || g->dt_in != DT_F32 ||
      g->dt_out != DT_F32 || g->n_out * g->n_red > OCL_INLINE_WORK || g->rndim < 1)
    return 0;
  const ral_tensor* ts[2] = {out, in};
  unsigned char* hp[2];
  if (!host_all(ts, 2, hp) || !ocl_inline_begin(c->stream)) return 0;
  float* y = (float*)hp[0] + g->off_out;
  const float* x = (const float*)hp[1] + g->off_in;
  int inner = g->rndim - 1; /* the innermost reduced dim is one run; the rest are walked */
  int64_t outer_red = g->n_red / (g->rsize[inner] ? g->rsize[inner] : 1);
  for (int64_t o = 0; o < g->n_out; o++) {
    const float* xo = x + walk_off(o, g->ondim, g->osize, g->ost_in);
    double s = 0;
    for (int64_t r = 0; r < outer_red && g->rsize[inner] > 0; r++)
      s += sum_run(xo + walk_off(r, inner, g->rsize, g->rst), g->rsize[inner], g->rst[inner]);
    if (g->op == RD_MEAN) s /= (double)g->n_red; /* 0/0 -> NaN, as PyTorch's mean of nothing */
    y[walk_off(o, g->ondim, g->osize, g->ost_out)] = (float)s;
  }
  ocl_inline_end(c->stream);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}

/* ---------------------------------------------------------------- element-wise */
/* The formulas of ew.cl's float path (ew_f), once: x, w are the first and second inputs. */
#define EW_INLINE_OPS(X)                    \
  X(EW_COPY, x)                             \
  X(EW_FILL, f0)                            \
  X(EW_ADD, x + f0 * w)                     \
  X(EW_SUB, x - f0 * w)                     \
  X(EW_MUL, x * w)                          \
  X(EW_DIV, x / w)                          \
  X(EW_ADDS, x + f0)                        \
  X(EW_MULS, x * f0)                        \
  X(EW_DIVS, x / f0)                        \
  X(EW_RSUBS, f0 - f1 * x)                  \
  X(EW_NEG, -x)                             \
  X(EW_RELU, x < 0.0f ? 0.0f : x)           \
  X(EW_THRESH_BW, w <= f0 ? 0.0f : x)

static int ew_inline_op(int op) {
#define EW_CASE(OP, EXPR) case OP:
  switch (op) {
    EW_INLINE_OPS(EW_CASE)
    return 1;
    default:
      return 0;
  }
#undef EW_CASE
}

static inline float ew_f(int op, float x, float w, float f0, float f1) {
#define EW_CASE(OP, EXPR) case OP: return (EXPR);
  switch (op) {
    EW_INLINE_OPS(EW_CASE)
    default: return 0.0f;
  }
#undef EW_CASE
}

/* y = op(a, b) over n elements; sa/sb: 1 (contiguous) or 0 (one broadcast element). The
 * switch sits outside the loops, so each loop vectorizes. */
OCL_VECTOR_CLONES
static void ew_contig(int op, float* y, const float* a, const float* b, int64_t sa, int64_t sb, int64_t n, float f0,
                      float f1) {
#define EW_CASE(OP, EXPR)                \
  case OP:                               \
    for (int64_t i = 0; i < n; i++) {    \
      float x = a[i * sa], w = b[i * sb]; \
      (void)x, (void)w;                  \
      y[i] = (EXPR);                     \
    }                                    \
    break;
  switch (op) {
    EW_INLINE_OPS(EW_CASE)
    default: break;
  }
#undef EW_CASE
}

int ocl_inline_ew(const ral_kernel_call* c, const ocl_geom* g, const ral_tensor* const* ts, int nt) {
  if (!c->stream || !c->stream->inl || !ew_inline_op(g->op) || g->n > OCL_INLINE_WORK || nt > 3) return 0;
  for (int k = 0; k < nt; k++)
    if (ts[k]->dtype != RAL_DTYPE_FLOAT32) return 0;
  unsigned char* hp[3];
  if (!host_all(ts, nt, hp) || !ocl_inline_begin(c->stream)) return 0;
  float* y = (float*)hp[0] + g->off[0];
  const float* a = nt > 1 ? (const float*)hp[1] + g->off[1] : y;
  const float* b = nt > 2 ? (const float*)hp[2] + g->off[2] : a;
  int64_t s1 = nt > 1 ? g->st[1][0] : 0, s2 = nt > 2 ? g->st[2][0] : 0;
  if (g->ndim == 1 && g->st[0][0] == 1 && (s1 == 0 || s1 == 1) && (s2 == 0 || s2 == 1)) {
    ew_contig(g->op, y, a, b, s1, s2, g->n, g->lf[0], g->lf[1]);
  } else {
    for (int64_t i = 0; i < g->n; i++) {
      int64_t o0 = 0, o1 = 0, o2 = 0, r = i;
      for (int d = g->ndim - 1; d >= 0; d--) {
        int64_t x = r % g->size[d];
        r /= g->size[d];
        o0 += x * g->st[0][d], o1 += x * g->st[1][d], o2 += x * g->st[2][d];
      }
      y[o0] = ew_f(g->op, nt > 1 ? a[o1] : 0.0f, nt > 2 ? b[o2] : 0.0f, g->lf[0], g->lf[1]);
    }
  }
  ocl_inline_end(c->stream);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}

/* ---------------------------------------------------------------- strided copy */
int ocl_inline_copy(const ral_kernel_call* c, const ocl_geom* g, const ral_tensor* const* ts) {
  if (!c->stream || !c->stream->inl || g->n > OCL_INLINE_WORK) return 0;
  unsigned char* hp[2];
  if (!host_all(ts, 2, hp) || !ocl_inline_begin(c->stream)) return 0;
  size_t es = (size_t)g->flags;
  int last = g->ndim - 1;
  int64_t run = g->size[last], rows = g->n / (run ? run : 1);
  for (int64_t r = 0; r < rows; r++) { /* runs along the innermost dim */
    int64_t rem = r, o0 = g->off[0], o1 = g->off[1];
    for (int d = last - 1; d >= 0; d--) {
      int64_t x = rem % g->size[d];
      rem /= g->size[d];
      o0 += x * g->st[0][d], o1 += x * g->st[1][d];
    }
    if (g->st[0][last] == 1 && g->st[1][last] == 1) {
      memmove(hp[0] + o0 * es, hp[1] + o1 * es, (size_t)run * es);
    } else {
      for (int64_t j = 0; j < run; j++)
        memcpy(hp[0] + (o0 + j * g->st[0][last]) * es, hp[1] + (o1 + j * g->st[1][last]) * es, es);
    }
  }
  ocl_inline_end(c->stream);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}

/* ---------------------------------------------------------------- index_select */
int ocl_inline_index_select(const ral_kernel_call* c, const ocl_geom* g, const ral_tensor* const* ts, ral_status* st) {
  if (!c->stream || !c->stream->inl || g->n > OCL_INLINE_WORK || g->n == 0 || ts[0]->dtype != ts[1]->dtype) return 0;
  unsigned char* hp[3];
  if (!host_all(ts, 3, hp) || !ocl_inline_begin(c->stream)) return 0;
  int dim = (int)g->li[0], es = ocl_dtype_size(ts[0]->dtype), i64 = ts[2]->dtype == RAL_DTYPE_INT64;
  int64_t nidx = g->size[dim];
  *st = RAL_OK;
  /* Every index is checked before anything is written: a bad one is this call's error. */
  for (int64_t j = 0; j < nidx && *st == RAL_OK; j++) {
    int64_t at = g->off[2] + j * g->st[2][0];
    int64_t k = i64 ? ((const int64_t*)hp[2])[at] : ((const int32_t*)hp[2])[at];
    if (k < 0 || k >= g->li[1]) *st = ocl_index_error(OCL_SITE_INDEX_SELECT, (long long)k, dim, (long long)g->li[1], 0);
  }
  for (int64_t i = 0; i < g->n && *st == RAL_OK; i++) {
    int64_t r = i, eo = g->off[0], src = g->off[1], cd = 0;
    for (int d = g->ndim - 1; d >= 0; d--) {
      int64_t x = r % g->size[d];
      r /= g->size[d];
      eo += x * g->st[0][d];
      if (d == dim) cd = x;
      else src += x * g->st[1][d];
    }
    int64_t at = g->off[2] + cd * g->st[2][0];
    int64_t k = i64 ? ((const int64_t*)hp[2])[at] : ((const int32_t*)hp[2])[at];
    src += k * g->st[1][dim];
    memcpy(hp[0] + eo * es, hp[1] + src * es, (size_t)es);
  }
  ocl_inline_end(c->stream);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}
