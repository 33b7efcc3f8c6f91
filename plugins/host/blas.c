/*
 * blas.c -- mm, bmm, addmm, baddbmm, dot through OpenBLAS.
 *
 * A transposed operand (nn.Linear's W.t(), strides (1, in_features)) is passed to BLAS
 * as CblasTrans with its own leading dimension: no copy. An output stored column-major
 * flips the whole call to CblasColMajor. Only operands BLAS cannot describe (broadcast
 * 0-strides, overlapping rows, general strides) and half-precision operands go through a
 * contiguous float scratch copy. float16/bfloat16 compute in float32 (sgemm).
 */
#define _GNU_SOURCE /* RTLD_* */
#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dnnl_matmul.h"
#include "host.h"
#include "pool.h"

/* ---------------------------------------------------------------- loading OpenBLAS
 * OpenBLAS (DYNAMIC_ARCH) picks its kernels from the CPU model when it loads; a CPU it does
 * not know (a VM's generic "Intel Xeon Processor") gets the SSE3 "Prescott" kernels, 3x
 * slower than AVX-512 ones on this project's test machine. It only reads
 * OPENBLAS_CORETYPE at load, so the plugin loads it itself: when the user has not set the
 * variable, it is set from the CPU's features for the dlopen and removed again. */
typedef void (*sgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                         blasint, blasint, float, const float*, blasint, const float*, blasint,
                         float, float*, blasint);
typedef void (*dgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                         blasint, blasint, double, const double*, blasint, const double*, blasint,
                         double, double*, blasint);
typedef void (*sgemv_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, blasint, blasint, float, const float*, blasint,
                         const float*, blasint, float, float*, blasint);
typedef void (*dgemv_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, blasint, blasint, double, const double*, blasint,
                         const double*, blasint, double, double*, blasint);
static sgemm_fn p_sgemm;
static dgemm_fn p_dgemm;
static sgemv_fn p_sgemv;
static dgemv_fn p_dgemv;
static char g_blas_error[256] = "OpenBLAS not loaded";

static const char* coretype_for_cpu(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return NULL; /* OpenBLAS's own detection */
}

int host_blas_load(void) {
  if (p_sgemm) return 1;
  const char* core = getenv("OPENBLAS_CORETYPE") ? NULL : coretype_for_cpu();
  if (core) setenv("OPENBLAS_CORETYPE", core, 0);
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (core) unsetenv("OPENBLAS_CORETYPE");
  if (!lib) {
    snprintf(g_blas_error, sizeof g_blas_error, "cannot load OpenBLAS: %s", dlerror());
    return 0;
  }
  p_dgemm = (dgemm_fn)dlsym(lib, "cblas_dgemm");
  p_sgemm = (sgemm_fn)dlsym(lib, "cblas_sgemm");
  p_sgemv = (sgemv_fn)dlsym(lib, "cblas_sgemv"); /* optional: without them M = 1 stays a GEMM */
  p_dgemv = (dgemv_fn)dlsym(lib, "cblas_dgemv");
  if (!p_sgemm || !p_dgemm) {
    snprintf(g_blas_error, sizeof g_blas_error, "libopenblas.so.0 has no cblas_sgemm/cblas_dgemm");
    p_sgemm = NULL;
    return 0;
  }
  return 1;
}

/* Row-major C = alpha * op(A) op(B) + beta * C for other kernels of this plugin (attention.c),
 * on the calling thread. Without OpenBLAS (the plugin then reports matmuls as failing) a
 * plain loop keeps those kernels correct. */
void host_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a, int lda,
                const float* b, int ldb, float beta, float* c, int ldc) {
  if (p_sgemm) {
    p_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
            alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      float s = 0.0f;
      for (int e = 0; e < k; e++)
        s += (trans_a ? a[e * lda + i] : a[i * lda + e]) * (trans_b ? b[j * ldb + e] : b[e * ldb + j]);
      c[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * c[i * ldc + j]);
    }
}

void host_sgemv(int trans, int m, int n, float alpha, const float* a, int lda, const float* x, float beta, float* y) {
  if (p_sgemv) {
    if (m > 0 && n > 0) p_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, m, n, alpha, a, lda, x, 1, beta, y, 1);
    return;
  }
  int rows = trans ? n : m, len = trans ? m : n;
  for (int i = 0; i < rows; i++) {
    float s = 0.0f;
    for (int e = 0; e < len; e++) s += (trans ? a[e * lda + i] : a[i * lda + e]) * x[e];
    y[i] = alpha * s + (beta == 0.0f ? 0.0f : beta * y[i]);
  }
}

/* A batch of matrices: element (b, i, j) at p + (b*bs + i*sr + j*sc) elements. */
typedef struct {
  char* p;
  int32_t dtype;
  int64_t nb, rows, cols, bs, sr, sc;
  void* scratch;
} mat;

static mat mat_of(const ral_tensor* t) {
  mat m = {host_ptr(t), t->dtype, 1, 1, 1, 0, 0, 0, NULL};
  int b = t->ndim == 3;
  if (b) {
    m.nb = t->sizes[0];
    m.bs = t->strides[0];
  }
  m.rows = t->sizes[b];
  m.cols = t->ndim > b + 1 ? t->sizes[b + 1] : 1;
  m.sr = t->strides[b];
  m.sc = t->ndim > b + 1 ? t->strides[b + 1] : 1;
  return m;
}

static int64_t max3(int64_t a, int64_t b, int64_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }

/* How row-major BLAS sees m: NoTrans with ld, or Trans with ld. 0 if it cannot. */
static int blas_form(const mat* m, enum CBLAS_TRANSPOSE* tr, int64_t* ld) {
  int64_t sr = m->rows <= 1 ? m->cols : m->sr, sc = m->cols <= 1 ? 1 : m->sc;
  if (sc == 1 && sr >= m->cols) {
    *tr = CblasNoTrans;
    *ld = max3(sr, m->cols, 1);
    return *ld <= INT_MAX;
  }
  sr = m->rows <= 1 ? 1 : m->sr;
  sc = m->cols <= 1 ? m->rows : m->sc;
  if (sr == 1 && sc >= m->rows) {
    *tr = CblasTrans;
    *ld = max3(sc, m->rows, 1);
    return *ld <= INT_MAX;
  }
  return 0;
}

static int32_t compute_dtype(int32_t dtype) {
  return dtype == RAL_DTYPE_FLOAT64 ? RAL_DTYPE_FLOAT64 : RAL_DTYPE_FLOAT32;
}

/* Views m as a tensor (for host_copy). */
static void mat_view(host_view* v, const mat* m, void* data, int contiguous) {
  int64_t sizes[3] = {m->nb, m->rows, m->cols};
  if (contiguous) {
    host_view_contiguous(v, data, compute_dtype(m->dtype), 3, sizes);
    return;
  }
  int64_t strides[3] = {m->bs, m->sr, m->sc};
  for (int d = 0; d < 3; d++) {
    v->sizes[d] = sizes[d];
    v->strides[d] = strides[d];
  }
  v->t = (ral_tensor){m->p, 0, m->dtype, 3, v->sizes, v->strides};
}

/* Replaces m by a contiguous compute-dtype copy when BLAS cannot use it as is. */
static ral_status stage(mat* m, int load) {
  enum CBLAS_TRANSPOSE tr;
  int64_t ld;
  if (m->dtype == compute_dtype(m->dtype) && blas_form(m, &tr, &ld)) return RAL_OK;
  int64_t n = m->nb * m->rows * m->cols;
  m->scratch = malloc((size_t)(n ? n : 1) * (size_t)host_dtype_size(compute_dtype(m->dtype)));
  if (!m->scratch) return host_error(RAL_ERROR_OUT_OF_MEMORY, "no memory for a matmul scratch");
  if (load) {
    host_view src, dst;
    mat_view(&src, m, NULL, 0);
    mat_view(&dst, m, m->scratch, 1);
    host_copy(&dst.t, &src.t);
  }
  return RAL_OK;
}

/* Copies a staged output back and releases it. */
static void unstage(mat* m, const mat* orig) {
  if (!m->scratch) return;
  if (orig) {
    host_view src, dst;
    mat_view(&src, orig, m->scratch, 1);
    mat_view(&dst, orig, NULL, 0);
    host_copy(&dst.t, &src.t);
  }
  free(m->scratch);
  m->scratch = NULL;
}

static void make_staged(mat* m) {
  if (!m->scratch) return;
  m->p = m->scratch;
  m->dtype = compute_dtype(m->dtype);
  m->bs = m->rows * m->cols;
  m->sr = m->cols;
  m->sc = 1;
}

typedef struct {
  const mat *A, *B, *C;
  enum CBLAS_ORDER order;
  enum CBLAS_TRANSPOSE ta, tb;
  int64_t lda, ldb, ldc, es, b;
  int M, N, K, split_m;
  double alpha, beta;
} gemm_job;

/* One BLAS call of the job's order and transposes: C (m x n, ldc) = alpha * A @ B + beta * C. */
static void gemm_call(const gemm_job* j, int m, int n, int k, const char* a, const char* b, double beta,
                      char* c, int64_t ldc) {
  if (j->C->dtype == RAL_DTYPE_FLOAT64)
    p_dgemm(j->order, j->ta, j->tb, m, n, k, j->alpha, (const double*)a, (int)j->lda, (const double*)b,
            (int)j->ldb, beta, (double*)c, (int)ldc);
  else
    p_sgemm(j->order, j->ta, j->tb, m, n, k, (float)j->alpha, (const float*)a, (int)j->lda, (const float*)b,
            (int)j->ldb, (float)beta, (float*)c, (int)ldc);
}

/* One BLAS call: rows [m0, m0+m) and columns [n0, n0+n) of C in batch b (in `order` terms). */
static void gemm_block(const gemm_job* j, int64_t b, int64_t m0, int m, int64_t n0, int n) {
  int row_major = j->order == CblasRowMajor;
  /* offset of row i of op(X) / column k of op(X): contiguous step is 1, the other ld */
  int64_t a_row = (row_major == (j->ta == CblasNoTrans)) ? j->lda : 1;
  int64_t b_col = (row_major == (j->tb == CblasNoTrans)) ? 1 : j->ldb;
  int64_t c_row = row_major ? j->ldc : 1, c_col = row_major ? 1 : j->ldc;
  const char* a = j->A->p + (b * j->A->bs + m0 * a_row) * j->es;
  const char* bb = j->B->p + (b * j->B->bs + n0 * b_col) * j->es;
  char* c = j->C->p + (b * j->C->bs + m0 * c_row + n0 * c_col) * j->es;
  gemm_call(j, m, n, j->K, a, bb, j->beta, c, j->ldc);
}

/* Large K, small C: the weight gradient of a narrow Linear over many tokens ([128, 16] from
 * K = 8192 in the benchmarks' pointwise_mlp). Panels of such a C are few and thin, and each
 * re-packs all of K. K is instead cut into KSPLIT_PARTS parts, fixed by the shape alone;
 * part 0 accumulates into C (with beta), the others into scratch, and the parts are added in
 * order, so the result depends neither on the thread budget nor on which thread ran which
 * part. */
#define KSPLIT_PARTS 4
#define KSPLIT_MIN_K 2048
#define KSPLIT_MAX_C 65536

typedef struct {
  const gemm_job* j;
  char* scratch; /* parts 1.. : M x N each, dense in the job's order */
  int64_t kchunk;
} ksplit_job;

static void ksplit_parts(int64_t p0, int64_t p1, void* arg) {
  const ksplit_job* s = arg;
  const gemm_job* j = s->j;
  int row_major = j->order == CblasRowMajor;
  int64_t a_k = (row_major == (j->ta == CblasNoTrans)) ? 1 : j->lda; /* column k of op(A) */
  int64_t b_k = (row_major == (j->tb == CblasNoTrans)) ? j->ldb : 1; /* row k of op(B) */
  for (int64_t p = p0; p < p1; p++) {
    int64_t k0 = p * s->kchunk, kn = j->K - k0 < s->kchunk ? j->K - k0 : s->kchunk;
    const char* a = j->A->p + k0 * a_k * j->es;
    const char* b = j->B->p + k0 * b_k * j->es;
    if (p == 0)
      gemm_call(j, j->M, j->N, (int)kn, a, b, j->beta, j->C->p, j->ldc);
    else
      gemm_call(j, j->M, j->N, (int)kn, a, b, 0.0, s->scratch + (p - 1) * (int64_t)j->M * j->N * j->es,
                row_major ? j->N : j->M);
  }
}

static int ksplit_fits(const gemm_job* j, const mat* C) {
  int64_t mn = j->M > j->N ? j->M : j->N;
  return C->nb == 1 && j->K >= KSPLIT_MIN_K && j->K >= 16 * mn && (int64_t)j->M * j->N <= KSPLIT_MAX_C;
}

/* C += each of parts - 1 dense M x N partial products in scratch (the job's order), in order. */
static void add_parts(const gemm_job* j, const char* scratch, int parts) {
  int64_t mn = (int64_t)j->M * j->N;
  int row_major = j->order == CblasRowMajor;
  int64_t outer = row_major ? j->M : j->N, inner = row_major ? j->N : j->M;
  for (int p = 1; p < parts; p++) {
    const char* part = scratch + (p - 1) * mn * j->es;
    for (int64_t o = 0; o < outer; o++) {
      if (j->es == 8) {
        double* c = (double*)j->C->p + o * j->ldc;
        const double* x = (const double*)part + o * inner;
        for (int64_t i = 0; i < inner; i++) c[i] += x[i];
      } else {
        float* c = (float*)j->C->p + o * j->ldc;
        const float* x = (const float*)part + o * inner;
        for (int64_t i = 0; i < inner; i++) c[i] += x[i];
      }
    }
  }
}

/* body over `parts` equal parts of K on the pool (part 0 into C, the others into scratch),
 * then the parts added in order. Returns 0 (and does nothing) when the scratch cannot be
 * allocated. */
static int run_kparts(const gemm_job* j, int parts, host_range_fn body) {
  char* scratch = malloc((size_t)(parts - 1) * (size_t)j->M * (size_t)j->N * (size_t)j->es);
  if (!scratch) return 0;
  ksplit_job s = {j, scratch, (j->K + parts - 1) / parts};
  host_parallel_for(parts, 1, body, &s);
  add_parts(j, scratch, parts);
  free(scratch);
  return 1;
}

static int gemm_ksplit(const gemm_job* j) { return run_kparts(j, KSPLIT_PARTS, ksplit_parts); }

static void gemm_batches_range(int64_t b0, int64_t b1, void* arg) {
  const gemm_job* j = arg;
  for (int64_t b = b0; b < b1; b++) gemm_block(j, b, 0, j->M, 0, j->N);
}

static void gemm_panels(int64_t p0, int64_t p1, void* arg) {
  const gemm_job* j = arg;
  if (j->split_m) gemm_block(j, j->b, p0, (int)(p1 - p0), 0, j->N);
  else gemm_block(j, j->b, 0, j->M, p0, (int)(p1 - p0));
}

/* ---------------------------------------------------------------- GEMV
 * A product with one row (batch-1 decoding: GPT-2's Conv1D addmm(bias, x[1, 768], W[768, N]),
 * nn.Linear's x @ W.t()) was an OpenBLAS GEMM, and OpenBLAS 0.3.21 packs all of B for it: a
 * full read and write of the weight for one pass over it. One thread, [1, 768] @ [768, 2304]:
 * sgemm 1.1 ms, sgemv 0.22-0.25 ms (PyTorch's CPU addmm 0.27-0.35 ms). Up to GEMV_MAX_M rows
 * of C go through ?gemv instead: the columns of C are cut into blocks of GEMV_BLOCK that pool
 * threads claim (each chunk at least ~GEMV_GRAIN_MACS multiply-adds), one ?gemv per row of C
 * and chunk, the chunk of B staying in cache for the next row. One thread, [M, 768] @
 * [768, 2304], sgemm against chunked sgemv: M = 2 414 / 259 us, M = 3 531 / 413 us, M = 4
 * 470 / 532 us. Each element of C is one dot product over all of K on one thread (no K split). */
#define GEMV_MAX_M 3
#define GEMV_BLOCK 16
#define GEMV_GRAIN_MACS 65536

static void gemv_chunks(int64_t c0, int64_t c1, void* arg) {
  const gemm_job* j = arg;
  int64_t n0 = c0 * GEMV_BLOCK, n1 = c1 * GEMV_BLOCK < j->N ? c1 * GEMV_BLOCK : j->N;
  int nc = (int)(n1 - n0);
  /* row-major: op(A)[i, k] at i*a_i + k*a_k; op(B) NoTrans is [K, N] rows of ldb, Trans is B^T stored [N, K] */
  int64_t a_i = j->ta == CblasNoTrans ? j->lda : 1, a_k = j->ta == CblasNoTrans ? 1 : j->lda;
  const char* b = j->B->p + n0 * (j->tb == CblasNoTrans ? 1 : j->ldb) * j->es;
  enum CBLAS_TRANSPOSE tv = j->tb == CblasNoTrans ? CblasTrans : CblasNoTrans;
  int rows = j->tb == CblasNoTrans ? j->K : nc, cols = j->tb == CblasNoTrans ? nc : j->K;
  for (int i = 0; i < j->M; i++) {
    const char* x = j->A->p + i * a_i * j->es;
    char* y = j->C->p + (i * j->ldc + n0) * j->es;
    if (j->beta == 0) memset(y, 0, (size_t)nc * (size_t)j->es); /* beta = 0 ignores what C held (NaN too) */
    if (j->es == 8)
      p_dgemv(CblasRowMajor, tv, rows, cols, j->alpha, (const double*)b, (int)j->ldb, (const double*)x, (int)a_k,
              j->beta, (double*)y, 1);
    else
      p_sgemv(CblasRowMajor, tv, rows, cols, (float)j->alpha, (const float*)b, (int)j->ldb, (const float*)x,
              (int)a_k, (float)j->beta, (float*)y, 1);
  }
}

/* Whether j (one matrix, row-major C) is served by gemv_chunks. */
static int gemv_fits(const gemm_job* j, const mat* C) {
  return C->nb == 1 && j->order == CblasRowMajor && j->M <= GEMV_MAX_M && j->K > 0 && p_sgemv && p_dgemv;
}

/* A row-major B ([K, N], Conv1D's weight) is read by ?gemv one row at a time, and a chunk of
 * columns reads a short piece of every row: one thread, [768, 2304] float32 in 8 chunks of
 * columns 25 GB/s, whole 48 GB/s; the chunks of a decoded GPT-2 token's Conv1D products ran at
 * 21-34 GB/s where PyTorch's CPU addmm reached 29-47. Such a B is cut into parts of whole rows
 * instead, each one contiguous read: part 0 accumulates into C (with beta), the others into
 * scratch, added in order. As in the K split above, the number of parts follows from the shape
 * alone, so the result does not depend on the thread budget. */
#define GEMV_KPART_ELEMS (1 << 18)
#define GEMV_KPARTS_MAX 8
#define GEMV_KPART_MIN_ROWS 16

static int gemv_kparts(const gemm_job* j) {
  if (j->tb != CblasNoTrans) return 1; /* B^T stored [N, K]: a chunk of columns is contiguous already */
  int64_t parts = (int64_t)j->K * j->N / GEMV_KPART_ELEMS;
  if (parts > GEMV_KPARTS_MAX) parts = GEMV_KPARTS_MAX;
  if (parts > j->K / GEMV_KPART_MIN_ROWS) parts = j->K / GEMV_KPART_MIN_ROWS;
  return parts < 1 ? 1 : (int)parts;
}

static void gemv_kpart_range(int64_t p0, int64_t p1, void* arg) {
  const ksplit_job* s = arg; /* scratch rows are row-major M x N: gemv_fits takes row-major C only */
  const gemm_job* j = s->j;
  int64_t a_i = j->ta == CblasNoTrans ? j->lda : 1, a_k = j->ta == CblasNoTrans ? 1 : j->lda;
  for (int64_t p = p0; p < p1; p++) {
    int64_t k0 = p * s->kchunk, kn = j->K - k0 < s->kchunk ? j->K - k0 : s->kchunk;
    const char* b = j->B->p + k0 * j->ldb * j->es;
    for (int i = 0; i < j->M; i++) {
      const char* x = j->A->p + (i * a_i + k0 * a_k) * j->es;
      char* y = p == 0 ? j->C->p + i * j->ldc * j->es : s->scratch + ((p - 1) * j->M + i) * (int64_t)j->N * j->es;
      double beta = p == 0 ? j->beta : 0.0;
      if (beta == 0) memset(y, 0, (size_t)j->N * (size_t)j->es); /* beta = 0 ignores what C held (NaN too) */
      if (j->es == 8)
        p_dgemv(CblasRowMajor, CblasTrans, (int)kn, j->N, j->alpha, (const double*)b, (int)j->ldb,
                (const double*)x, (int)a_k, beta, (double*)y, 1);
      else
        p_sgemv(CblasRowMajor, CblasTrans, (int)kn, j->N, (float)j->alpha, (const float*)b, (int)j->ldb,
                (const float*)x, (int)a_k, (float)beta, (float*)y, 1);
    }
  }
}

/* Returns 0 (and does nothing) when the shape takes one part or the scratch cannot be allocated. */
static int gemv_ksplit(const gemm_job* j) {
  int parts = gemv_kparts(j);
  return parts >= 2 && run_kparts(j, parts, gemv_kpart_range);
}

static void gemv_run(const gemm_job* j) {
  if (gemv_ksplit(j)) return;
  int64_t blocks = (j->N + GEMV_BLOCK - 1) / GEMV_BLOCK;
  int64_t grain = GEMV_GRAIN_MACS / ((int64_t)j->K * j->M * GEMV_BLOCK) + 1;
  host_parallel_for(blocks, grain, gemv_chunks, (void*)j);
}

/* Narrowest panel a matrix is split into. */
#define PANEL_MIN 32

/* C = alpha * A @ B + beta * C for every batch, on the pool with one BLAS thread each. */
static void gemm_batches(const mat* C, const mat* A, const mat* B, double alpha, double beta) {
  enum CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans, tc = CblasNoTrans;
  int64_t lda = 0, ldb = 0, ldc = 0;
  blas_form(A, &ta, &lda);
  blas_form(B, &tb, &ldb);
  blas_form(C, &tc, &ldc);
  enum CBLAS_ORDER order = CblasRowMajor;
  if (tc == CblasTrans) { /* C is column-major: the same operands in ColMajor terms */
    order = CblasColMajor;
    ta = ta == CblasTrans ? CblasNoTrans : CblasTrans;
    tb = tb == CblasTrans ? CblasNoTrans : CblasTrans;
  }
  gemm_job j = {.A = A, .B = B, .C = C, .order = order, .ta = ta, .tb = tb, .lda = lda, .ldb = ldb,
                .ldc = ldc, .M = (int)C->rows, .N = (int)C->cols, .K = (int)A->cols,
                .alpha = alpha, .beta = beta, .es = host_dtype_size(C->dtype)};
  double flops = (double)j.M * j.N * j.K;
  int threads = host_threads();
  if (C->nb > 1 && (C->nb >= 2 * threads || flops < 64.0 * 64 * 64 * 8)) {
    /* many or small matrices: whole matrices per chunk */
    host_parallel_for(C->nb, 1, gemm_batches_range, &j);
    return;
  }
  if (gemv_fits(&j, C)) {
    gemv_run(&j);
    return;
  }
  if (ksplit_fits(&j, C) && gemm_ksplit(&j)) return;
  /* few large matrices: each one split into panels of C; one BLAS thread per panel, panels
   * claimed by whichever pool thread is free. OpenBLAS is column-major inside: panels across
   * its N (a row-major C's rows) keep its packing efficient even when C is wider than tall,
   * and about two panels per thread beat many thin ones. One thread, 512 x 256 @ 256 x 768:
   * 132 GF/s in 96-row panels, 71 GF/s in 96-column panels, 137 GF/s in 384-row panels.
   * The GPT-2 benchmark's 51 GEMMs per training step: 94 -> 80 ms (plugins/host/README). */
  int good_is_m = order == CblasRowMajor;
  int64_t good = good_is_m ? j.M : j.N;
  j.split_m = good >= 2 * PANEL_MIN ? good_is_m : j.M >= j.N;
  int64_t span = j.split_m ? j.M : j.N;
  int64_t min_panel = PANEL_MIN;
  if (span / (2 * threads) > min_panel) min_panel = span / (2 * threads); /* ~2 panels a thread */
  if (flops < 128.0 * 128 * 128) min_panel = span;
  for (int64_t b = 0; b < C->nb; b++) {
    j.b = b;
    host_parallel_for(span, min_panel, gemm_panels, &j);
  }
}

static ral_status gemm_staged(const ral_tensor* out, const ral_tensor* a, const ral_tensor* b, double alpha,
                              double beta);

/* 16-bit products on oneDNN (plugins/common/dnnl_matmul.c), one call per panel of C's rows (a
 * range of batches for rank 3), each on one thread, the panels claimed from the plugin's pool.
 * One oneDNN call with an OpenMP team of two splits its work statically: when the Python thread
 * takes one of the two cores (dispatching the next ops), the half on that core finishes late
 * and the product took 1.5-2x its time alone (GPT-2's 51 GEMMs: 46 ms in a training step
 * against 16 ms synchronized). Panels claimed dynamically lose nothing to a busy core. When
 * oneDNN declines every panel (a shape it has only reference code for) nothing is written and
 * the caller stages the whole product; a panel declined among others runs gemm_staged alone. */
#define DNNL_PANEL_ROWS 32
#define DNNL_MAX_PANELS 256
typedef struct {
  const ral_tensor *out, *a, *b;
  double alpha, beta;
  int a_cols;     /* rank 2, A column-major */
  int64_t height; /* rows (rank 2) or batches (rank 3) per panel */
  _Atomic int failed;
  unsigned char declined[DNNL_MAX_PANELS];
} dnnl_panel_job;

/* t with dim `d` cut to [start, start + len): sizes in `sizes` (t's rank). */
static ral_tensor slice_dim(const ral_tensor* t, int d, int64_t start, int64_t len, int64_t* sizes) {
  ral_tensor s = *t;
  for (int i = 0; i < t->ndim; i++) sizes[i] = t->sizes[i];
  sizes[d] = len;
  s.sizes = sizes;
  s.byte_offset += (uint64_t)(start * t->strides[d] * host_dtype_size(t->dtype));
  return s;
}

/* Panel p's operands: rows of out and a, b whole (rank 2); batches of all three (rank 3). */
static void panel_of(const dnnl_panel_job* j, int64_t p, ral_tensor ts[3], int64_t sizes[3][3]) {
  int64_t start = p * j->height, len = j->out->sizes[0] - start < j->height ? j->out->sizes[0] - start : j->height;
  ts[0] = slice_dim(j->out, 0, start, len, sizes[0]);
  ts[1] = slice_dim(j->a, 0, start, len, sizes[1]);
  ts[2] = j->out->ndim == 3 ? slice_dim(j->b, 0, start, len, sizes[2]) : *j->b;
}

static void dnnl_panel_range(int64_t p0, int64_t p1, void* arg) {
  dnnl_panel_job* j = arg;
  for (int64_t p = p0; p < p1; p++) {
    ral_tensor ts[3];
    int64_t sizes[3][3];
    panel_of(j, p, ts, sizes);
    /* a row panel of a column-major A (a weight gradient's x^T) is strided both ways, which
     * oneDNN's one-thread brgemm does not take (it runs its slower gemm:jit): copy it into a
     * dense column-major block first */
    void* block = NULL;
    ral_tensor dense_a;
    int64_t dense_strides[2];
    const ral_tensor* src = &ts[1];
    if (j->a_cols && ts[1].sizes[0] < j->a->sizes[0]) {
      block = malloc((size_t)(ts[1].sizes[0] * ts[1].sizes[1] * host_dtype_size(ts[1].dtype)));
      if (!block) {
        j->declined[p] = 1;
        continue;
      }
      dense_strides[0] = 1;
      dense_strides[1] = ts[1].sizes[0];
      dense_a = (ral_tensor){block, 0, ts[1].dtype, 2, ts[1].sizes, dense_strides};
      src = &dense_a;
      if (host_copy(src, &ts[1]) != RAL_OK) j->failed = 1;
    }
    const ral_tensor* t[RAL_DNNL_MM_N_OPERANDS] = {&ts[0], src, &ts[2]};
    void* hp[RAL_DNNL_MM_N_OPERANDS] = {host_ptr(&ts[0]), host_ptr(src), host_ptr(&ts[2])};
    int r = j->failed ? RAL_DNNL_FAILED : ral_dnnl_matmul(t, hp, j->alpha, j->beta, 1);
    free(block);
    if (r == RAL_DNNL_FAILED) j->failed = 1;
    j->declined[p] = r == RAL_DNNL_DECLINED;
  }
}

/* DONE, FAILED, or DECLINED when oneDNN took no panel (nothing written: gemm_staged runs). */
static int dnnl_panels(const ral_tensor* out, const ral_tensor* a, const ral_tensor* b, double alpha, double beta) {
  int a_cols = out->ndim == 2 && a->sizes[0] > 1 && a->strides[0] == 1 && a->strides[1] != 1;
  dnnl_panel_job* j = calloc(1, sizeof *j);
  if (!j) return RAL_DNNL_DECLINED;
  *j = (dnnl_panel_job){.out = out, .a = a, .b = b, .alpha = alpha, .beta = beta, .a_cols = a_cols};
  int64_t span = out->sizes[0], threads = host_pool_team_size();
  int64_t height = out->ndim == 3 ? 1 : DNNL_PANEL_ROWS;
  if (span / (2 * threads) > height) height = span / (2 * threads); /* ~2 panels a thread */
  if (out->ndim == 2) height = (height + DNNL_PANEL_ROWS - 1) / DNNL_PANEL_ROWS * DNNL_PANEL_ROWS;
  if ((span + height - 1) / height > DNNL_MAX_PANELS) height = (span + DNNL_MAX_PANELS - 1) / DNNL_MAX_PANELS;
  j->height = height;
  int64_t n = (span + height - 1) / height;
  host_parallel_for(n, 1, dnnl_panel_range, j);
  int64_t declined = 0;
  for (int64_t p = 0; p < n; p++) declined += j->declined[p];
  /* all declined: nothing written, the caller stages the whole product; some: those panels */
  int result = declined == n ? RAL_DNNL_DECLINED : RAL_DNNL_DONE;
  for (int64_t p = 0; p < n && declined < n && !j->failed; p++) {
    if (!j->declined[p]) continue;
    ral_tensor ts[3];
    int64_t sizes[3][3];
    panel_of(j, p, ts, sizes);
    if (gemm_staged(&ts[0], &ts[1], &ts[2], alpha, beta) != RAL_OK) j->failed = 1;
  }
  if (j->failed) result = RAL_DNNL_FAILED;
  free(j);
  return result;
}

/* out = beta * out + alpha * A @ B (out already holds the addend when beta != 0). */
static ral_status matmul(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a,
                         const ral_tensor* b, double alpha, double beta) {
  int32_t dt = out->dtype;
  if (!p_sgemm) return host_fail(c, RAL_ERROR_INTERNAL, "%s", g_blas_error);
  if (!host_dtype_is_float(dt) || a->dtype != dt || b->dtype != dt)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtypes %s @ %s -> %s are not supported",
                     host_dtype_name(a->dtype), host_dtype_name(b->dtype), host_dtype_name(dt));
  mat A = mat_of(a), B = mat_of(b), C = mat_of(out);
  if (A.cols != B.rows || C.rows != A.rows || C.cols != B.cols || A.nb != C.nb || B.nb != C.nb)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                     "shapes [%lld, %lld, %lld] @ [%lld, %lld, %lld] -> [%lld, %lld, %lld] mismatch",
                     (long long)A.nb, (long long)A.rows, (long long)A.cols, (long long)B.nb,
                     (long long)B.rows, (long long)B.cols, (long long)C.nb, (long long)C.rows,
                     (long long)C.cols);
  if (A.rows > INT_MAX || A.cols > INT_MAX || B.cols > INT_MAX)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "a matrix dimension exceeds 2^31");
  if (C.nb == 0 || C.rows == 0 || C.cols == 0) return RAL_OK;
  if ((dt == RAL_DTYPE_BFLOAT16 || dt == RAL_DTYPE_FLOAT16) && ral_dnnl_matmul_takes(dt)) {
    int r = dnnl_panels(out, a, b, alpha, beta);
    if (r == RAL_DNNL_FAILED) return host_fail(c, RAL_ERROR_INTERNAL, "oneDNN matmul failed");
    if (r == RAL_DNNL_DONE) return RAL_OK;
  }
  ral_status st = gemm_staged(out, a, b, alpha, beta);
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

/* The product through OpenBLAS: operands BLAS cannot take as they are (16-bit, or strides no
 * BLAS form has) staged into contiguous float32 copies, the output rounded back once. */
static ral_status gemm_staged(const ral_tensor* out, const ral_tensor* a, const ral_tensor* b, double alpha,
                              double beta) {
  mat A = mat_of(a), B = mat_of(b), C = mat_of(out), C0 = C;
  ral_status st = stage(&A, 1);
  if (st == RAL_OK) st = stage(&B, 1);
  if (st == RAL_OK) st = stage(&C, beta != 0);
  if (st == RAL_OK) {
    make_staged(&A);
    make_staged(&B);
    make_staged(&C);
    gemm_batches(&C, &A, &B, alpha, beta);
  }
  unstage(&A, NULL);
  unstage(&B, NULL);
  unstage(&C, st == RAL_OK ? &C0 : NULL);
  return st;
}

/* Output and the two matrix operands (the last two inputs) have rank `rank`. */
static ral_status check_ranks(const ral_kernel_call* c, int n_in, int rank) {
  ral_status st = host_check_arity(c, 1, n_in, 0);
  if (st != RAL_OK) return st;
  for (int i = 0; i <= n_in; i++) {
    if (i == 1 && n_in == 3) continue; /* the addend broadcasts */
    if (c->tensors[i].ndim != rank)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d has rank %d, expected %d", i,
                       c->tensors[i].ndim, rank);
  }
  return RAL_OK;
}

/* addmm/baddbmm: out = beta * self + alpha * (mat1 @ mat2); scalars [beta, alpha]. */
static ral_status add_matmul(const ral_kernel_call* c, int rank) {
  ral_status st = check_ranks(c, 3, rank);
  if (st != RAL_OK) return st;
  double beta = 1, alpha = 1;
  int64_t unused;
  host_scalar_num(c, 0, &beta, &unused);
  host_scalar_num(c, 1, &alpha, &unused);
  const ral_tensor *out = host_out(c, 0), *self = host_in(c, 0);
  if (beta != 0 && (self->data != out->data || self->byte_offset != out->byte_offset)) {
    host_view addend; /* self broadcasts to the output (a bias row for nn.Linear) */
    if (!host_view_expand(&addend, self, out->ndim, out->sizes))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "self does not broadcast to the output");
    st = host_copy(out, &addend.t);
    if (st != RAL_OK) return host_fail(c, st, "%s", host_last_error());
  }
  return matmul(c, out, host_in(c, 1), host_in(c, 2), alpha, beta);
}

ral_status host_mm(const ral_kernel_call* c) {
  ral_status st = check_ranks(c, 2, 2);
  return st != RAL_OK ? st : matmul(c, host_out(c, 0), host_in(c, 0), host_in(c, 1), 1.0, 0.0);
}

ral_status host_bmm(const ral_kernel_call* c) {
  ral_status st = check_ranks(c, 2, 3);
  return st != RAL_OK ? st : matmul(c, host_out(c, 0), host_in(c, 0), host_in(c, 1), 1.0, 0.0);
}

ral_status host_addmm(const ral_kernel_call* c) { return add_matmul(c, 2); }
ral_status host_baddbmm(const ral_kernel_call* c) { return add_matmul(c, 3); }

/* dot(self, tensor): a [1, n] @ [n, 1] product into the 0-d output. */
ral_status host_dot(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  const ral_tensor *x = host_in(c, 0), *y = host_in(c, 1), *out = host_out(c, 0);
  if (x->ndim != 1 || y->ndim != 1 || x->sizes[0] != y->sizes[0] || host_numel(out) != 1)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expects two 1-d tensors of one length");
  ral_tensor row = {x->data, x->byte_offset, x->dtype, 2, (int64_t[]){1, x->sizes[0]},
                    (int64_t[]){x->sizes[0] * x->strides[0], x->strides[0]}};
  ral_tensor col = {y->data, y->byte_offset, y->dtype, 2, (int64_t[]){y->sizes[0], 1},
                    (int64_t[]){y->strides[0], 1}};
  ral_tensor res = {out->data, out->byte_offset, out->dtype, 2, (int64_t[]){1, 1},
                    (int64_t[]){1, 1}};
  return matmul(c, &res, &row, &col, 1.0, 0.0);
}
