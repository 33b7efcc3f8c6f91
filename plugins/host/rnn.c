/*
 * rnn.c -- the fused LSTM cell ops ATen's nn.LSTM calls on every non-CPU device
 * (aten/src/ATen/native/RNN.cpp: LSTMCell uses _thnn_fused_lstm_cell when the input is
 * CUDA, XPU or PrivateUse1): one launch per cell and time step for the pointwise work
 * between the two gate GEMMs, forward and backward, instead of ~15 pointwise launches of
 * the decomposition (torch_fl/tiers/rnn_cells.py). Conventions are CUDA's
 * (aten/src/ATen/native/cuda/RNN.cu): gates [i, f, g, o] along dim 1, the workspace holds
 * the activated gates, which the backward reads. Contiguous [B, 4H] / [B, H] operands
 * (the manifest asks for them), float32/float16/bfloat16 computed in float; one pool task
 * per block of batch rows; the bias gradient sums the batch in row order (bits
 * independent of the thread budget).
 */
#include <stdlib.h>

#include "fastmath.h"
#include "host.h"
#include "pool.h"

typedef struct {
  const ral_tensor *ig, *hg, *cx, *bi, *bh;       /* forward inputs */
  const ral_tensor *ghy, *gcy, *cy, *ws;          /* backward inputs (cx shared) */
  const ral_tensor *hy, *o_cy, *o_ws, *gg, *gcx; /* outputs */
  int64_t B, H;
  int failed;
} lstm_job;

static const ral_tensor* opt(const ral_tensor* t) { return host_tensor_absent(t) ? NULL : t; }

/* Row b of a contiguous [B, n] tensor (n elements) into float, or zeros when absent. */
static void row(const ral_tensor* t, int64_t b, int64_t n, float* dst) {
  if (!t) {
    for (int64_t k = 0; k < n; k++) dst[k] = 0.0f;
    return;
  }
  host_load_float(dst, host_ptr(t) + b * n * host_dtype_size(t->dtype), t->dtype, n);
}

static void put(const ral_tensor* t, int64_t b, int64_t n, const float* src) {
  host_store_float(host_ptr(t) + b * n * host_dtype_size(t->dtype), t->dtype, src, n);
}

static float sigm(float x) { return HOST_SIGMOID(x); }
static float tanhf_(float x) { return HOST_TANH(x); }

static void forward_rows(int64_t b0, int64_t b1, void* arg) {
  lstm_job* j = arg;
  int64_t H = j->H, G = 4 * H;
  float* s = malloc((size_t)(4 * G + 3 * H) * sizeof(float));
  if (!s) {
    j->failed = 1;
    return;
  }
  float *ig = s, *hg = s + G, *bi = s + 2 * G, *bh = s + 3 * G, *cx = s + 4 * G, *cy = cx + H, *hy = cy + H;
  row(j->bi, 0, G, bi);
  row(j->bh, 0, G, bh);
  for (int64_t b = b0; b < b1; b++) {
    row(j->ig, b, G, ig);
    row(j->hg, b, G, hg);
    row(j->cx, b, H, cx);
    for (int64_t k = 0; k < G; k++) ig[k] += hg[k] + bi[k] + bh[k];
    for (int64_t k = 0; k < H; k++) {
      float i = sigm(ig[k]), f = sigm(ig[H + k]), g = tanhf_(ig[2 * H + k]), o = sigm(ig[3 * H + k]);
      ig[k] = i, ig[H + k] = f, ig[2 * H + k] = g, ig[3 * H + k] = o;
      cy[k] = f * cx[k] + i * g;
      hy[k] = o * tanhf_(cy[k]);
    }
    put(j->hy, b, H, hy);
    put(j->o_cy, b, H, cy);
    put(j->o_ws, b, G, ig);
  }
  free(s);
}

static ral_status shapes_ok(const ral_kernel_call* c, lstm_job* j, const ral_tensor* gates, const ral_tensor* state) {
  ral_status s = host_check_float32_or_half(c, 1);
  if (s != RAL_OK) return s;
  if (gates->ndim != 2 || state->ndim != 2 || gates->sizes[0] != state->sizes[0] || gates->sizes[1] != 4 * state->sizes[1])
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected gates [B, 4H] and state [B, H]");
  j->B = state->sizes[0];
  j->H = state->sizes[1];
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (host_tensor_absent(t)) continue;
    int64_t n = host_numel(t);
    if (n != j->B * j->H && n != 4 * j->B * j->H && n != 4 * j->H)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d has %lld elements; not [B, H], [B, 4H] or [4H]", i,
                       (long long)n);
  }
  return RAL_OK;
}

/* Rows per task: about 16K gate values. */
static int64_t grain(const lstm_job* j) { return j->H > 0 && 4096 / j->H > 1 ? 4096 / j->H : 1; }

/* _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) ->
 * (hy, cy, workspace). */
ral_status host_lstm_cell(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 3, 5, 0);
  if (s != RAL_OK) return s;
  lstm_job j = {.ig = host_in(c, 0), .hg = host_in(c, 1), .cx = host_in(c, 2), .bi = opt(host_in(c, 3)),
                .bh = opt(host_in(c, 4)), .hy = host_out(c, 0), .o_cy = host_out(c, 1), .o_ws = host_out(c, 2)};
  if ((s = shapes_ok(c, &j, j.ig, j.cx)) != RAL_OK) return s;
  if (host_numel(j.hg) != 4 * j.B * j.H || host_numel(j.o_ws) != 4 * j.B * j.H || host_numel(j.hy) != j.B * j.H ||
      host_numel(j.o_cy) != j.B * j.H || (j.bi && host_numel(j.bi) != 4 * j.H) || (j.bh && host_numel(j.bh) != 4 * j.H))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "gate, state or bias sizes do not match");
  if (j.B > 0) host_parallel_for(j.B, grain(&j), forward_rows, &j);
  return j.failed ? host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a row") : RAL_OK;
}

static void backward_rows(int64_t b0, int64_t b1, void* arg) {
  lstm_job* j = arg;
  int64_t H = j->H, G = 4 * H;
  float* s = malloc((size_t)(G + 5 * H) * sizeof(float));
  if (!s) {
    j->failed = 1;
    return;
  }
  float *ws = s, *ghy = s + G, *gcy = ghy + H, *cx = gcy + H, *cy = cx + H, *gcx = cy + H;
  for (int64_t b = b0; b < b1; b++) {
    row(j->ws, b, G, ws);
    row(j->ghy, b, H, ghy);
    row(j->gcy, b, H, gcy);
    row(j->cx, b, H, cx);
    row(j->cy, b, H, cy);
    for (int64_t k = 0; k < H; k++) {
      float i = ws[k], f = ws[H + k], g = ws[2 * H + k], o = ws[3 * H + k], t = tanhf_(cy[k]);
      float gc = ghy[k] * o * (1.0f - t * t) + gcy[k];
      ws[k] = gc * g * i * (1.0f - i);
      ws[H + k] = gc * cx[k] * f * (1.0f - f);
      ws[2 * H + k] = gc * i * (1.0f - g * g);
      ws[3 * H + k] = ghy[k] * t * o * (1.0f - o);
      gcx[k] = gc * f;
    }
    put(j->gg, b, G, ws);
    put(j->gcx, b, H, gcx);
  }
  free(s);
}

typedef struct {
  const ral_tensor *gg, *gb;
  int64_t B, G;
} bias_job;

/* grad_bias[k] = sum over b of grad_gates[b, k], rows in order, for columns [k0, k1). */
static void bias_cols(int64_t k0, int64_t k1, void* arg) {
  bias_job* j = arg;
  int64_t es = host_dtype_size(j->gg->dtype);
  for (int64_t k = k0; k < k1; k++) {
    float acc = 0.0f;
    for (int64_t b = 0; b < j->B; b++) acc += (float)host_load_f64(host_ptr(j->gg) + (b * j->G + k) * es, j->gg->dtype);
    host_store_value(host_ptr(j->gb) + k * host_dtype_size(j->gb->dtype), j->gb->dtype, acc, 0);
  }
}

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias) ->
 * (grad_gates, grad_cx, grad_bias?); absent incoming gradients are zeros. */
ral_status host_lstm_cell_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 3, 5, 1);
  if (s != RAL_OK) return s;
  lstm_job j = {.ghy = opt(host_in(c, 0)), .gcy = opt(host_in(c, 1)), .cx = host_in(c, 2), .cy = host_in(c, 3),
                .ws = host_in(c, 4), .gg = host_out(c, 0), .gcx = host_out(c, 1)};
  const ral_tensor* gb = opt(host_out(c, 2));
  if ((s = shapes_ok(c, &j, j.ws, j.cx)) != RAL_OK) return s;
  if (host_numel(j.cy) != j.B * j.H || host_numel(j.gg) != 4 * j.B * j.H || host_numel(j.gcx) != j.B * j.H ||
      (j.ghy && host_numel(j.ghy) != j.B * j.H) || (j.gcy && host_numel(j.gcy) != j.B * j.H) ||
      (gb && host_numel(gb) != 4 * j.H))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "gradient, state or workspace sizes do not match");
  if (j.B > 0) host_parallel_for(j.B, grain(&j), backward_rows, &j);
  if (j.failed) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a row");
  bias_job bj = {.gg = j.gg, .gb = gb, .B = j.B, .G = 4 * j.H};
  if (gb && bj.G > 0) host_parallel_for(bj.G, 256, bias_cols, &bj);
  return RAL_OK;
}
