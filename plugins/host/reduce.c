/*
 * reduce.c -- reductions over a set of dims (sum, mean, amax, amin, prod, var, max/min
 * with indices, argmax/argmin).
 *
 * The input's dims split into kept dims (one output element each) and reduced dims;
 * each group is coalesced. Floating inputs accumulate in double, integer/bool inputs in
 * int64, so float32 sums of millions of elements stay within float32 rounding of the
 * exact result. Three schedules:
 *   - many outputs: threads split the outputs, each reduces its rows serially;
 *   - few outputs, long rows: threads split each row and combine partial results;
 *   - float sum over an outer dim with the kept dim contiguous (bias gradients: [N, C] ->
 *     [C]): blocks of adjacent columns accumulate row by row, so memory is read forward;
 *     with few blocks, the rows split across threads too.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "pool.h"

typedef enum { R_SUM, R_PROD, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN, R_SQDEV } rop;

typedef struct {
  double f;    /* floating accumulator */
  int64_t i;   /* integer accumulator */
  int64_t idx; /* position of the extremum, for arg ops */
} racc;

/* ---------------------------------------------------------------- row kernels */
static inline int better_f(double v, double best, int max) {
  if (best != best) return 0; /* NaN already won */
  return v != v || (max ? v > best : v < best);
}

#define DEF_ROW_FLT(N, ST, CT, ...)                                                     \
  static void row_##N(const char* p, int64_t n, int64_t s, rop op, racc* a, int64_t at, \
                      double mean) {                                                    \
    double acc = a->f;                                                                  \
    switch (op) {                                                                       \
      case R_SUM:                                                                       \
        if (s == (int64_t)sizeof(ST)) {                                                 \
          /* contiguous: eight independent lanes, so the adds pipeline instead of each  \
           * waiting for the last (one accumulator costs an add's latency per element) */ \
          const ST* q = (const ST*)p;                                                   \
          double l[8] = {0, 0, 0, 0, 0, 0, 0, 0};                                       \
          int64_t k = 0;                                                                \
          for (; k + 8 <= n; k += 8)                                                    \
            for (int j = 0; j < 8; j++) l[j] += (double)HOST_TO_##N(q[k + j]);          \
          for (; k < n; k++) l[k & 7] += (double)HOST_TO_##N(q[k]);                     \
          acc += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));    \
          break;                                                                        \
        }                                                                               \
        for (int64_t k = 0; k < n; k++) acc += (double)HOST_TO_##N(*(const ST*)(p + k * s)); \
        break;                                                                          \
      case R_SQDEV:                                                                     \
        for (int64_t k = 0; k < n; k++) {                                               \
          double d = (double)HOST_TO_##N(*(const ST*)(p + k * s)) - mean;               \
          acc += d * d;                                                                 \
        }                                                                               \
        break;                                                                          \
      case R_PROD:                                                                      \
        for (int64_t k = 0; k < n; k++) acc *= (double)HOST_TO_##N(*(const ST*)(p + k * s)); \
        break;                                                                          \
      default:                                                                          \
        for (int64_t k = 0; k < n; k++) {                                               \
          double v = (double)HOST_TO_##N(*(const ST*)(p + k * s));                      \
          if (better_f(v, acc, op == R_MAX || op == R_ARGMAX)) {                        \
            acc = v;                                                                    \
            a->idx = at + k;                                                            \
          }                                                                             \
        }                                                                               \
    }                                                                                   \
    a->f = acc;                                                                         \
  }

#define DEF_ROW_INT(N, ST, CT, ...)                                                     \
  static void row_##N(const char* p, int64_t n, int64_t s, rop op, racc* a, int64_t at, \
                      double mean) {                                                    \
    int64_t acc = a->i;                                                                 \
    switch (op) {                                                                       \
      case R_SUM:                                                                       \
        for (int64_t k = 0; k < n; k++) acc += (int64_t) * (const ST*)(p + k * s);      \
        break;                                                                          \
      case R_PROD:                                                                      \
        for (int64_t k = 0; k < n; k++) acc *= (int64_t) * (const ST*)(p + k * s);      \
        break;                                                                          \
      case R_SQDEV:                                                                     \
        break;                                                                          \
      default:                                                                          \
        for (int64_t k = 0; k < n; k++) {                                               \
          int64_t v = (int64_t) * (const ST*)(p + k * s);                               \
          if (op == R_MAX || op == R_ARGMAX ? v > acc : v < acc) {                      \
            acc = v;                                                                    \
            a->idx = at + k;                                                            \
          }                                                                             \
        }                                                                               \
    }                                                                                   \
    a->i = acc;                                                                         \
  }

HOST_FOR_FLT(DEF_ROW_FLT)
HOST_FOR_INT(DEF_ROW_INT)
HOST_FOR_BOOL(DEF_ROW_INT)

typedef void (*row_fn)(const char*, int64_t, int64_t, rop, racc*, int64_t, double);
#define ROW_ENTRY(N, ST, CT, ...) [RAL_DTYPE_##N] = row_##N,
static const row_fn rows[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(ROW_ENTRY)};

/* Column sums over `n` rows `rs` bytes apart: acc[k] += sum_r x[r][k] for k < w. Eight rows
 * at a time are added pairwise in the compute type (float for float32/16 and bfloat16),
 * then into the double accumulator: the conversions and accumulator stores drop eightfold,
 * and a sum of eight carries at most 3 roundings of 2^-24 before it reaches double (8192
 * rows of [0, 1) floats: 1e-12 relative error, float32's output rounding is 6e-8). */
#define DEF_COLS(N, ST, CT, ...)                                                               \
  HOST_SIMD_CLONES static void cols_##N(const char* p, int64_t rs, int64_t n, int64_t w,       \
                                        double* restrict acc) {                               \
    int64_t r = 0;                                                                             \
    for (; r + 8 <= n; r += 8) {                                                               \
      const ST* restrict x = (const ST*)(p + r * rs);                                          \
      const int64_t e = rs / (int64_t)sizeof(ST);                                              \
      for (int64_t k = 0; k < w; k++) {                                                        \
        CT s01 = (CT)HOST_TO_##N(x[k]) + (CT)HOST_TO_##N(x[k + e]);                            \
        CT s23 = (CT)HOST_TO_##N(x[k + 2 * e]) + (CT)HOST_TO_##N(x[k + 3 * e]);                \
        CT s45 = (CT)HOST_TO_##N(x[k + 4 * e]) + (CT)HOST_TO_##N(x[k + 5 * e]);                \
        CT s67 = (CT)HOST_TO_##N(x[k + 6 * e]) + (CT)HOST_TO_##N(x[k + 7 * e]);                \
        acc[k] += (double)((s01 + s23) + (s45 + s67));                                         \
      }                                                                                        \
    }                                                                                          \
    for (; r < n; r++) {                                                                       \
      const ST* restrict x = (const ST*)(p + r * rs);                                          \
      for (int64_t k = 0; k < w; k++) acc[k] += (double)HOST_TO_##N(x[k]);                     \
    }                                                                                          \
  }
HOST_FOR_FLT(DEF_COLS)
typedef void (*cols_fn)(const char*, int64_t, int64_t, int64_t, double*);
#define COLS_ENTRY(N, ST, CT, ...) [RAL_DTYPE_##N] = cols_##N,
static const cols_fn col_sums[RAL_DTYPE_COUNT] = {HOST_FOR_FLT(COLS_ENTRY)};

/* ---------------------------------------------------------------- plan */
typedef struct {
  int nk, nr;                        /* kept / reduced dims after coalescing */
  int64_t ksize[RAL_MAX_RANK], kin[RAL_MAX_RANK], kout[2][RAL_MAX_RANK];
  int64_t rsize[RAL_MAX_RANK], rin[RAL_MAX_RANK]; /* strides in bytes */
  int64_t M, L;
  const char* in;
  char* out[2];
  int32_t in_dtype, out_dtype[2];
  int n_out;
} rplan;

/* Build the plan; `reduced` has one flag per input dim. Checks output shapes. */
static ral_status make_plan(const ral_kernel_call* c, rplan* P, const ral_tensor* x,
                            const uint8_t* reduced, int keepdim, int n_out) {
  int64_t es = host_dtype_size(x->dtype);
  P->nk = P->nr = 0;
  P->M = P->L = 1;
  P->in = host_ptr(x);
  P->in_dtype = x->dtype;
  P->n_out = n_out;
  int nkept = 0;
  for (int d = 0; d < x->ndim; d++) nkept += !reduced[d];
  for (int o = 0; o < n_out; o++) {
    const ral_tensor* y = host_out(c, o);
    int want = keepdim ? x->ndim : nkept;
    if (y->ndim != want)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output %d has rank %d, expected %d", o,
                       y->ndim, want);
    P->out[o] = host_ptr(y);
    P->out_dtype[o] = y->dtype;
  }
  int od = 0;
  for (int d = 0; d < x->ndim; d++) {
    int64_t n = x->sizes[d];
    int64_t ostride[2] = {0, 0};
    if (!reduced[d] || keepdim) {
      for (int o = 0; o < n_out; o++) {
        const ral_tensor* y = host_out(c, o);
        if (y->sizes[od] != (reduced[d] ? 1 : n))
          return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "output %d has size %lld at dim %d", o,
                           (long long)y->sizes[od], od);
        ostride[o] = y->strides[od] * host_dtype_size(y->dtype);
      }
      od++;
    }
    if (n == 1) continue;
    if (reduced[d]) {
      P->L *= n;
      if (P->nr && P->rin[P->nr - 1] == x->strides[d] * es * n) {
        P->rsize[P->nr - 1] *= n;
        P->rin[P->nr - 1] = x->strides[d] * es;
      } else {
        P->rsize[P->nr] = n;
        P->rin[P->nr++] = x->strides[d] * es;
      }
    } else {
      P->M *= n;
      int k = P->nk;
      if (k && P->kin[k - 1] == x->strides[d] * es * n && P->kout[0][k - 1] == ostride[0] * n &&
          P->kout[1][k - 1] == ostride[1] * n) {
        P->ksize[k - 1] *= n;
        P->kin[k - 1] = x->strides[d] * es;
        P->kout[0][k - 1] = ostride[0];
        P->kout[1][k - 1] = ostride[1];
      } else {
        P->ksize[k] = n;
        P->kin[k] = x->strides[d] * es;
        P->kout[0][k] = ostride[0];
        P->kout[1][k] = ostride[1];
        P->nk++;
      }
    }
  }
  return RAL_OK;
}

/* Byte offsets of kept element j in the input and outputs. */
static void kept_offsets(const rplan* P, int64_t j, int64_t* in_off, int64_t* out_off) {
  *in_off = 0;
  out_off[0] = out_off[1] = 0;
  for (int k = P->nk - 1; k >= 0; k--) {
    int64_t i = j % P->ksize[k];
    j /= P->ksize[k];
    *in_off += i * P->kin[k];
    out_off[0] += i * P->kout[0][k];
    out_off[1] += i * P->kout[1][k];
  }
}

/* fn(p, n, stride, pos, ctx) for each run of reduced positions [begin, end) from `base` that
 * lies along the innermost reduced dim: n elements `stride` bytes apart, the first at flat
 * reduced position pos. Needs P->nr >= 1. */
typedef void (*run_fn)(const char* p, int64_t n, int64_t stride, int64_t pos, void* ctx);

static void for_each_run(const rplan* P, const char* base, int64_t begin, int64_t end, run_fn fn,
                         void* ctx) {
  int last = P->nr - 1;
  int64_t idx[RAL_MAX_RANK], rest = begin, off = 0;
  for (int k = last; k >= 0; k--) {
    idx[k] = rest % P->rsize[k];
    rest /= P->rsize[k];
    off += idx[k] * P->rin[k];
  }
  for (int64_t pos = begin; pos < end;) {
    int64_t n = P->rsize[last] - idx[last];
    if (n > end - pos) n = end - pos;
    fn(base + off, n, P->rin[last], pos, ctx);
    pos += n;
    idx[last] += n;
    off += n * P->rin[last];
    for (int k = last; k > 0 && idx[k] == P->rsize[k]; k--) {
      off += P->rin[k - 1] - idx[k] * P->rin[k];
      idx[k] = 0;
      idx[k - 1]++;
    }
  }
}

typedef struct {
  row_fn fn;
  rop op;
  racc* a;
  double mean;
} row_run;

static void reduce_run(const char* p, int64_t n, int64_t stride, int64_t pos, void* ctx) {
  const row_run* r = ctx;
  r->fn(p, n, stride, r->op, r->a, pos, r->mean);
}

/* Reduce flattened reduced positions [begin, end) of the row starting at `base`. */
static void reduce_range(const rplan* P, const char* base, int64_t begin, int64_t end, rop op,
                         racc* a, double mean) {
  row_fn fn = rows[P->in_dtype];
  if (P->nr == 0) {
    if (begin < end) fn(base, 1, 0, op, a, begin, mean);
    return;
  }
  row_run r = {fn, op, a, mean};
  for_each_run(P, base, begin, end, reduce_run, &r);
}

static racc acc_init(rop op, int is_float) {
  racc a = {0, 0, 0};
  if (op == R_PROD) {
    a.f = 1;
    a.i = 1;
  } else if (op == R_MAX || op == R_ARGMAX) {
    a.f = -INFINITY;
    a.i = INT64_MIN;
  } else if (op == R_MIN || op == R_ARGMIN) {
    a.f = INFINITY;
    a.i = INT64_MAX;
  }
  (void)is_float;
  return a;
}

static void acc_combine(rop op, int is_float, racc* a, const racc* b) {
  switch (op) {
    case R_SUM:
    case R_SQDEV:
      a->f += b->f;
      a->i += b->i;
      break;
    case R_PROD:
      a->f *= b->f;
      a->i *= b->i;
      break;
    default: {
      int max = op == R_MAX || op == R_ARGMAX;
      /* partials come in increasing position order: ties keep the earlier one */
      int take = is_float ? better_f(b->f, a->f, max) : (max ? b->i > a->i : b->i < a->i);
      if (take) *a = *b;
    }
  }
}

typedef void (*finish_fn)(const rplan* P, int64_t j, const racc* a, const int64_t* out_off,
                          const void* ctx);

typedef struct {
  const rplan* P;
  rop op;
  finish_fn finish;
  const void* ctx;
  const double* means;
  int64_t j; /* split mode: the output being reduced */
  int ntasks;
  racc* parts;
} plan_job;

/* Outputs [j0, j1), each reduced whole. */
static void plan_outputs(int64_t j0, int64_t j1, void* arg) {
  const plan_job* J = arg;
  const rplan* P = J->P;
  int is_float = host_dtype_is_float(P->in_dtype);
  for (int64_t j = j0; j < j1; j++) {
    int64_t in_off, out_off[2];
    kept_offsets(P, j, &in_off, out_off);
    racc a = acc_init(J->op, is_float);
    reduce_range(P, P->in + in_off, 0, P->L, J->op, &a, J->means ? J->means[j] : 0);
    J->finish(P, j, &a, out_off, J->ctx);
  }
}

/* Tasks [t0, t1) of one output's row: task t reduces [L t / n, L (t+1) / n) into parts[t]. */
static void plan_split(int64_t t0, int64_t t1, void* arg) {
  const plan_job* J = arg;
  const rplan* P = J->P;
  int64_t in_off, out_off[2];
  kept_offsets(P, J->j, &in_off, out_off);
  for (int64_t t = t0; t < t1; t++) {
    racc a = acc_init(J->op, host_dtype_is_float(P->in_dtype));
    reduce_range(P, P->in + in_off, P->L * t / J->ntasks, P->L * (t + 1) / J->ntasks, J->op, &a,
                 J->means ? J->means[J->j] : 0);
    J->parts[t] = a;
  }
}

/* Run op over every output; finish() turns each accumulator into output values. */
static void run_plan(const rplan* P, rop op, finish_fn finish, const void* ctx,
                     const double* means) {
  int is_float = host_dtype_is_float(P->in_dtype);
  int nth = host_threads();
  int64_t work = P->M * P->L;
  plan_job J = {P, op, finish, ctx, means, 0, 0, NULL};
  if (P->M >= nth || work <= HOST_GRAIN || nth == 1) {
    int64_t grain = P->L > 0 ? HOST_GRAIN / P->L + 1 : P->M;
    host_parallel_for(P->M, P->M > 1 ? grain : P->M, plan_outputs, &J);
    return;
  }
  /* few outputs: split each row into a fixed number of tasks (the combine order, and so
   * the result, does not depend on which thread ran which task) */
  J.ntasks = 2 * nth;
  J.parts = malloc(sizeof(racc) * (size_t)J.ntasks);
  if (!J.parts) {
    host_parallel_for(P->M, P->M, plan_outputs, &J); /* serially */
    return;
  }
  for (int64_t j = 0; j < P->M; j++) {
    int64_t in_off, out_off[2];
    kept_offsets(P, j, &in_off, out_off);
    J.j = j;
    host_parallel_for(J.ntasks, 1, plan_split, &J);
    racc a = acc_init(op, is_float);
    for (int t = 0; t < J.ntasks; t++) acc_combine(op, is_float, &a, &J.parts[t]);
    finish(P, j, &a, out_off, ctx);
  }
  free(J.parts);
}

/* ---------------------------------------------------------------- finishers */
typedef struct {
  double scale;      /* mean: 1/L */
  double divisor;    /* var: L - correction */
  double* means_out; /* var pass 1 */
} fin_ctx;

static void store_acc(const rplan* P, int o, const int64_t* out_off, double f, int64_t i,
                      int is_float) {
  host_store_value(P->out[o] + out_off[o], P->out_dtype[o], is_float ? f : (double)i,
                   is_float ? (int64_t)f : i);
}

static void fin_value(const rplan* P, int64_t j, const racc* a, const int64_t* oo, const void* ctx) {
  const fin_ctx* fc = ctx;
  int is_float = host_dtype_is_float(P->in_dtype);
  if (fc->scale != 1.0) store_acc(P, 0, oo, (is_float ? a->f : (double)a->i) * fc->scale, 0, 1);
  else store_acc(P, 0, oo, a->f, a->i, is_float);
}

static void fin_index(const rplan* P, int64_t j, const racc* a, const int64_t* oo, const void* ctx) {
  *(int64_t*)(P->out[0] + oo[0]) = a->idx;
}

static void fin_value_index(const rplan* P, int64_t j, const racc* a, const int64_t* oo,
                            const void* ctx) {
  store_acc(P, 0, oo, a->f, a->i, host_dtype_is_float(P->in_dtype));
  *(int64_t*)(P->out[1] + oo[1]) = a->idx;
}

static void fin_mean(const rplan* P, int64_t j, const racc* a, const int64_t* oo, const void* ctx) {
  ((const fin_ctx*)ctx)->means_out[j] = a->f / (double)P->L;
}

static void fin_var(const rplan* P, int64_t j, const racc* a, const int64_t* oo, const void* ctx) {
  store_acc(P, 0, oo, a->f / ((const fin_ctx*)ctx)->divisor, 0, 1);
}

/* ---------------------------------------------------------------- column schedule */
#define COL_BLOCK 256
/* A row split of the column schedule reads at least this many elements. */
#define COL_SPLIT_MIN (4 * HOST_GRAIN)

typedef struct {
  const rplan* P;
  double scale;
  int64_t W, nblk, nsplit;
  double* parts; /* nsplit > 1: [item][COL_BLOCK] partial sums, combined by the caller */
} col_job;

typedef struct {
  cols_fn cols;
  int64_t w;
  double* acc;
} col_run;

static void sum_columns_run(const char* p, int64_t n, int64_t stride, int64_t pos, void* ctx) {
  (void)pos;
  const col_run* r = ctx;
  r->cols(p, stride, n, r->w, r->acc);
}

/* acc[k] += the columns [w0, w0 + w) of reduced positions [begin, end) from `base`. */
static void col_range(const rplan* P, const char* base, int64_t begin, int64_t end, int64_t w,
                      double* acc) {
  col_run r = {col_sums[P->in_dtype], w, acc};
  for_each_run(P, base, begin, end, sum_columns_run, &r);
}

/* Column block `b` of outer row `o`: its first input byte offset, output offsets and width. */
static int64_t col_block(const col_job* J, int64_t o, int64_t b, int64_t* in_off, int64_t* out_off) {
  int64_t w0 = b * COL_BLOCK;
  kept_offsets(J->P, o * J->W + w0, in_off, out_off);
  return J->W - w0 < COL_BLOCK ? J->W - w0 : COL_BLOCK;
}

static void col_store(const col_job* J, const double* acc, int64_t w, const int64_t* out_off) {
  const rplan* P = J->P;
  int64_t ostride = P->kout[0][P->nk - 1];
  for (int64_t k = 0; k < w; k++) {
    double v = acc[k] * J->scale;
    host_store_value(P->out[0] + out_off[0] + k * ostride, P->out_dtype[0], v, (int64_t)v);
  }
}

/* Items [i0, i1): item i is row part i % nsplit of column block (i / nsplit) % nblk of
 * outer row i / (nsplit nblk). A whole block (nsplit 1) is stored; a part is kept. */
static void col_items(int64_t i0, int64_t i1, void* arg) {
  const col_job* J = arg;
  const rplan* P = J->P;
  for (int64_t i = i0; i < i1; i++) {
    int64_t s = i % J->nsplit, blk = i / J->nsplit;
    int64_t in_off, out_off[2];
    int64_t w = col_block(J, blk / J->nblk, blk % J->nblk, &in_off, out_off);
    double local[COL_BLOCK];
    double* acc = J->nsplit > 1 ? J->parts + i * COL_BLOCK : local;
    memset(acc, 0, sizeof(double) * (size_t)w);
    col_range(P, P->in + in_off, P->L * s / J->nsplit, P->L * (s + 1) / J->nsplit, w, acc);
    if (J->nsplit == 1) col_store(J, acc, w, out_off);
  }
}

/* Float sum over reduced dims when the innermost kept dim is contiguous in the input and
 * the reduced dims are not: blocks of COL_BLOCK adjacent columns accumulate row by row, so
 * memory is read forward. With few blocks (a bias gradient [N, C] -> [C] has one or two)
 * the rows split too, into a number of parts fixed by the shape and the thread budget; the
 * parts are added in order, so the result does not depend on which thread ran which part.
 * Integer sums keep the row schedule: its int64 accumulator is exact past 2^53. */
static int try_column_sum(const rplan* P, double scale) {
  int64_t es = host_dtype_size(P->in_dtype);
  if (!col_sums[P->in_dtype] || P->nk == 0 || P->nr == 0 || P->kin[P->nk - 1] != es ||
      P->rin[P->nr - 1] == es)
    return 0;
  int64_t W = P->ksize[P->nk - 1];
  col_job J = {P, scale, W, (W + COL_BLOCK - 1) / COL_BLOCK, 1, NULL};
  int64_t blocks = (P->M / W) * J.nblk, per_block = P->L * (W < COL_BLOCK ? W : COL_BLOCK);
  int64_t want = 4 * (int64_t)host_threads();
  if (blocks < want && per_block >= 2 * COL_SPLIT_MIN) {
    int64_t by_size = per_block / COL_SPLIT_MIN, by_threads = (want + blocks - 1) / blocks;
    J.nsplit = by_size < by_threads ? by_size : by_threads;
    J.parts = malloc(sizeof(double) * COL_BLOCK * (size_t)(blocks * J.nsplit));
    if (!J.parts) J.nsplit = 1; /* no room for partial sums: whole blocks */
  }
  int64_t items = blocks * J.nsplit, per_item = per_block / J.nsplit;
  host_parallel_for(items, P->M * P->L > HOST_GRAIN ? HOST_GRAIN / per_item + 1 : items, col_items, &J);
  if (J.nsplit > 1) {
    for (int64_t blk = 0; blk < blocks; blk++) {
      int64_t in_off, out_off[2];
      int64_t w = col_block(&J, blk / J.nblk, blk % J.nblk, &in_off, out_off);
      double* acc = J.parts + blk * J.nsplit * COL_BLOCK;
      for (int64_t s = 1; s < J.nsplit; s++)
        for (int64_t k = 0; k < w; k++) acc[k] += acc[s * COL_BLOCK + k];
      col_store(&J, acc, w, out_off);
    }
    free(J.parts);
  }
  return 1;
}

/* ---------------------------------------------------------------- kernels */
/* Reads the dim list at scalar `dim_at` (NONE or empty => all dims) into `reduced`. */
static ral_status parse_dims(const ral_kernel_call* c, const ral_tensor* x, int dim_at,
                             uint8_t* reduced) {
  int n;
  const int64_t* dims = dim_at >= 0 ? host_scalar_list(c, dim_at, &n) : NULL;
  if (dim_at < 0) n = 0;
  memset(reduced, n == 0, RAL_MAX_RANK);
  for (int k = 0; k < n; k++) {
    int d = host_wrap_dim(dims[k], x->ndim);
    if (d < 0)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dim %lld out of range for rank %d",
                       (long long)dims[k], x->ndim);
    reduced[d] = 1;
  }
  return RAL_OK;
}

static ral_status check_input(const ral_kernel_call* c, int n_out, int float_only) {
  if (c->n_outputs != n_out || c->n_inputs != 1)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected %d outputs and 1 input", n_out);
  int32_t dt = host_in(c, 0)->dtype;
  if (!host_dtype_is_computable(dt) || (float_only && !host_dtype_is_float(dt)))
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s is not supported", host_dtype_name(dt));
  for (int o = 0; o < n_out; o++)
    if (!host_dtype_is_computable(host_out(c, o)->dtype))
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "output dtype %s is not supported",
                       host_dtype_name(host_out(c, o)->dtype));
  return RAL_OK;
}

/* sum/mean/prod/amax/amin: dims at scalar dim_at (-1: all), keepdim at keep_at (-1: no). */
static ral_status reduce_kernel(const ral_kernel_call* c, rop op, int dim_at, int keep_at,
                                int mean, int float_only) {
  ral_status st = check_input(c, 1, float_only);
  if (st != RAL_OK) return st;
  const ral_tensor* x = host_in(c, 0);
  uint8_t reduced[RAL_MAX_RANK];
  rplan P;
  st = parse_dims(c, x, dim_at, reduced);
  if (st == RAL_OK)
    st = make_plan(c, &P, x, reduced, keep_at >= 0 && host_scalar_int(c, keep_at, 0), 1);
  if (st != RAL_OK) return st;
  if (P.L == 0 && (op == R_MAX || op == R_MIN))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "cannot reduce over an empty dimension");
  if (P.L == 0) { /* nothing to reduce: each output is the identity (a mean is 0/0 = NaN) */
    host_fill(host_out(c, 0), op == R_PROD ? 1.0 : (mean ? NAN : 0.0), op == R_PROD ? 1 : 0);
    return RAL_OK;
  }
  fin_ctx fc = {mean ? 1.0 / (double)P.L : 1.0, 0, NULL};
  if (op == R_SUM && try_column_sum(&P, fc.scale)) return RAL_OK;
  run_plan(&P, op, fin_value, &fc, NULL);
  return RAL_OK;
}

ral_status host_sum_dim(const ral_kernel_call* c) { return reduce_kernel(c, R_SUM, 0, 1, 0, 0); }
ral_status host_sum(const ral_kernel_call* c) { return reduce_kernel(c, R_SUM, -1, -1, 0, 0); }
ral_status host_mean_dim(const ral_kernel_call* c) { return reduce_kernel(c, R_SUM, 0, 1, 1, 1); }
ral_status host_mean(const ral_kernel_call* c) { return reduce_kernel(c, R_SUM, -1, -1, 1, 1); }
ral_status host_amax(const ral_kernel_call* c) { return reduce_kernel(c, R_MAX, 0, 1, 0, 0); }
ral_status host_amin(const ral_kernel_call* c) { return reduce_kernel(c, R_MIN, 0, 1, 0, 0); }
ral_status host_prod(const ral_kernel_call* c) { return reduce_kernel(c, R_PROD, -1, -1, 0, 0); }
/* all() over a bool tensor is its minimum; over no elements it is true (the identity),
 * which the generic reducer refuses as "reducing an empty dimension". */
ral_status host_all(const ral_kernel_call* c) {
  if (host_numel(host_in(c, 0)) == 0) {
    *(uint8_t*)host_ptr(host_out(c, 0)) = 1;
    return RAL_OK;
  }
  return reduce_kernel(c, R_MIN, -1, -1, 0, 0);
}

/* any() over a bool tensor is its maximum; over no elements it is false (the identity),
 * which the generic reducer refuses as "reducing an empty dimension". `dim_at`: the scalar
 * holding the dims (-1: all), `single`: it is one int (any.dim) rather than a list (any.dims). */
static ral_status any_kernel(const ral_kernel_call* c, int dim_at, int single, int keep_at) {
  ral_status st = check_input(c, 1, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* x = host_in(c, 0);
  uint8_t reduced[RAL_MAX_RANK];
  memset(reduced, 1, sizeof reduced);
  if (single) {
    memset(reduced, 0, sizeof reduced);
    int d = host_wrap_dim(host_scalar_int(c, dim_at, 0), x->ndim);
    if (d < 0) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dim out of range for rank %d", x->ndim);
    if (x->ndim) reduced[d] = 1;
  } else if (dim_at >= 0 && !host_scalar_is_none(c, dim_at)) {
    int n;
    host_scalar_list(c, dim_at, &n);
    /* unlike sum's, any's empty dim list reduces nothing: the result is x as bool */
    if (n == 0) memset(reduced, 0, sizeof reduced);
    else if ((st = parse_dims(c, x, dim_at, reduced)) != RAL_OK) return st;
  }
  if (host_numel(x) == 0) { /* every output reduces nothing (or there is no output) */
    host_fill(host_out(c, 0), 0.0, 0);
    return RAL_OK;
  }
  rplan P;
  st = make_plan(c, &P, x, reduced, keep_at >= 0 && host_scalar_int(c, keep_at, 0), 1);
  if (st != RAL_OK) return st;
  fin_ctx fc = {1.0, 0, NULL};
  run_plan(&P, R_MAX, fin_value, &fc, NULL);
  return RAL_OK;
}

ral_status host_any(const ral_kernel_call* c) { return any_kernel(c, -1, 0, -1); }
ral_status host_any_dim(const ral_kernel_call* c) { return any_kernel(c, 0, 1, 1); }
ral_status host_any_dims(const ral_kernel_call* c) { return any_kernel(c, 0, 0, 1); }

/* max.dim / min.dim (values, indices) and argmax / argmin (dim? => flattened). */
static ral_status arg_kernel(const ral_kernel_call* c, rop op, int n_out) {
  ral_status st = check_input(c, n_out, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* x = host_in(c, 0);
  if (host_out(c, n_out - 1)->dtype != RAL_DTYPE_INT64)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "indices output must be int64");
  uint8_t reduced[RAL_MAX_RANK];
  memset(reduced, 1, sizeof reduced);
  if (!host_scalar_is_none(c, 0)) {
    memset(reduced, 0, sizeof reduced);
    int d = host_wrap_dim(host_scalar_int(c, 0, 0), x->ndim);
    if (d < 0) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dim out of range");
    if (x->ndim) reduced[d] = 1;
  }
  rplan P;
  st = make_plan(c, &P, x, reduced, (int)host_scalar_int(c, 1, 0), n_out);
  if (st != RAL_OK) return st;
  if (P.L == 0) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "cannot reduce an empty dimension");
  /* reduced positions are counted row-major over the reduced dims, as aten counts */
  fin_ctx fc = {1.0, 0, NULL};
  run_plan(&P, op, n_out == 2 ? fin_value_index : fin_index, &fc, NULL);
  return RAL_OK;
}

ral_status host_max_dim(const ral_kernel_call* c) { return arg_kernel(c, R_MAX, 2); }
ral_status host_min_dim(const ral_kernel_call* c) { return arg_kernel(c, R_MIN, 2); }
ral_status host_argmax(const ral_kernel_call* c) { return arg_kernel(c, R_ARGMAX, 1); }
ral_status host_argmin(const ral_kernel_call* c) { return arg_kernel(c, R_ARGMIN, 1); }

/* var.correction(self, dim?, *, correction?, keepdim): two passes, mean then squares. */
ral_status host_var_correction(const ral_kernel_call* c) {
  ral_status st = check_input(c, 1, 1);
  if (st != RAL_OK) return st;
  const ral_tensor* x = host_in(c, 0);
  if (host_numel(x) == 0) { /* variance of no samples is NaN, as in aten (and no plan to run) */
    host_fill(host_out(c, 0), NAN, 0);
    return RAL_OK;
  }
  uint8_t reduced[RAL_MAX_RANK];
  rplan P;
  st = parse_dims(c, x, 0, reduced);
  if (st == RAL_OK) st = make_plan(c, &P, x, reduced, (int)host_scalar_int(c, 2, 0), 1);
  if (st != RAL_OK) return st;
  double corr = 1;
  int64_t corr_i;
  if (!host_scalar_num(c, 1, &corr, &corr_i)) corr = 1; /* correction=None means 1 */
  double* means = malloc(sizeof(double) * (size_t)(P.M ? P.M : 1));
  if (!means) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "no memory for row means");
  /* aten divides by max(0, N - correction): a correction past N gives inf, not a negative variance */
  fin_ctx fc = {1.0, fmax((double)P.L - corr, 0.0), means};
  run_plan(&P, R_SUM, fin_mean, &fc, NULL);
  run_plan(&P, R_SQDEV, fin_var, &fc, means);
  free(means);
  return RAL_OK;
}
