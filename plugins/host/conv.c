/*
 * conv.c -- convolution (1d/2d/3d, stride, padding, dilation, groups, transposed) and its
 * backward, as im2col/col2im over the plugin's OpenBLAS GEMM on the pool.
 *
 * Regular (not transposed) convolutions are first offered to oneDNN (conv_dnnl.c, when the
 * build found libdnnl-dev and the library loads): float32, and bfloat16/float16 where the CPU
 * runs oneDNN's 16-bit primitives natively. It declines before writing anything, and
 * everything it does not take (transposed, a 16-bit type the CPU lacks, builds or machines
 * without libdnnl, TORCH_FL_HOST_DNNL=0) runs the im2col kernels below.
 *
 * Every kernel works on one "regular" geometry (a convolution from X to Y):
 *   X [N, Cx, I...]   Y [N, Cy, O...]   W [Cy, Cx/G, k...]
 *   O = (I + 2p - d(k-1) - 1) / s + 1
 * and three primitives over it, each per (sample, group) task:
 *   A  Y  = W @ im2col(X)               (a convolution's forward)
 *   B  X  = col2im(W^T @ Y)             (its input gradient)
 *   C  dW = sum_n Y_n @ im2col(X_n)^T   (its weight gradient)
 * A transposed convolution from x to y is the regular one from y to x run backwards:
 * forward = B, input gradient = A, weight gradient = C with the roles swapped.
 *
 * Operands may have any strides (NCHW, channels_last, views) and any floating dtype: each
 * task first reads its [C/G, spatial] slice into contiguous float scratch (float16 and
 * bfloat16 are widened there), so the GEMMs see dense float32 and the results are stored
 * back through the output's strides. float64 is not declared in the manifest (it would
 * lose precision in float32 GEMMs) and stays with the cpu tier.
 */
#include <stdlib.h>
#include <string.h>

#include "conv_dnnl.h"
#include "host.h"
#include "pool.h"

#define CONV_MAX_SPATIAL 3
/* im2col columns per block: bounds the scratch of a task to K x CONV_COLS floats. */
#define CONV_COL_FLOATS (1 << 20)
/* Fixed number of batch partitions for the weight gradient, independent of the thread
 * budget so the summation order (and the bits) do not depend on it. */
#define CONV_WGRAD_PARTS 8

/* An operand seen as [N, C, S0, S1, S2] (missing leading spatial dims have size 1). */
typedef struct {
  const ral_tensor* t;
  char* base;
  int32_t dtype;
  int64_t esize;
  int64_t n, c, sp[CONV_MAX_SPATIAL];       /* sizes */
  int64_t sn, sc, ss[CONV_MAX_SPATIAL];     /* strides in elements */
} conv_operand;

typedef struct {
  int64_t N, G, Cx, Cy, cxg, cyg;         /* channels per group: cxg = Cx / G */
  int64_t I[CONV_MAX_SPATIAL], O[CONV_MAX_SPATIAL], k[CONV_MAX_SPATIAL];
  int64_t s[CONV_MAX_SPATIAL], p[CONV_MAX_SPATIAL], d[CONV_MAX_SPATIAL];
  int64_t isp, osp, ksp; /* products of I, O, k */
  int64_t K;             /* cxg * ksp: rows of im2col */
} conv_geom;

static void operand_of(conv_operand* o, const ral_tensor* t) {
  int ns = t->ndim - 2;
  o->t = t;
  o->base = host_ptr(t);
  o->dtype = t->dtype;
  o->esize = host_dtype_size(t->dtype);
  o->n = t->sizes[0];
  o->c = t->sizes[1];
  o->sn = t->strides[0];
  o->sc = t->strides[1];
  for (int i = 0; i < CONV_MAX_SPATIAL; i++) {
    int src = i - (CONV_MAX_SPATIAL - ns);
    o->sp[i] = src < 0 ? 1 : t->sizes[2 + src];
    o->ss[i] = src < 0 ? 0 : t->strides[2 + src];
  }
}

/* Reads channels [c0, c0 + nc) of sample n into dst [nc, S0*S1*S2] as float. */
static void load_slice(const conv_operand* o, int64_t n, int64_t c0, int64_t nc, float* dst) {
  int64_t row = o->sp[2], es = o->esize;
  for (int64_t c = 0; c < nc; c++)
    for (int64_t a = 0; a < o->sp[0]; a++)
      for (int64_t b = 0; b < o->sp[1]; b++) {
        const char* src = o->base + (n * o->sn + (c0 + c) * o->sc + a * o->ss[0] + b * o->ss[1]) * es;
        float* out = dst + ((c * o->sp[0] + a) * o->sp[1] + b) * row;
        if (o->dtype == RAL_DTYPE_FLOAT32 && o->ss[2] == 1)
          memcpy(out, src, (size_t)row * sizeof(float));
        else
          host_load_row(out, RAL_DTYPE_FLOAT32, src, o->ss[2] * es, o->dtype, row);
      }
}

/* Writes src [nc, S0*S1*S2] (+ bias[c0 + c] when given) into channels [c0, c0 + nc) of n. */
static void store_slice(const conv_operand* o, int64_t n, int64_t c0, int64_t nc, float* src,
                        const float* bias) {
  int64_t row = o->sp[2], es = o->esize;
  for (int64_t c = 0; c < nc; c++) {
    float* cs = src + c * o->sp[0] * o->sp[1] * row;
    if (bias) {
      float bv = bias[c0 + c];
      for (int64_t i = 0; i < o->sp[0] * o->sp[1] * row; i++) cs[i] += bv;
    }
    for (int64_t a = 0; a < o->sp[0]; a++)
      for (int64_t b = 0; b < o->sp[1]; b++) {
        char* dst = o->base + (n * o->sn + (c0 + c) * o->sc + a * o->ss[0] + b * o->ss[1]) * es;
        const float* in = cs + (a * o->sp[1] + b) * row;
        if (o->dtype == RAL_DTYPE_FLOAT32 && o->ss[2] == 1)
          memcpy(dst, in, (size_t)row * sizeof(float));
        else
          host_store_row(dst, o->ss[2] * es, o->dtype, in, RAL_DTYPE_FLOAT32, row);
      }
  }
}

/* Output rows (o0, o1 pairs) per im2col block. */
static int64_t rows_per_block(const conv_geom* g) {
  int64_t per_row = g->K * g->O[2];
  int64_t r = per_row > 0 ? CONV_COL_FLOATS / per_row : 1;
  return r < 1 ? 1 : r;
}

/* im2col (back = 0): col[K, (r1 - r0) * O2] = the input patches of x [cxg, I...] for
 * output rows [r0, r1) (row = o0 * O1 + o1), zeros where they reach into the padding.
 * col2im (back = 1), its adjoint: x += those patches of col. */
static void patches(const conv_geom* g, float* x, int64_t r0, int64_t r1, float* col, int back) {
  int64_t O2 = g->O[2], L = (r1 - r0) * O2;
  for (int64_t ci = 0; ci < g->cxg; ci++)
    for (int64_t k0 = 0; k0 < g->k[0]; k0++)
      for (int64_t k1 = 0; k1 < g->k[1]; k1++)
        for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
          int64_t krow = ((ci * g->k[0] + k0) * g->k[1] + k1) * g->k[2] + k2;
          float* cr = col + krow * L;
          for (int64_t r = r0; r < r1; r++, cr += O2) {
            int64_t i0 = (r / g->O[1]) * g->s[0] - g->p[0] + k0 * g->d[0];
            int64_t i1 = (r % g->O[1]) * g->s[1] - g->p[1] + k1 * g->d[1];
            if (i0 < 0 || i0 >= g->I[0] || i1 < 0 || i1 >= g->I[1]) {
              if (!back) memset(cr, 0, (size_t)O2 * sizeof(float));
              continue;
            }
            float* xr = x + ((ci * g->I[0] + i0) * g->I[1] + i1) * g->I[2];
            int64_t off = k2 * g->d[2] - g->p[2], s2 = g->s[2], I2 = g->I[2];
            if (back) {
              for (int64_t o = 0; o < O2; o++) {
                int64_t i2 = o * s2 + off;
                if (i2 >= 0 && i2 < I2) xr[i2] += cr[o];
              }
            } else {
              for (int64_t o = 0; o < O2; o++) {
                int64_t i2 = o * s2 + off;
                cr[o] = (i2 >= 0 && i2 < I2) ? xr[i2] : 0.0f;
              }
            }
          }
        }
}

/* ---------------------------------------------------------------- primitives */
typedef struct {
  const conv_geom* g;
  const conv_operand *x, *y, *w_out; /* x: X role, y: Y role; w_out: the weight gradient */
  const float* w;                    /* [Cy, K] float */
  const float* bias;                 /* per-channel bias of the result, or NULL */
  float* wparts;                     /* C: [parts, Cy, K] */
  int back;                          /* prim_ab: B rather than A */
  int64_t parts;
  ral_status status;
} conv_job;

/* One task's scratch: its X slice, an im2col block, its Y slice (all float). */
typedef struct {
  float *xs, *col, *ys;
} conv_scratch;

static int scratch_alloc(conv_job* j, conv_scratch* s) {
  const conv_geom* g = j->g;
  s->xs = malloc((size_t)(g->cxg * g->isp) * sizeof(float));
  s->col = malloc((size_t)(g->K * rows_per_block(g) * g->O[2]) * sizeof(float));
  s->ys = malloc((size_t)(g->cyg * g->osp) * sizeof(float));
  if (s->xs && s->col && s->ys) return 1;
  j->status = RAL_ERROR_OUT_OF_MEMORY;
  return 0;
}

static void scratch_free(conv_scratch* s) {
  free(s->xs);
  free(s->col);
  free(s->ys);
}

/* A (j->back = 0), task t = (n, group): y[n, group] = W_g @ im2col(x[n, group]);
 * B (j->back = 1): x[n, group] = col2im(W_g^T @ y[n, group]). */
static void prim_ab(int64_t t0, int64_t t1, void* arg) {
  conv_job* j = arg;
  const conv_geom* g = j->g;
  int64_t rows = g->O[0] * g->O[1], rb = rows_per_block(g), O2 = g->O[2];
  conv_scratch sc;
  if (scratch_alloc(j, &sc)) {
    float *xs = sc.xs, *col = sc.col, *ys = sc.ys;
    for (int64_t t = t0; t < t1; t++) {
      int64_t n = t / g->G, grp = t % g->G;
      const float* wg = j->w + grp * g->cyg * g->K;
      if (j->back) {
        load_slice(j->y, n, grp * g->cyg, g->cyg, ys);
        memset(xs, 0, (size_t)(g->cxg * g->isp) * sizeof(float));
      } else {
        load_slice(j->x, n, grp * g->cxg, g->cxg, xs);
      }
      for (int64_t r0 = 0; r0 < rows; r0 += rb) {
        int64_t r1 = r0 + rb < rows ? r0 + rb : rows, L = (r1 - r0) * O2;
        if (j->back) {
          host_sgemm(1, 0, (int)g->K, (int)L, (int)g->cyg, 1.0f, wg, (int)g->K, ys + r0 * O2, (int)g->osp, 0.0f,
                     col, (int)L);
          patches(g, xs, r0, r1, col, 1);
        } else {
          patches(g, xs, r0, r1, col, 0);
          host_sgemm(0, 0, (int)g->cyg, (int)L, (int)g->K, 1.0f, wg, (int)g->K, col, (int)L, 0.0f, ys + r0 * O2,
                     (int)g->osp);
        }
      }
      if (j->back)
        store_slice(j->x, n, grp * g->cxg, g->cxg, xs, j->bias);
      else
        store_slice(j->y, n, grp * g->cyg, g->cyg, ys, j->bias);
    }
  }
  scratch_free(&sc);
}

/* C: task t = (part, group): wparts[part, group] = sum over the part's samples of
 * y[n, group] @ im2col(x[n, group])^T. */
static void prim_c(int64_t t0, int64_t t1, void* arg) {
  conv_job* j = arg;
  const conv_geom* g = j->g;
  int64_t rows = g->O[0] * g->O[1], rb = rows_per_block(g);
  conv_scratch sc;
  if (scratch_alloc(j, &sc)) {
    float *xs = sc.xs, *col = sc.col, *ys = sc.ys;
    for (int64_t t = t0; t < t1; t++) {
      int64_t part = t / g->G, grp = t % g->G;
      int64_t n0 = part * g->N / j->parts, n1 = (part + 1) * g->N / j->parts;
      float* dw = j->wparts + (part * g->Cy + grp * g->cyg) * g->K;
      memset(dw, 0, (size_t)(g->cyg * g->K) * sizeof(float));
      for (int64_t n = n0; n < n1; n++) {
        load_slice(j->x, n, grp * g->cxg, g->cxg, xs);
        load_slice(j->y, n, grp * g->cyg, g->cyg, ys);
        for (int64_t r0 = 0; r0 < rows; r0 += rb) {
          int64_t r1 = r0 + rb < rows ? r0 + rb : rows, L = (r1 - r0) * g->O[2];
          patches(g, xs, r0, r1, col, 0);
          host_sgemm(0, 1, (int)g->cyg, (int)g->K, (int)L, 1.0f, ys + r0 * g->O[2], (int)g->osp, col, (int)L,
                     1.0f, dw, (int)g->K);
        }
      }
    }
  }
  scratch_free(&sc);
}

/* ---------------------------------------------------------------- call parsing */
typedef struct {
  int64_t stride[CONV_MAX_SPATIAL], pad[CONV_MAX_SPATIAL], dil[CONV_MAX_SPATIAL];
  int64_t outpad[CONV_MAX_SPATIAL];
  int transposed;
  int64_t groups;
} conv_params;

/* An int list scalar as CONV_MAX_SPATIAL entries, right-aligned, `dflt` in front (a
 * one-entry list is repeated, as aten expands it). */
static int read_list(const ral_kernel_call* c, int at, int ns, int64_t dflt, int64_t* out) {
  int n;
  const int64_t* v = host_scalar_list(c, at, &n);
  for (int i = 0; i < CONV_MAX_SPATIAL; i++) out[i] = dflt;
  if (n != ns && n != 1 && n != 0) return 0;
  for (int i = 0; i < ns; i++) out[CONV_MAX_SPATIAL - ns + i] = n == 0 ? dflt : v[n == 1 ? 0 : i];
  return 1;
}

/* Scalars at `at`: stride, padding, dilation, transposed, output_padding, groups. */
static ral_status read_params(const ral_kernel_call* c, int at, int ns, conv_params* p) {
  if (!read_list(c, at, ns, 1, p->stride) || !read_list(c, at + 1, ns, 0, p->pad) ||
      !read_list(c, at + 2, ns, 1, p->dil) || !read_list(c, at + 4, ns, 0, p->outpad))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "stride/padding/dilation/output_padding do not match %d spatial dims", ns);
  p->transposed = (int)host_scalar_int(c, at + 3, 0);
  p->groups = host_scalar_int(c, at + 5, 1);
  for (int i = 0; i < CONV_MAX_SPATIAL; i++) {
    if (p->stride[i] < 1 || p->dil[i] < 1 || p->pad[i] < 0 || p->outpad[i] < 0)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "stride and dilation must be >= 1, padding >= 0");
  }
  if (p->groups < 1) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "groups must be >= 1");
  return RAL_OK;
}

/* The regular geometry from the X-role and Y-role operands and the weight; checks every
 * size against it. */
static ral_status make_geom(const ral_kernel_call* c, const conv_params* p, const conv_operand* x,
                            const conv_operand* y, const ral_tensor* w, conv_geom* g) {
  g->N = x->n;
  g->G = p->groups;
  g->Cx = x->c;
  g->Cy = y->c;
  if (y->n != g->N || g->Cx % g->G || g->Cy % g->G || w->ndim != x->t->ndim || w->sizes[0] != g->Cy ||
      w->sizes[1] != g->Cx / g->G)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input, weight and output channels do not match (groups %lld)",
                     (long long)g->G);
  g->cxg = g->Cx / g->G;
  g->cyg = g->Cy / g->G;
  g->isp = g->osp = g->ksp = 1;
  int ns = x->t->ndim - 2;
  for (int i = 0; i < CONV_MAX_SPATIAL; i++) {
    int src = i - (CONV_MAX_SPATIAL - ns);
    g->k[i] = src < 0 ? 1 : w->sizes[2 + src];
    g->I[i] = x->sp[i];
    g->O[i] = y->sp[i];
    g->s[i] = p->stride[i];
    g->p[i] = p->pad[i];
    g->d[i] = p->dil[i];
    int64_t span = g->I[i] + 2 * g->p[i] - g->d[i] * (g->k[i] - 1) - 1;
    /* regular: O is exactly this; transposed: X is the result, whose size carries the
     * output_padding on top of (O - 1) * s + span_of_kernel - 2p */
    int64_t want = span < 0 ? 0 : span / g->s[i] + 1;
    int ok = p->transposed ? (g->I[i] == (g->O[i] - 1) * g->s[i] - 2 * g->p[i] + g->d[i] * (g->k[i] - 1) +
                                               p->outpad[i] + 1)
                           : (g->O[i] == want && span >= 0);
    if (!ok) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "spatial sizes do not match the convolution");
    g->isp *= g->I[i];
    g->osp *= g->O[i];
    g->ksp *= g->k[i];
  }
  g->K = g->cxg * g->ksp;
  return RAL_OK;
}

static ral_status check_operands(const ral_kernel_call* c, int rank) {
  ral_status st = host_check_float32_or_half(c, 0);
  if (st != RAL_OK) return st;
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (host_tensor_absent(t)) continue;
    if (t->ndim != rank && t->ndim != 1)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d has rank %d, expected %d", i, t->ndim, rank);
  }
  if (rank < 3 || rank > 2 + CONV_MAX_SPATIAL)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "%d-d input: batched 1d, 2d or 3d convolutions only", rank);
  return RAL_OK;
}

/* Element offset of weight element (row r = o * (Cx/G) + i, kernel position e). */
static int64_t weight_offset(const ral_tensor* w, int64_t r, int64_t e) {
  int64_t off = (r / w->sizes[1]) * w->strides[0] + (r % w->sizes[1]) * w->strides[1];
  for (int k = w->ndim - 3; k >= 0; k--) {
    off += (e % w->sizes[2 + k]) * w->strides[2 + k];
    e /= w->sizes[2 + k];
  }
  return off;
}

/* The weight [Cy, Cx/G, k...] as dense float [Cy, K]. */
static float* weight_floats(const ral_tensor* w, int64_t K) {
  int64_t rows = w->sizes[0] * w->sizes[1], per = K / w->sizes[1];
  float* out = malloc((size_t)(w->sizes[0] * K) * sizeof(float));
  if (!out) return NULL;
  if (w->dtype == RAL_DTYPE_FLOAT32 && host_is_contiguous(w)) { /* the common case: one copy */
    memcpy(out, host_ptr(w), (size_t)(rows * per) * sizeof(float));
    return out;
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t e = 0; e < per; e++)
      out[r * per + e] =
          (float)host_load_f64(host_ptr(w) + weight_offset(w, r, e) * host_dtype_size(w->dtype), w->dtype);
  return out;
}

static float* vector_floats(const ral_tensor* b) {
  int64_t n = host_numel(b);
  float* out = malloc((size_t)(n ? n : 1) * sizeof(float));
  if (out)
    host_load_row(out, RAL_DTYPE_FLOAT32, host_ptr(b), b->ndim ? b->strides[0] * host_dtype_size(b->dtype) : 0,
                  b->dtype, n);
  return out;
}

static ral_status run_prim(host_range_fn fn, conv_job* j, int64_t tasks) {
  j->status = RAL_OK;
  if (tasks > 0) host_parallel_for(tasks, 1, fn, j);
  return j->status;
}

/* wparts[0][e] += wparts[1..parts)[e] for e in [e0, e1), partitions in order. */
static void sum_parts(int64_t e0, int64_t e1, void* arg) {
  conv_job* j = arg;
  int64_t n = j->g->Cy * j->g->K;
  for (int64_t p = 1; p < j->parts; p++)
    for (int64_t e = e0; e < e1; e++) j->wparts[e] += j->wparts[p * n + e];
}

/* C over every partition, then the partitions summed in order into the weight gradient. */
static ral_status weight_grad(conv_job* j, const ral_tensor* gw) {
  const conv_geom* g = j->g;
  j->parts = g->N < CONV_WGRAD_PARTS ? (g->N ? g->N : 1) : CONV_WGRAD_PARTS;
  j->wparts = malloc((size_t)(j->parts * g->Cy * g->K) * sizeof(float));
  if (!j->wparts) return RAL_ERROR_OUT_OF_MEMORY;
  ral_status st = RAL_OK;
  if (g->N == 0) memset(j->wparts, 0, (size_t)(g->Cy * g->K) * sizeof(float));
  else st = run_prim(prim_c, j, j->parts * g->G);
  if (st == RAL_OK) {
    float* sum = j->wparts;
    host_parallel_for(g->Cy * g->K, 1 << 14, sum_parts, j); /* each element in partition order */
    /* store [Cy, K] through the weight's strides: view it as [Cy, Cx/G, ksp] */
    if (gw->dtype == RAL_DTYPE_FLOAT32 && host_is_contiguous(gw))
      memcpy(host_ptr(gw), sum, (size_t)(g->Cy * g->K) * sizeof(float));
    else
      for (int64_t r = 0; r < g->Cy * g->cxg; r++)
        for (int64_t e = 0; e < g->ksp; e++)
          host_store_value(host_ptr(gw) + weight_offset(gw, r, e) * host_dtype_size(gw->dtype), gw->dtype,
                           sum[r * g->ksp + e], 0);
  }
  free(j->wparts);
  j->wparts = NULL;
  return st;
}

/* grad_bias[c] = sum of g over n and space. */
static void bias_grad(const conv_operand* go, const ral_tensor* gb) {
  int64_t sp = go->sp[0] * go->sp[1] * go->sp[2];
  float* row = malloc((size_t)(sp ? sp : 1) * sizeof(float));
  int64_t eb = host_dtype_size(gb->dtype);
  for (int64_t c = 0; c < go->c; c++) {
    double s = 0;
    for (int64_t n = 0; n < go->n && row; n++) {
      load_slice(go, n, c, 1, row);
      for (int64_t i = 0; i < sp; i++) s += row[i];
    }
    host_store_value(host_ptr(gb) + c * gb->strides[0] * eb, gb->dtype, s, 0);
  }
  free(row);
}

/* oneDNN's view of a regular (not transposed) call's parameters. */
static host_dnnl_geom dnnl_geom_of(const conv_params* p, int ns) {
  host_dnnl_geom d = {.groups = p->groups};
  for (int i = 0; i < ns; i++) {
    d.stride[i] = p->stride[CONV_MAX_SPATIAL - ns + i];
    d.padding[i] = p->pad[CONV_MAX_SPATIAL - ns + i];
    d.dilation[i] = p->dil[CONV_MAX_SPATIAL - ns + i];
  }
  return d;
}

/* convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
 * groups) -> out */
ral_status host_convolution(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 3, 6);
  if (st != RAL_OK) return st;
  const ral_tensor *out = host_out(c, 0), *in = host_in(c, 0), *w = host_in(c, 1), *b = host_in(c, 2);
  if ((st = check_operands(c, in->ndim)) != RAL_OK) return st;
  conv_params p;
  if ((st = read_params(c, 0, in->ndim - 2, &p)) != RAL_OK) return st;
  conv_operand oi, oo;
  operand_of(&oi, in);
  operand_of(&oo, out);
  conv_geom g;
  /* regular: X = input, Y = out; transposed: X = out, Y = input, W [Cin, Cout/G, k] */
  st = p.transposed ? make_geom(c, &p, &oo, &oi, w, &g) : make_geom(c, &p, &oi, &oo, w, &g);
  if (st != RAL_OK) return st;
  int has_bias = !host_tensor_absent(b);
  if (has_bias && host_numel(b) != out->sizes[1])
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bias has %lld elements, expected %lld",
                     (long long)host_numel(b), (long long)out->sizes[1]);
  if (!p.transposed) { /* oneDNN when the build has it and takes the dtype (conv_dnnl.c) */
    host_dnnl_geom dg = dnnl_geom_of(&p, in->ndim - 2);
    int r = host_dnnl_conv(HOST_DNNL_FORWARD, &dg, in, w, has_bias ? b : NULL, out);
    if (r == HOST_DNNL_DONE) return RAL_OK;
    if (r == HOST_DNNL_FAILED) return host_fail(c, RAL_ERROR_INTERNAL, "oneDNN convolution failed");
  }
  float* wf = weight_floats(w, g.K);
  float* bf = has_bias ? vector_floats(b) : NULL;
  if (!wf || (has_bias && !bf)) st = RAL_ERROR_OUT_OF_MEMORY;
  else {
    conv_job j = {.g = &g, .x = p.transposed ? &oo : &oi, .y = p.transposed ? &oi : &oo, .w = wf, .bias = bf,
                  .back = p.transposed};
    st = run_prim(prim_ab, &j, g.N * g.G);
  }
  free(wf);
  free(bf);
  return st == RAL_OK ? st : host_fail(c, st, "out of memory for convolution scratch");
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
 * transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias);
 * an output the mask leaves out arrives absent. */
ral_status host_convolution_backward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 3, 3, 8);
  if (st != RAL_OK) return st;
  const ral_tensor *go = host_in(c, 0), *in = host_in(c, 1), *w = host_in(c, 2);
  if ((st = check_operands(c, in->ndim)) != RAL_OK) return st;
  conv_params p;
  if ((st = read_params(c, 1, in->ndim - 2, &p)) != RAL_OK) return st;
  int nmask;
  const int64_t* mask = host_scalar_list(c, 7, &nmask);
  const ral_tensor* o[3];
  for (int k = 0; k < 3; k++) {
    const ral_tensor* t = host_out(c, k);
    o[k] = host_tensor_absent(t) || (nmask == 3 && !mask[k]) ? NULL : t;
  }
  if ((o[0] && !host_same_shape(o[0], in)) || (o[1] && !host_same_shape(o[1], w)) ||
      (o[2] && host_numel(o[2]) != go->sizes[1]))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "gradient outputs do not match input/weight/bias sizes");
  conv_operand og, oi, ogi;
  operand_of(&og, go);
  operand_of(&oi, in);
  conv_geom g;
  /* regular: X = input, Y = grad_output; transposed: X = grad_output, Y = input */
  st = p.transposed ? make_geom(c, &p, &og, &oi, w, &g) : make_geom(c, &p, &oi, &og, w, &g);
  if (st != RAL_OK) return st;
  if (!p.transposed) { /* oneDNN when the build has it and takes the dtype (conv_dnnl.c) */
    host_dnnl_geom dg = dnnl_geom_of(&p, in->ndim - 2);
    int r0 = o[0] ? host_dnnl_conv(HOST_DNNL_BACKWARD_DATA, &dg, o[0], w, NULL, go) : HOST_DNNL_DONE;
    if (r0 == HOST_DNNL_FAILED) return host_fail(c, RAL_ERROR_INTERNAL, "oneDNN convolution backward failed");
    if (r0 == HOST_DNNL_DONE) o[0] = NULL;
    /* the weight gradient with the bias gradient in the same pass when both are asked for */
    int r1 = o[1] ? host_dnnl_conv(HOST_DNNL_BACKWARD_WEIGHTS, &dg, in, o[1], o[2], go) : HOST_DNNL_DECLINED;
    if (r1 == HOST_DNNL_FAILED) return host_fail(c, RAL_ERROR_INTERNAL, "oneDNN convolution backward failed");
    if (r1 == HOST_DNNL_DONE) o[1] = o[2] = NULL;
  }
  float* wf = o[0] ? weight_floats(w, g.K) : NULL;
  if (o[0] && !wf) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for convolution scratch");
  if (o[0]) {
    operand_of(&ogi, o[0]);
    /* regular: grad_input = B(grad_output); transposed: grad_input = A(grad_output) */
    conv_job j = {.g = &g, .x = p.transposed ? &og : &ogi, .y = p.transposed ? &ogi : &og, .w = wf,
                  .back = !p.transposed};
    st = run_prim(prim_ab, &j, g.N * g.G);
  }
  free(wf);
  if (st == RAL_OK && o[1]) {
    conv_job j = {.g = &g, .x = p.transposed ? &og : &oi, .y = p.transposed ? &oi : &og};
    st = weight_grad(&j, o[1]);
  }
  if (st == RAL_OK && o[2]) bias_grad(&og, o[2]);
  return st == RAL_OK ? st : host_fail(c, st, "out of memory for convolution scratch");
}
