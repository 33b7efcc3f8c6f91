/*
 * nn_impl.h -- softmax and layer-norm rows and drivers, written once for a compute type.
 * nn.c includes this file twice: T = float (float32/float16/bfloat16 data) and
 * T = double (float64 data). It needs T, TDT (the ral_dtype of T) and NN(name) defined.
 *
 * Rows are gathered into per-thread scratch of T unless the data already is a
 * contiguous row of T, in which case the kernel works in place on it.
 */

/* Per-thread scratch of n T; NULL (and *failed set) when memory is short. */
static T* NN(scratch)(size_t n, int* failed) {
  T* p = malloc(sizeof(T) * (n ? n : 1));
  if (!p) {
    __atomic_store_n(failed, 1, __ATOMIC_RELAXED);
  }
  return p;
}

/* ---------------------------------------------------------------- softmax rows */
/* Reductions carry `omp simd`: without it GCC keeps FP sums and maxima scalar (it may
 * not reassociate them), and these rows are the whole cost of the kernel. */
static HOST_SIMD_CLONES void NN(softmax_row)(int64_t D, T* restrict y, const T* restrict x,
                                             nn_kind kind) {
  T m = -INFINITY;
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t k = 0; k < D; k++) {
    m = x[k] > m ? x[k] : m;
    nan |= x[k] != x[k];
  }
  if (nan) m = NAN; /* a NaN anywhere makes the whole row NaN, as in aten */
  if (kind == NN_SAFE_SOFTMAX && m == -INFINITY) {
    for (int64_t k = 0; k < D; k++) y[k] = 0;
    return;
  }
  double s = 0;
  if (kind == NN_LOG_SOFTMAX) {
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < D; k++) s += (double)HOST_EXP(x[k] - m);
    T shift = m + (T)log(s);
    for (int64_t k = 0; k < D; k++) y[k] = x[k] - shift;
    return;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < D; k++) {
    y[k] = HOST_EXP(x[k] - m);
    s += (double)y[k];
  }
  T inv = (T)(1.0 / s);
  for (int64_t k = 0; k < D; k++) y[k] *= inv;
}

/* grad_input from (grad_output g, forward output y) */
static HOST_SIMD_CLONES void NN(softmax_bw_row)(int64_t D, T* restrict gi, const T* restrict g,
                                                const T* restrict y, nn_kind kind) {
  double s = 0;
  if (kind == NN_LOG_SOFTMAX_BW) {
#pragma omp simd reduction(+ : s)
    for (int64_t k = 0; k < D; k++) s += (double)g[k];
    for (int64_t k = 0; k < D; k++) gi[k] = g[k] - HOST_EXP(y[k]) * (T)s;
    return;
  }
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < D; k++) s += (double)(g[k] * y[k]);
  for (int64_t k = 0; k < D; k++) gi[k] = y[k] * (g[k] - (T)s);
}

/* One layer-norm row: y = (x - mean) * rstd * w + b. */
static HOST_SIMD_CLONES void NN(ln_row)(int64_t N, T* restrict y, const T* restrict xr,
                                        const T* restrict wt, const T* restrict bt, double eps,
                                        double* mean_out, double* rstd_out) {
  double s = 0, ss = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t k = 0; k < N; k++) s += (double)xr[k];
  double mean = s / (double)N;
#pragma omp simd reduction(+ : ss)
  for (int64_t k = 0; k < N; k++) {
    double d = (double)xr[k] - mean;
    ss += d * d;
  }
  double rstd = 1.0 / sqrt(ss / (double)N + eps);
  T tm = (T)mean, tr = (T)rstd;
  if (wt && bt)
    for (int64_t k = 0; k < N; k++) y[k] = (xr[k] - tm) * tr * wt[k] + bt[k];
  else
    for (int64_t k = 0; k < N; k++) {
      T v = (xr[k] - tm) * tr;
      if (wt) v *= wt[k];
      if (bt) v += bt[k];
      y[k] = v;
    }
  *mean_out = mean;
  *rstd_out = rstd;
}

/* One layer-norm backward row: adds this row's g * xhat and g into pw[0..N), pw[N..2N)
 * when pw is given, and writes grad_input into gi when given. */
static HOST_SIMD_CLONES void NN(ln_bw_row)(int64_t N, T* restrict gi, const T* restrict gr,
                                           const T* restrict xr, const T* restrict wt, T mu,
                                           T rs, double* restrict pw) {
  if (pw)
    for (int64_t k = 0; k < N; k++) {
      pw[k] += (double)(gr[k] * ((xr[k] - mu) * rs));
      pw[N + k] += (double)gr[k];
    }
  if (!gi) return;
  double a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
  for (int64_t k = 0; k < N; k++) {
    T wg = wt ? gr[k] * wt[k] : gr[k];
    a += (double)wg;
    bsum += (double)(wg * ((xr[k] - mu) * rs));
  }
  T ma = (T)(a / (double)N), mb = (T)(bsum / (double)N);
  for (int64_t k = 0; k < N; k++) {
    T wg = wt ? gr[k] * wt[k] : gr[k];
    gi[k] = rs * (wg - ma - ((xr[k] - mu) * rs) * mb);
  }
}

/* A row of D elements with stride `st` bytes, as T: in place when possible, else staged. */
static const T* NN(row_in)(const char* p, int32_t dtype, int64_t st, int64_t D, T* buf) {
  if (dtype == TDT && st == (int64_t)sizeof(T)) return (const T*)p;
  host_load_row(buf, TDT, p, st, dtype, D);
  return buf;
}

static T* NN(row_out)(char* p, int32_t dtype, int64_t st, T* buf) {
  return dtype == TDT && st == (int64_t)sizeof(T) ? (T*)p : buf;
}

static void NN(row_done)(char* p, int32_t dtype, int64_t st, const T* y, int64_t D) {
  if ((const char*)y != p) host_store_row(p, st, dtype, y, TDT, D);
}

typedef struct {
  const ral_tensor *out, *in0, *in1;
  int64_t D, inner;
  nn_kind kind;
  int failed;
} NN(sm_job);
static void NN(softmax_rows)(int64_t r0, int64_t r1, void* arg);

/* Softmax family along `dim` of contiguous tensors; in1 is the forward output for the
 * backward kinds (NULL otherwise). */
static ral_status NN(softmax_run)(const ral_tensor* out, const ral_tensor* in0,
                                  const ral_tensor* in1, int dim, nn_kind kind) {
  int64_t D = in0->ndim ? in0->sizes[dim] : 1, inner = 1, outer = 1;
  for (int d = dim + 1; d < in0->ndim; d++) inner *= in0->sizes[d];
  for (int d = 0; d < dim; d++) outer *= in0->sizes[d];
  int64_t rows = outer * inner;
  if (rows == 0 || D == 0) return RAL_OK;
  NN(sm_job) j = {out, in0, in1, D, inner, kind, 0};
  host_parallel_for(rows, HOST_GRAIN_HEAVY / D + 1, NN(softmax_rows), &j);
  return j.failed ? host_error(RAL_ERROR_OUT_OF_MEMORY, "no memory for row scratch") : RAL_OK;
}

static void NN(softmax_rows)(int64_t r0, int64_t r1, void* arg) {
  NN(sm_job)* j = arg;
  const ral_tensor *out = j->out, *in0 = j->in0, *in1 = j->in1;
  int64_t D = j->D, inner = j->inner;
  nn_kind kind = j->kind;
  int64_t es0 = host_dtype_size(in0->dtype), eso = host_dtype_size(out->dtype);
  int64_t es1 = in1 ? host_dtype_size(in1->dtype) : 0;
  {
    T* buf = NN(scratch)((size_t)D * 3, &j->failed);
    for (int64_t r = r0; r < r1; r++) {
      if (!buf) continue;
      int64_t o = r / inner, i = r % inner, base = o * D * inner + i;
      const T* x = NN(row_in)(host_ptr(in0) + base * es0, in0->dtype, inner * es0, D, buf);
      char* po = host_ptr(out) + base * eso;
      T* y = NN(row_out)(po, out->dtype, inner * eso, buf + 2 * D);
      if (in1) {
        const T* fy = NN(row_in)(host_ptr(in1) + base * es1, in1->dtype, inner * es1, D, buf + D);
        NN(softmax_bw_row)(D, y, x, fy, kind);
      } else {
        NN(softmax_row)(D, y, x, kind);
      }
      NN(row_done)(po, out->dtype, inner * eso, y, D);
    }
    free(buf);
  }
}

/* ---------------------------------------------------------------- layer norm */
/* Shared by the forward and backward drivers and their row-range bodies. */
typedef struct {
  const ral_tensor* const* o;
  const ral_tensor *x, *g, *mean, *rstd;
  const T *wt, *bt;
  int64_t N;
  double eps;
  int failed;
  double* part; /* backward: 2N partial sums (weight, bias) per task */
  int64_t M;
  int ntasks; /* backward: row ranges, fixed so sums do not depend on scheduling */
} NN(ln_job);
static void NN(ln_rows)(int64_t r0, int64_t r1, void* arg);
static void NN(ln_bw_tasks)(int64_t t0, int64_t t1, void* arg);
/* y = (x - mean) * rstd * w + b over rows of N; mean/rstd per row. */
static ral_status NN(layer_norm_run)(const ral_tensor* const* o, const ral_tensor* x,
                                     const ral_tensor* w, const ral_tensor* b, int64_t M,
                                     int64_t N, double eps) {
  T* wb = malloc(sizeof(T) * (size_t)(2 * N + 1));
  if (!wb) return host_error(RAL_ERROR_OUT_OF_MEMORY, "no memory for weight scratch");
  T *wt = w ? wb : NULL, *bt = b ? wb + N : NULL;
  if (w) host_load_row(wt, TDT, host_ptr(w), host_dtype_size(w->dtype), w->dtype, N);
  if (b) host_load_row(bt, TDT, host_ptr(b), host_dtype_size(b->dtype), b->dtype, N);
  NN(ln_job) j = {o, x, NULL, NULL, NULL, wt, bt, N, eps, 0, NULL, 0, 0};
  host_parallel_for(M, HOST_GRAIN / N + 1, NN(ln_rows), &j);
  free(wb);
  return j.failed ? host_error(RAL_ERROR_OUT_OF_MEMORY, "no memory for row scratch") : RAL_OK;
}

static void NN(ln_rows)(int64_t r0, int64_t r1, void* arg) {
  NN(ln_job)* j = arg;
  const ral_tensor* const* o = j->o;
  const ral_tensor* x = j->x;
  int64_t N = j->N;
  const T *wt = j->wt, *bt = j->bt;
  double eps = j->eps;
  int64_t esx = host_dtype_size(x->dtype), esy = host_dtype_size(o[0]->dtype);
  {
    T* buf = NN(scratch)((size_t)(2 * N + 1), &j->failed);
    for (int64_t r = r0; r < r1; r++) {
      if (!buf) continue;
      const T* xr = NN(row_in)(host_ptr(x) + r * N * esx, x->dtype, esx, N, buf);
      char* py = host_ptr(o[0]) + r * N * esy;
      T* y = NN(row_out)(py, o[0]->dtype, esy, buf + N);
      double mean, rstd;
      NN(ln_row)(N, y, xr, wt, bt, eps, &mean, &rstd);
      NN(row_done)(py, o[0]->dtype, esy, y, N);
      host_store_value(host_ptr(o[1]) + r * host_dtype_size(o[1]->dtype), o[1]->dtype, mean, 0);
      host_store_value(host_ptr(o[2]) + r * host_dtype_size(o[2]->dtype), o[2]->dtype, rstd, 0);
    }
    free(buf);
  }
}

/* Backward tasks [t0, t1): task t owns rows [M t / n, M (t+1) / n) and partial sums t. */
static void NN(ln_bw_tasks)(int64_t t0, int64_t t1, void* arg) {
  NN(ln_job)* j = arg;
  const ral_tensor* const* o = j->o;
  const ral_tensor *g = j->g, *x = j->x, *mean = j->mean, *rstd = j->rstd;
  const T* wt = j->wt;
  int64_t N = j->N, M = j->M;
  int64_t esg = host_dtype_size(g->dtype), esx = host_dtype_size(x->dtype);
  int64_t esi = o[0] ? host_dtype_size(o[0]->dtype) : 0;
  T* buf = NN(scratch)((size_t)(3 * N + 1), &j->failed);
  if (!buf) return;
  for (int64_t t = t0; t < t1; t++) {
    double* pw = j->part ? j->part + (size_t)t * 2 * (size_t)N : NULL;
    for (int64_t r = M * t / j->ntasks; r < M * (t + 1) / j->ntasks; r++) {
      const T* gr = NN(row_in)(host_ptr(g) + r * N * esg, g->dtype, esg, N, buf);
      const T* xr = NN(row_in)(host_ptr(x) + r * N * esx, x->dtype, esx, N, buf + N);
      T mu = (T)host_load_f64(host_ptr(mean) + r * host_dtype_size(mean->dtype), mean->dtype);
      T rs = (T)host_load_f64(host_ptr(rstd) + r * host_dtype_size(rstd->dtype), rstd->dtype);
      char* pi = o[0] ? host_ptr(o[0]) + r * N * esi : NULL;
      T* gi = o[0] ? NN(row_out)(pi, o[0]->dtype, esi, buf + 2 * N) : NULL;
      NN(ln_bw_row)(N, gi, gr, xr, wt, mu, rs, pw);
      if (o[0]) NN(row_done)(pi, o[0]->dtype, esi, gi, N);
    }
  }
  free(buf);
}

/* grad_input / grad_weight / grad_bias of layer norm; a NULL output is not computed. */
static ral_status NN(layer_norm_bw_run)(const ral_tensor* const* o, const ral_tensor* g,
                                        const ral_tensor* x, const ral_tensor* mean,
                                        const ral_tensor* rstd, const ral_tensor* w, int64_t M,
                                        int64_t N) {
  /* tasks of row ranges, each with its own partial sums; fixed count, so the sum order
   * (and result) does not depend on which thread ran which task */
  int nth = M * N > HOST_GRAIN && M > 1 ? 2 * host_threads() : 1;
  if (nth > M) nth = (int)M;
  if (nth < 1) nth = 1;
  int want_wb = o[1] || o[2];
  T* wt = w ? malloc(sizeof(T) * (size_t)N) : NULL;
  /* per-task partial sums of g * xhat (weight) and g (bias) */
  double* part = want_wb ? calloc((size_t)nth * 2 * (size_t)N, sizeof(double)) : NULL;
  if ((w && !wt) || (want_wb && !part)) {
    free(wt);
    free(part);
    return host_error(RAL_ERROR_OUT_OF_MEMORY, "no memory for layer-norm scratch");
  }
  if (w) host_load_row(wt, TDT, host_ptr(w), host_dtype_size(w->dtype), w->dtype, N);
  NN(ln_job) j = {o, x, g, mean, rstd, wt, NULL, N, 0, 0, part, M, nth};
  host_parallel_for(nth, 1, NN(ln_bw_tasks), &j);
  int failed = j.failed;
  if (part) {
    for (int t = 1; t < nth; t++)
      for (int64_t k = 0; k < 2 * N; k++) part[k] += part[(size_t)t * 2 * (size_t)N + (size_t)k];
    if (o[1]) host_store_row(host_ptr(o[1]), host_dtype_size(o[1]->dtype), o[1]->dtype, part,
                             RAL_DTYPE_FLOAT64, N);
    if (o[2]) host_store_row(host_ptr(o[2]), host_dtype_size(o[2]->dtype), o[2]->dtype, part + N,
                             RAL_DTYPE_FLOAT64, N);
  }
  free(wt);
  free(part);
  return failed ? host_error(RAL_ERROR_OUT_OF_MEMORY, "no memory for row scratch") : RAL_OK;
}
