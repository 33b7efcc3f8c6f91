/*
 * attention.c -- fused attention forward (`_scaled_dot_product_flash_attention_for_cpu`):
 * out = softmax(scale * q k^T + mask, causal) v and its log-sum-exp, the flash-attention way:
 * one task per (batch, head, block of SDPA_BQ queries); keys in blocks of SDPA_BK; each block's
 * scores are one GEMM, the online softmax rescales the running sums, and the probabilities
 * times the value block is a second GEMM (OpenBLAS, one thread per task). The [L, S] scores
 * never exist: a task holds SDPA_BQ x SDPA_BK of them.
 *
 * Same conventions as the OpenCL plugin's sdpa_fwd: any strides (a last dimension that is not
 * unit-stride is copied once per task), a float (added) or bool (False = not attended) mask
 * broadcast to [B, H, L, S], causal top-left aligned, a row with no visible key gives zeros
 * and lse 0, NaN scores propagate.
 *
 * float16 and bfloat16 (query, key, value, a float mask, output and gradients; logsumexp is
 * float32, as on CPU) compute in float32: operands are widened into the task's scratch once,
 * results rounded once when stored. CPU's kernel also rounds the probabilities to the input
 * type before the value GEMM; this one keeps them in float32, so it is the closer of the two
 * to a float32 computation.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fastmath.h"
#include "host.h"
#include "pool.h"

#define SDPA_BQ 32  /* queries per task: a causal tile wastes little above the diagonal */
#define SDPA_BK 256 /* keys per block: the score tile (32 x 256 floats) stays in L1/L2 */
#define SDPA_DECODE_GRAIN 32768 /* multiply-adds per pool chunk of query-length-1 tasks */

typedef struct {
  int64_t B, H, L, S, E, Ev, nqb;
  int64_t sq[4], sk[4], sv[4], sm[4], so[4], sl[3];
  const void *q, *k, *v, *mf; /* of dtype dt */
  const uint8_t* mb;
  void* out; /* of dtype dt */
  float* lse;
  int causal, has_mask, failed;
  int32_t dt; /* RAL_DTYPE_FLOAT32, _FLOAT16 or _BFLOAT16 */
  float scale;
} sdpa_args;

/* Element i of a float32/float16/bfloat16 array, as float. */
static inline float ld_f(const void* p, int64_t i, int32_t dt) {
  if (dt == RAL_DTYPE_FLOAT32) return ((const float*)p)[i];
  uint16_t h = ((const uint16_t*)p)[i];
  return dt == RAL_DTYPE_FLOAT16 ? ral_h2f(h) : ral_bf2f(h);
}

/* Stores v as element i of a float32/float16/bfloat16 array. */
static inline void st_f(void* p, int64_t i, int32_t dt, float v) {
  if (dt == RAL_DTYPE_FLOAT32)
    ((float*)p)[i] = v;
  else
    ((uint16_t*)p)[i] = dt == RAL_DTYPE_FLOAT16 ? ral_f2h(v) : ral_f2bf(v);
}

/* p advanced by i elements of dtype dt. */
static inline const void* at_el(const void* p, int64_t i, int32_t dt) {
  return (const char*)p + i * (dt == RAL_DTYPE_FLOAT32 ? 4 : 2);
}

/* Whether unit_rows can hand back an operand with row stride sr and column stride sc in place
 * (float32, unit columns, rows that do not overlap): otherwise it needs rows * cols floats of
 * scratch (a broadcast key, row stride 0, is one that does). */
static inline int in_place(int32_t dt, int64_t sr, int64_t sc, int64_t cols) {
  return dt == RAL_DTYPE_FLOAT32 && sc == 1 && sr >= cols;
}

/* A [rows, cols] matrix of dtype dt at p with row stride sr and column stride sc, as a
 * row-major float32 matrix with unit columns: p itself when it is one, else a copy into buf. */
static const float* unit_rows(const void* p, int32_t dt, int64_t rows, int64_t cols, int64_t sr, int64_t sc,
                              float* buf, int64_t* ld) {
  if (in_place(dt, sr, sc, cols)) {
    *ld = sr;
    return p;
  }
  for (int64_t i = 0; i < rows; i++)
    for (int64_t e = 0; e < cols; e++) buf[i * cols + e] = ld_f(p, i * sr + e * sc, dt);
  *ld = cols;
  return buf;
}

/* Masks one row of a score tile (keys j0 .. j0+nk of query i), folds it into the running max
 * m / sum l / accumulator acc, and leaves the probabilities in the row. */
static void softmax_tile_row(const sdpa_args* g, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t nk,
                             float* row, float* m, float* l, float* acc) {
  if (g->has_mask) {
    int64_t moff = b * g->sm[0] + h * g->sm[1] + i * g->sm[2] + j0 * g->sm[3];
    if (g->has_mask == 1)
      for (int64_t j = 0; j < nk; j++) row[j] += ld_f(g->mf, moff + j * g->sm[3], g->dt);
    else
      for (int64_t j = 0; j < nk; j++)
        if (!g->mb[moff + j * g->sm[3]]) row[j] = -INFINITY;
  }
  if (g->causal)
    for (int64_t j = i - j0 + 1 > 0 ? i - j0 + 1 : 0; j < nk; j++) row[j] = -INFINITY;
  float mx = -INFINITY;
  for (int64_t j = 0; j < nk; j++) mx = row[j] > mx ? row[j] : mx; /* NaN is skipped here... */
  float mnew = mx > *m ? mx : *m;
  if (mnew == -INFINITY) { /* nothing visible yet: the tile adds nothing */
    memset(row, 0, (size_t)nk * sizeof(float));
    return;
  }
  float corr = ral_expf(*m - mnew), sum = 0.0f;
  for (int64_t j = 0; j < nk; j++) {
    float p = ral_expf(row[j] - mnew); /* ...and propagates here */
    row[j] = p;
    sum += p;
  }
  *l = *l * corr + sum;
  if (corr != 1.0f)
    for (int64_t e = 0; e < g->Ev; e++) acc[e] *= corr;
  *m = mnew;
}

/* One query row (decoding: query length 1): the scores of a key block and the probabilities
 * times the value block are matrix-vector products. As OpenBLAS GEMMs ([1, E] @ [E, nk] and
 * [1, nk] @ [nk, Ev]) each call packed its whole right operand for one row; as ?gemv calls they
 * read it once. A key block is never empty here (nk >= 1), so the calls are never no-ops
 * that would skip beta. */
static void sdpa_task(const sdpa_args* g, int64_t t, float* tile, float* acc, float* ml, float* qbuf,
                      float* kbuf, float* vbuf) {
  int64_t qb = t % g->nqb, bh = t / g->nqb, h = bh % g->H, b = bh / g->H;
  int64_t i0 = qb * SDPA_BQ, nq = g->L - i0 < SDPA_BQ ? g->L - i0 : SDPA_BQ;
  int64_t jmax = g->causal ? (i0 + nq < g->S ? i0 + nq : g->S) : g->S;
  int64_t ldq, ldk, ldv;
  int32_t dt = g->dt;
  const float* qp = unit_rows(at_el(g->q, b * g->sq[0] + h * g->sq[1] + i0 * g->sq[2], dt), dt, nq, g->E, g->sq[2],
                              g->sq[3], qbuf, &ldq);
  const float* kp =
      unit_rows(at_el(g->k, b * g->sk[0] + h * g->sk[1], dt), dt, jmax, g->E, g->sk[2], g->sk[3], kbuf, &ldk);
  const float* vp =
      unit_rows(at_el(g->v, b * g->sv[0] + h * g->sv[1], dt), dt, jmax, g->Ev, g->sv[2], g->sv[3], vbuf, &ldv);
  float *m = ml, *l = ml + SDPA_BQ;
  for (int64_t r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
  memset(acc, 0, (size_t)(nq * g->Ev) * sizeof(float));
  for (int64_t j0 = 0; j0 < jmax; j0 += SDPA_BK) {
    int64_t nk = jmax - j0 < SDPA_BK ? jmax - j0 : SDPA_BK;
    if (nq == 1 && g->E > 0)
      host_sgemv(0, (int)nk, (int)g->E, g->scale, kp + j0 * ldk, (int)ldk, qp, 0.0f, tile);
    else if (g->E > 0)
      host_sgemm(0, 1, (int)nq, (int)nk, (int)g->E, g->scale, qp, (int)ldq, kp + j0 * ldk, (int)ldk, 0.0f, tile,
                 SDPA_BK);
    else
      for (int64_t r = 0; r < nq; r++) memset(tile + r * SDPA_BK, 0, (size_t)nk * sizeof(float));
    for (int64_t r = 0; r < nq; r++)
      softmax_tile_row(g, b, h, i0 + r, j0, nk, tile + r * SDPA_BK, m + r, l + r, acc + r * g->Ev);
    if (nq == 1 && g->Ev > 0)
      host_sgemv(1, (int)nk, (int)g->Ev, 1.0f, vp + j0 * ldv, (int)ldv, tile, 1.0f, acc);
    else if (g->Ev > 0)
      host_sgemm(0, 0, (int)nq, (int)g->Ev, (int)nk, 1.0f, tile, SDPA_BK, vp + j0 * ldv, (int)ldv, 1.0f, acc,
                 (int)g->Ev);
  }
  for (int64_t r = 0; r < nq; r++) {
    int64_t i = i0 + r;
    int64_t oi = b * g->so[0] + h * g->so[1] + i * g->so[2];
    float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r];
    for (int64_t e = 0; e < g->Ev; e++) st_f(g->out, oi + e * g->so[3], dt, acc[r * g->Ev + e] * inv);
    g->lse[b * g->sl[0] + h * g->sl[1] + i * g->sl[2]] = l[r] == 0.0f ? 0.0f : m[r] + logf(l[r]);
  }
}

static void sdpa_tasks(int64_t begin, int64_t end, void* ctx) {
  sdpa_args* g = ctx;
  /* scratch for this range: score tile, accumulator, running max and sum, and copies of
   * operands whose last dimension is not unit-stride */
  size_t tile = SDPA_BQ * SDPA_BK, acc = (size_t)(SDPA_BQ * g->Ev), ml = 2 * SDPA_BQ;
  size_t qn = in_place(g->dt, g->sq[2], g->sq[3], g->E) ? 0 : (size_t)(SDPA_BQ * g->E);
  size_t kn = in_place(g->dt, g->sk[2], g->sk[3], g->E) ? 0 : (size_t)(g->S * g->E);
  size_t vn = in_place(g->dt, g->sv[2], g->sv[3], g->Ev) ? 0 : (size_t)(g->S * g->Ev);
  float* buf = malloc((tile + acc + ml + qn + kn + vn) * sizeof(float));
  if (!buf) {
    __atomic_store_n(&g->failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t t = begin; t < end; t++)
    sdpa_task(g, t, buf, buf + tile, buf + tile + acc, buf + tile + acc + ml, buf + tile + acc + ml + qn,
              buf + tile + acc + ml + qn + kn);
  free(buf);
}

/* Element strides of t as [B, H, rows, cols], right-aligned, size-1/missing dims broadcast. */
static int bcast_strides4(const ral_tensor* t, const int64_t want[4], int64_t st[4]) {
  if (t->ndim > 4) return 0;
  for (int d = 0; d < 4; d++) {
    int src = d - (4 - t->ndim);
    if (src < 0)
      st[d] = 0;
    else if (t->sizes[src] == want[d])
      st[d] = want[d] == 1 ? 0 : t->strides[src];
    else if (t->sizes[src] == 1)
      st[d] = 0;
    else
      return 0;
  }
  return 1;
}

static const void* base_of(const ral_tensor* t) { return (const char*)t->data + t->byte_offset; }

/* Scalar 0 of the forward: dropout_p, which it does not implement (nor does aten's CPU
 * kernel, which raises for dropout_p > 0 too). */
static ral_status no_dropout(const ral_kernel_call* c) {
  double dropout = 0.0;
  int64_t iv;
  if (host_scalar_num(c, 0, &dropout, &iv) && dropout != 0.0)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention has no dropout (dropout_p=%g)", dropout);
  return RAL_OK;
}

/* Whether a bool mask says exactly what is_causal says (key j visible to query i iff j <= i)
 * for every batch and head it is broadcast over. Compiled models pass causal attention this
 * way (transformers builds the mask explicitly under torch.compile), and the causal path
 * skips the tiles above the diagonal: GPT-2's [4, 4, 128, 64] attention forward and backward
 * took 12.8 ms per training step with the mask against 9.7 ms causal. Returns at the first
 * element that differs, so another mask costs a few reads. */
static int bool_mask_is_causal(const sdpa_args* g) {
  int64_t nb = g->sm[0] ? g->B : 1, nh = g->sm[1] ? g->H : 1;
  for (int64_t b = 0; b < nb; b++)
    for (int64_t h = 0; h < nh; h++)
      for (int64_t i = 0; i < g->L; i++) {
        const uint8_t* row = g->mb + b * g->sm[0] + h * g->sm[1] + i * g->sm[2];
        for (int64_t j = 0; j < g->S; j++)
          if ((row[j * g->sm[3]] != 0) != (j <= i)) return 0;
      }
  return 1;
}

/* The mask's broadcast strides and pointer, is_causal (scalar 1) and scale (scalar 2, default
 * 1/sqrt(E)) into g, whose shapes and has_mask are set. A bool mask equal to the causal one
 * becomes is_causal. */
static ral_status sdpa_mask_and_scalars(const ral_kernel_call* c, const ral_tensor* mk, sdpa_args* g) {
  int64_t mshape[4] = {g->B, g->H, g->L, g->S}, iv;
  if (g->has_mask && !bcast_strides4(mk, mshape, g->sm))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "attn_mask does not broadcast to [B, H, L, S]");
  if (g->has_mask == 1) g->mf = base_of(mk);
  if (g->has_mask == 2) g->mb = base_of(mk);
  g->causal = host_scalar_int(c, 1, 0) != 0;
  if (g->has_mask == 2 && !g->causal && g->L > 0 && g->S > 0 && bool_mask_is_causal(g)) {
    g->has_mask = 0;
    g->causal = 1;
  }
  double sc;
  g->scale = host_scalar_num(c, 2, &sc, &iv) ? (float)sc : (g->E > 0 ? (float)(1.0 / sqrt((double)g->E)) : 1.0f);
  return RAL_OK;
}

/* The dtype every tensor of a call has except logsumexp (float32) and a bool mask: query's,
 * which must be float32, float16 or bfloat16. n tensors in all; lse_at and mask_at index them. */
static ral_status sdpa_dtypes(const ral_kernel_call* c, const ral_tensor* const* all, int n, int lse_at, int mask_at,
                              int has_mask, int32_t query_dt, int32_t* dt) {
  if (query_dt != RAL_DTYPE_FLOAT32 && query_dt != RAL_DTYPE_FLOAT16 && query_dt != RAL_DTYPE_BFLOAT16)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention computes float32, float16 or bfloat16 (query is %s)",
                     host_dtype_name(query_dt));
  for (int t = 0; t < n; t++) {
    if (t == mask_at && has_mask != 1) continue;
    int32_t want = t == lse_at ? RAL_DTYPE_FLOAT32 : query_dt;
    if (all[t]->dtype != want)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention tensor %d must be %s (is %s)", t,
                       host_dtype_name(want), host_dtype_name(all[t]->dtype));
  }
  *dt = query_dt;
  return RAL_OK;
}

/* _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *,
 * attn_mask?, scale?) -> (output, logsumexp): float32, float16 or bfloat16, logsumexp float32. */
ral_status host_sdpa_forward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 2, 4, 3);
  if (st != RAL_OK) return st;
  const ral_tensor *o = host_out(c, 0), *ls = host_out(c, 1), *q = host_in(c, 0), *k = host_in(c, 1);
  const ral_tensor *v = host_in(c, 2), *mk = host_in(c, 3);
  if ((st = no_dropout(c)) != RAL_OK) return st;
  sdpa_args g;
  memset(&g, 0, sizeof g);
  g.has_mask = host_tensor_absent(mk) ? 0 : mk->dtype == RAL_DTYPE_BOOL ? 2 : 1;
  const ral_tensor* all[6] = {o, ls, q, k, v, mk};
  if ((st = sdpa_dtypes(c, all, 6, 1, 5, g.has_mask, q->dtype, &g.dt)) != RAL_OK) return st;
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || o->ndim != 4 || ls->ndim != 3)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention needs 4-D query/key/value");
  g.B = q->sizes[0], g.H = q->sizes[1], g.L = q->sizes[2], g.E = q->sizes[3];
  g.S = k->sizes[2], g.Ev = v->sizes[3];
  if (k->sizes[0] != g.B || v->sizes[0] != g.B || k->sizes[1] != g.H || v->sizes[1] != g.H ||
      k->sizes[3] != g.E || v->sizes[2] != g.S || o->sizes[0] != g.B || o->sizes[1] != g.H ||
      o->sizes[2] != g.L || o->sizes[3] != g.Ev || ls->sizes[0] != g.B || ls->sizes[1] != g.H || ls->sizes[2] != g.L)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention shapes disagree (query, key, value, heads)");
  for (int d = 0; d < 4; d++) {
    g.sq[d] = q->strides[d], g.sk[d] = k->strides[d], g.sv[d] = v->strides[d], g.so[d] = o->strides[d];
    if (d < 3) g.sl[d] = ls->strides[d];
  }
  if ((st = sdpa_mask_and_scalars(c, mk, &g)) != RAL_OK) return st;
  g.q = base_of(q), g.k = base_of(k), g.v = base_of(v);
  g.out = (void*)base_of(o), g.lse = (float*)base_of(ls);
  g.nqb = (g.L + SDPA_BQ - 1) / SDPA_BQ;
  int64_t tasks = g.B * g.H * g.nqb;
  /* a decode task (one query) is S * (E + Ev) multiply-adds: tasks go to the pool in groups of
   * at least ~SDPA_DECODE_GRAIN of them, so a short call does not pay a helper's wake-up */
  int64_t grain = 1, work = g.S * (g.E + g.Ev);
  if (g.L == 1 && work < SDPA_DECODE_GRAIN) grain = SDPA_DECODE_GRAIN / (work > 0 ? work : 1);
  if (tasks > 0) host_parallel_for(tasks, grain, sdpa_tasks, &g);
  if (g.failed) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "no memory for the attention scratch");
  return RAL_OK;
}

/* ---------------------------------------------------------------- backward
 * _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out,
 * logsumexp, dropout_p, is_causal, *, attn_mask?, scale?) -> (grad_query, grad_key, grad_value):
 * one task per (batch, head). The probabilities are recomputed from the log-sum-exp the
 * forward saved (P = exp(scale q k^T + mask - lse), hidden keys 0), then
 * dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)) * scale, dQ = dS K, dK = dS^T Q:
 * five GEMMs on an [L, S] tile that lives only inside the task. */
typedef struct {
  sdpa_args f; /* shapes, q/k/v/mask, causal, scale, failed; out and lse are inputs here */
  int64_t sdo[4], sgq[4], sgk[4], sgv[4];
  const void *dout, *o; /* of dtype f.dt */
  const float* lse_in;
  void *gq, *gk, *gv; /* of dtype f.dt */
} sdpa_bwd_args;

static void store_rows(void* dst, int32_t dt, const int64_t st[4], int64_t b, int64_t h, const float* src,
                       int64_t rows, int64_t cols) {
  int64_t base = b * st[0] + h * st[1];
  for (int64_t i = 0; i < rows; i++)
    for (int64_t e = 0; e < cols; e++) st_f(dst, base + i * st[2] + e * st[3], dt, src[i * cols + e]);
}

static void sdpa_bwd_task(const sdpa_bwd_args* a, int64_t t, float* buf) {
  const sdpa_args* g = &a->f;
  int64_t h = t % g->H, b = t / g->H, L = g->L, S = g->S, E = g->E, Ev = g->Ev;
  float *p = buf, *ds = p + L * S, *gq = ds + L * S, *gk = gq + L * E, *gv = gk + S * E;
  float *qb = gv + S * Ev, *kb = qb + L * E, *vb = kb + S * E, *dob = vb + S * Ev;
  int64_t ldq, ldk, ldv, ldo;
  int32_t dt = g->dt;
  const float* qp = unit_rows(at_el(g->q, b * g->sq[0] + h * g->sq[1], dt), dt, L, E, g->sq[2], g->sq[3], qb, &ldq);
  const float* kp = unit_rows(at_el(g->k, b * g->sk[0] + h * g->sk[1], dt), dt, S, E, g->sk[2], g->sk[3], kb, &ldk);
  const float* vp = unit_rows(at_el(g->v, b * g->sv[0] + h * g->sv[1], dt), dt, S, Ev, g->sv[2], g->sv[3], vb, &ldv);
  const float* dop =
      unit_rows(at_el(a->dout, b * a->sdo[0] + h * a->sdo[1], dt), dt, L, Ev, a->sdo[2], a->sdo[3], dob, &ldo);
  if (E > 0)
    host_sgemm(0, 1, (int)L, (int)S, (int)E, g->scale, qp, (int)ldq, kp, (int)ldk, 0.0f, p, (int)S);
  else
    memset(p, 0, (size_t)(L * S) * sizeof(float));
  for (int64_t i = 0; i < L; i++) {
    float* row = p + i * S;
    if (g->has_mask) {
      int64_t moff = b * g->sm[0] + h * g->sm[1] + i * g->sm[2];
      if (g->has_mask == 1)
        for (int64_t j = 0; j < S; j++) row[j] += ld_f(g->mf, moff + j * g->sm[3], dt);
      else
        for (int64_t j = 0; j < S; j++)
          if (!g->mb[moff + j * g->sm[3]]) row[j] = -INFINITY;
    }
    float m = a->lse_in[b * g->sl[0] + h * g->sl[1] + i * g->sl[2]];
    int64_t vis = g->causal ? (i + 1 < S ? i + 1 : S) : S;
    for (int64_t j = 0; j < vis; j++) row[j] = ral_expf(row[j] - m); /* exp(-inf) = 0: hidden keys */
    for (int64_t j = vis; j < S; j++) row[j] = 0.0f;
  }
  if (Ev > 0) {
    host_sgemm(1, 0, (int)S, (int)Ev, (int)L, 1.0f, p, (int)S, dop, (int)ldo, 0.0f, gv, (int)Ev);
    host_sgemm(0, 1, (int)L, (int)S, (int)Ev, 1.0f, dop, (int)ldo, vp, (int)ldv, 0.0f, ds, (int)S);
  } else
    memset(ds, 0, (size_t)(L * S) * sizeof(float));
  int64_t ob = b * g->so[0] + h * g->so[1];
  for (int64_t i = 0; i < L; i++) {
    float delta = 0.0f;
    for (int64_t e = 0; e < Ev; e++) delta += dop[i * ldo + e] * ld_f(a->o, ob + i * g->so[2] + e * g->so[3], dt);
    float *dsr = ds + i * S, *pr = p + i * S;
    for (int64_t j = 0; j < S; j++) dsr[j] = pr[j] * (dsr[j] - delta) * g->scale;
  }
  if (E > 0) {
    host_sgemm(0, 0, (int)L, (int)E, (int)S, 1.0f, ds, (int)S, kp, (int)ldk, 0.0f, gq, (int)E);
    host_sgemm(1, 0, (int)S, (int)E, (int)L, 1.0f, ds, (int)S, qp, (int)ldq, 0.0f, gk, (int)E);
  }
  store_rows(a->gq, dt, a->sgq, b, h, gq, L, E);
  store_rows(a->gk, dt, a->sgk, b, h, gk, S, E);
  store_rows(a->gv, dt, a->sgv, b, h, gv, S, Ev);
}

static void sdpa_bwd_tasks(int64_t begin, int64_t end, void* ctx) {
  sdpa_bwd_args* a = ctx;
  const sdpa_args* g = &a->f;
  size_t L = (size_t)g->L, S = (size_t)g->S, E = (size_t)g->E, Ev = (size_t)g->Ev;
  size_t n = 2 * L * S + 2 * (L * E + S * E + S * Ev) + L * Ev;
  float* buf = malloc((n ? n : 1) * sizeof(float));
  if (!buf) {
    __atomic_store_n(&a->f.failed, 1, __ATOMIC_RELAXED);
    return;
  }
  for (int64_t t = begin; t < end; t++) sdpa_bwd_task(a, t, buf);
  free(buf);
}

ral_status host_sdpa_backward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 3, 7, 3);
  if (st != RAL_OK) return st;
  const ral_tensor *gq = host_out(c, 0), *gk = host_out(c, 1), *gv = host_out(c, 2);
  const ral_tensor *dout = host_in(c, 0), *q = host_in(c, 1), *k = host_in(c, 2), *v = host_in(c, 3);
  const ral_tensor *o = host_in(c, 4), *ls = host_in(c, 5), *mk = host_in(c, 6);
  /* dropout_p is ignored, as aten's CPU kernel ignores it: the forward this differentiates
   * refuses dropout (here and on CPU), so no element was dropped. Refusing it here made the
   * manifest entry promise more than the kernel did for a call CPU serves. */
  sdpa_bwd_args a;
  memset(&a, 0, sizeof a);
  sdpa_args* g = &a.f;
  g->has_mask = host_tensor_absent(mk) ? 0 : mk->dtype == RAL_DTYPE_BOOL ? 2 : 1;
  const ral_tensor* all[10] = {gq, gk, gv, dout, q, k, v, o, ls, mk};
  if ((st = sdpa_dtypes(c, all, 10, 8, 9, g->has_mask, q->dtype, &g->dt)) != RAL_OK) return st;
  for (int t = 0; t < 8; t++)
    if (all[t]->ndim != 4) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention backward needs 4-D tensors");
  if (ls->ndim != 3) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "logsumexp must be [B, H, L]");
  g->B = q->sizes[0], g->H = q->sizes[1], g->L = q->sizes[2], g->E = q->sizes[3];
  g->S = k->sizes[2], g->Ev = v->sizes[3];
  const int64_t want[8][4] = {{g->B, g->H, g->L, g->E}, {g->B, g->H, g->S, g->E}, {g->B, g->H, g->S, g->Ev},
                              {g->B, g->H, g->L, g->Ev}, {g->B, g->H, g->L, g->E}, {g->B, g->H, g->S, g->E},
                              {g->B, g->H, g->S, g->Ev}, {g->B, g->H, g->L, g->Ev}};
  for (int t = 0; t < 8; t++)
    for (int d = 0; d < 4; d++)
      if (all[t]->sizes[d] != want[t][d])
        return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention backward shapes disagree (tensor %d)", t);
  if (ls->sizes[0] != g->B || ls->sizes[1] != g->H || ls->sizes[2] != g->L)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "logsumexp must be [B, H, L]");
  for (int d = 0; d < 4; d++) {
    g->sq[d] = q->strides[d], g->sk[d] = k->strides[d], g->sv[d] = v->strides[d], g->so[d] = o->strides[d];
    a.sdo[d] = dout->strides[d], a.sgq[d] = gq->strides[d], a.sgk[d] = gk->strides[d], a.sgv[d] = gv->strides[d];
    if (d < 3) g->sl[d] = ls->strides[d];
  }
  if ((st = sdpa_mask_and_scalars(c, mk, g)) != RAL_OK) return st;
  g->q = base_of(q), g->k = base_of(k), g->v = base_of(v);
  a.dout = base_of(dout), a.o = base_of(o), a.lse_in = base_of(ls);
  a.gq = (void*)base_of(gq), a.gk = (void*)base_of(gk), a.gv = (void*)base_of(gv);
  if (g->L == 0 || g->S == 0) /* the caller takes the math path for empty sequences */
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention backward with an empty sequence");
  int64_t tasks = g->B * g->H;
  if (tasks > 0) host_parallel_for(tasks, 1, sdpa_bwd_tasks, &a);
  if (g->failed) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "no memory for the attention backward scratch");
  return RAL_OK;
}
