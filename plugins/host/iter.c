/*
 * iter.c -- the strided N-d loop every elementwise-like kernel runs on.
 *
 * Dims of size 1 are dropped, dims are ordered by the first operand's strides (so an
 * in-place op on a transposed view still walks memory forward), and adjacent dims that
 * are contiguous with each other in every operand are merged. The common case (all
 * contiguous, or a broadcast bias) ends up as one long row or a few long rows, which the
 * row functions vectorize. Work is split by element index range, so every thread gets
 * an equal share whatever the shape.
 */
#include "host.h"
#include "pool.h"

void host_iter_init(host_iter* it, const ral_tensor* const* ts, int nt) {
  const ral_tensor* t0 = ts[0];
  int dims[RAL_MAX_RANK], nd = 0;
  it->nt = nt;
  it->numel = host_numel(t0);
  for (int k = 0; k < nt; k++) it->base[k] = host_ptr(ts[k]);
  for (int d = t0->ndim - 1; d >= 0; d--)
    if (t0->sizes[d] != 1) dims[nd++] = d;
  /* innermost first: stable insertion sort by the first operand's stride */
  for (int i = 1; i < nd; i++) {
    int d = dims[i], j = i;
    while (j > 0 && t0->strides[dims[j - 1]] > t0->strides[d]) {
      dims[j] = dims[j - 1];
      j--;
    }
    dims[j] = d;
  }
  int n = 0;
  for (int i = 0; i < nd; i++) {
    int d = dims[i];
    int merge = n > 0;
    for (int k = 0; k < nt && merge; k++) {
      int64_t es = host_dtype_size(ts[k]->dtype);
      merge = ts[k]->strides[d] * es == it->strides[k][n - 1] * it->sizes[n - 1];
    }
    if (merge) {
      it->sizes[n - 1] *= t0->sizes[d];
      continue;
    }
    it->sizes[n] = t0->sizes[d];
    for (int k = 0; k < nt; k++) it->strides[k][n] = ts[k]->strides[d] * host_dtype_size(ts[k]->dtype);
    n++;
  }
  if (n == 0) { /* a single element */
    it->sizes[0] = 1;
    for (int k = 0; k < nt; k++) it->strides[k][0] = host_dtype_size(ts[k]->dtype);
    n = 1;
  }
  it->ndim = n;
}

/* Elements [begin, end) in the iterator's (innermost-first) order. */
static void walk(const host_iter* it, host_row_fn fn, const void* ctx, int64_t begin,
                 int64_t end) {
  int64_t idx[RAL_MAX_RANK];
  char* p[HOST_MAX_OPERANDS];
  int64_t s0[HOST_MAX_OPERANDS];
  int64_t rest = begin;
  for (int d = 0; d < it->ndim; d++) {
    idx[d] = rest % it->sizes[d];
    rest /= it->sizes[d];
  }
  for (int k = 0; k < it->nt; k++) {
    p[k] = it->base[k];
    for (int d = 0; d < it->ndim; d++) p[k] += idx[d] * it->strides[k][d];
    s0[k] = it->strides[k][0];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = it->sizes[0] - idx[0];
    if (n > end - pos) n = end - pos;
    fn(n, p, s0, ctx);
    pos += n;
    idx[0] += n;
    for (int k = 0; k < it->nt; k++) p[k] += n * s0[k];
    /* carry into the outer dims */
    for (int d = 0; d + 1 < it->ndim && idx[d] == it->sizes[d]; d++) {
      idx[d] = 0;
      idx[d + 1]++;
      for (int k = 0; k < it->nt; k++)
        p[k] += it->strides[k][d + 1] - it->sizes[d] * it->strides[k][d];
    }
  }
}

typedef struct {
  const host_iter* it;
  host_row_fn fn;
  const void* ctx;
} iter_job;

static void iter_blocks(int64_t b0, int64_t b1, void* arg) {
  const iter_job* j = arg;
  int64_t begin = b0 * 64, end = b1 * 64 < j->it->numel ? b1 * 64 : j->it->numel;
  if (begin < end) walk(j->it, j->fn, j->ctx, begin, end);
}

void host_iter_run(const host_iter* it, host_row_fn fn, const void* ctx, int64_t grain) {
  if (it->numel == 0) return;
  if (it->numel <= grain) {
    walk(it, fn, ctx, 0, it->numel);
    return;
  }
  /* chunks of 64-element blocks, so threads do not share cache lines of the output */
  iter_job j = {it, fn, ctx};
  host_parallel_for_light((it->numel + 63) / 64, (grain + 63) / 64, iter_blocks, &j);
}
