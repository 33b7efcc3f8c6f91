/*
 * attention.c -- fused attention forward (`_scaled_dot_product_flash_attention_for_cpu`):
 * out = softmax(scale * q k^T + mask, causal) v and its log-sum-exp, one query row per
 * task with an online softmax, so the [L, S] scores never exist. The same algorithm and
 * conventions as the OpenCL plugin's sdpa_fwd: any strides, a float (added) or bool (False =
 * not attended) mask broadcast to [B, H, L, S], causal top-left aligned, a row with no
 * visible key gives zeros and lse 0.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "host.h"
#include "pool.h"

#define SDPA_MAXE 256

typedef struct {
  int64_t B, H, L, S, E, Ev;
  int64_t sq[4], sk[4], sv[4], sm[4], so[4], sl[3];
  const float *q, *k, *v, *mf;
  const uint8_t* mb;
  float *out, *lse;
  int causal, has_mask;
  float scale;
} sdpa_args;

static void sdpa_rows(int64_t begin, int64_t end, void* ctx) {
  const sdpa_args* g = ctx;
  float qr[SDPA_MAXE], acc[SDPA_MAXE];
  for (int64_t r = begin; r < end; r++) {
    int64_t i = r % g->L, bh = r / g->L, h = bh % g->H, b = bh / g->H;
    const float* qi = g->q + b * g->sq[0] + h * g->sq[1] + i * g->sq[2];
    const float* kb = g->k + b * g->sk[0] + h * g->sk[1];
    const float* vb = g->v + b * g->sv[0] + h * g->sv[1];
    int64_t moff = b * g->sm[0] + h * g->sm[1] + i * g->sm[2];
    for (int64_t e = 0; e < g->E; e++) qr[e] = qi[e * g->sq[3]];
    for (int64_t e = 0; e < g->Ev; e++) acc[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    int64_t jend = g->causal ? (i + 1 < g->S ? i + 1 : g->S) : g->S;
    for (int64_t j = 0; j < jend; j++) {
      if (g->has_mask == 2 && !g->mb[moff + j * g->sm[3]]) continue;
      const float* kj = kb + j * g->sk[2];
      float s = 0.0f;
      for (int64_t e = 0; e < g->E; e++) s += qr[e] * kj[e * g->sk[3]];
      s *= g->scale;
      if (g->has_mask == 1) s += g->mf[moff + j * g->sm[3]];
      if (s == -INFINITY) continue; /* adds nothing (and exp(-inf + inf) would be NaN) */
      if (s > m) {
        float corr = expf(m - s);
        l *= corr;
        for (int64_t e = 0; e < g->Ev; e++) acc[e] *= corr;
        m = s;
      }
      float p = expf(s - m); /* NaN scores propagate */
      l += p;
      const float* vj = vb + j * g->sv[2];
      for (int64_t e = 0; e < g->Ev; e++) acc[e] += p * vj[e * g->sv[3]];
    }
    float* oi = g->out + b * g->so[0] + h * g->so[1] + i * g->so[2];
    float inv = l == 0.0f ? 0.0f : 1.0f / l;
    for (int64_t e = 0; e < g->Ev; e++) oi[e * g->so[3]] = acc[e] * inv;
    g->lse[b * g->sl[0] + h * g->sl[1] + i * g->sl[2]] = l == 0.0f ? 0.0f : m + logf(l);
  }
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

/* _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *,
 * attn_mask?, scale?) -> (output, logsumexp), float32. */
ral_status host_sdpa_forward(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 2, 4, 3);
  if (st != RAL_OK) return st;
  const ral_tensor *o = host_out(c, 0), *ls = host_out(c, 1), *q = host_in(c, 0), *k = host_in(c, 1);
  const ral_tensor *v = host_in(c, 2), *mk = host_in(c, 3);
  double dropout = 0.0;
  int64_t iv;
  if (host_scalar_num(c, 0, &dropout, &iv) && dropout != 0.0)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention has no dropout (dropout_p=%g)", dropout);
  sdpa_args g;
  memset(&g, 0, sizeof g);
  g.has_mask = host_tensor_absent(mk) ? 0 : mk->dtype == RAL_DTYPE_BOOL ? 2 : 1;
  const ral_tensor* all[6] = {o, ls, q, k, v, mk};
  for (int t = 0; t < 6; t++)
    if (!(t == 5 && g.has_mask != 1) && all[t]->dtype != RAL_DTYPE_FLOAT32)
      return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention tensor %d must be float32 (is %s)", t,
                       host_dtype_name(all[t]->dtype));
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || o->ndim != 4 || ls->ndim != 3)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention needs 4-D query/key/value");
  g.B = q->sizes[0], g.H = q->sizes[1], g.L = q->sizes[2], g.E = q->sizes[3];
  g.S = k->sizes[2], g.Ev = v->sizes[3];
  if (k->sizes[0] != g.B || v->sizes[0] != g.B || k->sizes[1] != g.H || v->sizes[1] != g.H ||
      k->sizes[3] != g.E || v->sizes[2] != g.S || o->sizes[0] != g.B || o->sizes[1] != g.H ||
      o->sizes[2] != g.L || o->sizes[3] != g.Ev || ls->sizes[0] != g.B || ls->sizes[1] != g.H || ls->sizes[2] != g.L)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fused attention shapes disagree (query, key, value, heads)");
  if (g.E > SDPA_MAXE || g.Ev > SDPA_MAXE)
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "fused attention head size > %d", SDPA_MAXE);
  for (int d = 0; d < 4; d++) {
    g.sq[d] = q->strides[d], g.sk[d] = k->strides[d], g.sv[d] = v->strides[d], g.so[d] = o->strides[d];
    if (d < 3) g.sl[d] = ls->strides[d];
  }
  int64_t mshape[4] = {g.B, g.H, g.L, g.S};
  if (g.has_mask && !bcast_strides4(mk, mshape, g.sm))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "attn_mask does not broadcast to [B, H, L, S]");
  g.q = base_of(q), g.k = base_of(k), g.v = base_of(v);
  g.out = (float*)base_of(o), g.lse = (float*)base_of(ls);
  if (g.has_mask == 1) g.mf = base_of(mk);
  if (g.has_mask == 2) g.mb = base_of(mk);
  g.causal = host_scalar_int(c, 1, 0) != 0;
  double sc;
  g.scale = host_scalar_num(c, 2, &sc, &iv) ? (float)sc : (g.E > 0 ? (float)(1.0 / sqrt((double)g.E)) : 1.0f);
  int64_t rows = g.B * g.H * g.L;
  if (rows > 0) host_parallel_for(rows, 8, sdpa_rows, &g);
  return RAL_OK;
}
