/*
 * rnn.c -- the fused LSTM and GRU cell ops ATen's nn.LSTM / nn.GRU call on every non-CPU
 * device (aten/src/ATen/native/RNN.cpp: LSTMCell and GRUCell use _thnn_fused_lstm_cell /
 * _thnn_fused_gru_cell when the input is CUDA, XPU or PrivateUse1): one launch per cell and
 * time step for the pointwise work between the two gate GEMMs, forward and backward,
 * instead of ~15 pointwise launches of the decomposition (torch_fl/tiers/rnn_cells.py).
 * Conventions are CUDA's (aten/src/ATen/native/cuda/RNN.cu); the checks and the row math
 * are shared with the OpenCL plugin (../common/rnn_cells.c). Contiguous operands (the
 * manifest asks for them); float32 rows are read and written in place, float16/bfloat16
 * rows through float scratch. One pool task per block of batch rows; bias gradients sum
 * the batch in row order (bits independent of the thread budget).
 */
#include <stdlib.h>

#include "host.h"
#include "pool.h"
#include "rnn_cells.h"

typedef struct {
  ral_rnn_kind kind;
  const ral_tensor* t[RAL_RNN_MAX_TENSORS]; /* call order; NULL: absent */
  int64_t B, H;
  int failed;
} rnn_job;

static void rows(int64_t b0, int64_t b1, void* arg) {
  rnn_job* j = arg;
  const ral_rnn_layout* L = &ral_rnn_layouts[j->kind];
  int n = L->n_out + L->n_in;
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += L->width[k] * j->H;
  float* s = malloc((size_t)(total > 0 ? total : 1) * sizeof(float));
  if (!s) {
    j->failed = 1;
    return;
  }
  float *r[RAL_RNN_MAX_TENSORS] = {0}, *tmp[RAL_RNN_MAX_TENSORS]; /* tmp: each tensor's scratch row */
  for (int64_t k = 0, at = 0; k < n; at += L->width[k] * j->H, k++) tmp[k] = s + at;
  for (int64_t b = b0; b < b1; b++) {
    for (int k = 0; k < n; k++) {
      const ral_tensor* t = j->t[k];
      int out = k < L->n_out;
      /* absent, a bias gradient (column sums below), or a bias row already loaded */
      if (!t || (out && L->bias[k]) || (L->bias[k] && b > b0)) continue;
      int64_t w = L->width[k] * j->H;
      char* p = host_ptr(t) + (L->bias[k] ? 0 : b) * w * host_dtype_size(t->dtype);
      if (t->dtype == RAL_DTYPE_FLOAT32) {
        r[k] = (float*)p;
      } else {
        r[k] = tmp[k];
        if (!out) host_load_float(tmp[k], p, t->dtype, w);
      }
    }
    ral_rnn_row(j->kind, j->H, r);
    for (int k = 0; k < L->n_out; k++) {
      const ral_tensor* t = j->t[k];
      if (t && !L->bias[k] && t->dtype != RAL_DTYPE_FLOAT32)
        host_store_float(host_ptr(t) + b * L->width[k] * j->H * host_dtype_size(t->dtype), t->dtype, r[k],
                         L->width[k] * j->H);
    }
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

static ral_status run(const ral_kernel_call* c, ral_rnn_kind kind) {
  const ral_rnn_layout* L = &ral_rnn_layouts[kind];
  ral_status s = host_check_arity(c, L->n_out, L->n_in, 0);
  if (s != RAL_OK) return s;
  rnn_job j = {.kind = kind};
  for (int k = 0; k < L->n_out + L->n_in; k++) j.t[k] = host_tensor_absent(&c->tensors[k]) ? NULL : &c->tensors[k];
  char why[160];
  if (!ral_rnn_check(kind, j.t, &j.B, &j.H, why, sizeof why)) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "%s", why);
  /* Rows per task: about 16K gate values. */
  int64_t grain = j.H > 0 && 4096 / j.H > 1 ? 4096 / j.H : 1;
  if (j.B > 0) host_parallel_for(j.B, grain, rows, &j);
  if (j.failed) return host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a row");
  for (int k = 0; k < L->n_out; k++) {
    if (L->bias_src[k] < 0 || !j.t[k]) continue;
    bias_job bj = {.gg = j.t[L->bias_src[k]], .gb = j.t[k], .B = j.B, .G = L->width[k] * j.H};
    if (bj.G > 0) host_parallel_for(bj.G, 256, bias_cols, &bj);
  }
  return RAL_OK;
}

/* _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) ->
 * (hy, cy, workspace). */
ral_status host_lstm_cell(const ral_kernel_call* c) { return run(c, RAL_RNN_LSTM); }

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias) ->
 * (grad_gates, grad_cx, grad_bias?); absent incoming gradients are zeros. */
ral_status host_lstm_cell_backward(const ral_kernel_call* c) { return run(c, RAL_RNN_LSTM_BWD); }

/* _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) ->
 * (hy, workspace). */
ral_status host_gru_cell(const ral_kernel_call* c) { return run(c, RAL_RNN_GRU); }

/* _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) -> (grad_input_gates,
 * grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?). */
ral_status host_gru_cell_backward(const ral_kernel_call* c) { return run(c, RAL_RNN_GRU_BWD); }
