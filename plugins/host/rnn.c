/*
 * rnn.c -- the fused LSTM and GRU cell ops ATen's nn.LSTM / nn.GRU call on every non-CPU
 * device (aten/src/ATen/native/RNN.cpp: LSTMCell and GRUCell use _thnn_fused_lstm_cell /
 * _thnn_fused_gru_cell when the input is CUDA, XPU or PrivateUse1): one launch per cell and
 * time step for the pointwise work between the two gate GEMMs, forward and backward,
 * instead of ~15 pointwise launches of the decomposition (torch_fl/tiers/rnn_cells.py).
 * Conventions are CUDA's (aten/src/ATen/native/cuda/RNN.cu), the row math is shared with
 * the OpenCL plugin (../common/rnn_cells.c). Contiguous operands (the manifest asks for
 * them); float32 rows are read and written in place, float16/bfloat16 rows through float
 * scratch. One pool task per block of batch rows; bias gradients sum the batch in row
 * order (bits independent of the thread budget).
 */
#include <stdlib.h>

#include "host.h"
#include "pool.h"
#include "rnn_cells.h"

/* Operands of one cell op: at most 6 inputs, 5 outputs (absent ones NULL), their row
 * widths in units of H (gates 3 or 4, state 1, workspace 4 or 5, bias: a single row). */
enum { RNN_MAX = 11 };
typedef struct {
  const ral_tensor* t[RNN_MAX];
  int width[RNN_MAX], is_out[RNN_MAX], bias[RNN_MAX];
  int n;
  int64_t B, H;
  int kind; /* RNN_* */
  int failed;
} rnn_job;

enum { RNN_LSTM, RNN_LSTM_BWD, RNN_GRU, RNN_GRU_BWD };

static const ral_tensor* opt(const ral_tensor* t) { return host_tensor_absent(t) ? NULL : t; }

static void add(rnn_job* j, const ral_tensor* t, int width, int is_out, int bias) {
  j->t[j->n] = t ? opt(t) : NULL;
  j->width[j->n] = width, j->is_out[j->n] = is_out, j->bias[j->n] = bias;
  j->n++;
}

/* The float row of operand k for batch row b: in place for float32, else through `tmp`
 * (loaded for inputs); NULL for an absent operand. */
static float* row_of(const rnn_job* j, int k, int64_t b, float* tmp) {
  const ral_tensor* t = j->t[k];
  if (!t) return NULL;
  int64_t n = j->width[k] * j->H, r = j->bias[k] ? 0 : b;
  char* p = host_ptr(t) + r * n * host_dtype_size(t->dtype);
  if (t->dtype == RAL_DTYPE_FLOAT32) return (float*)p;
  if (!j->is_out[k]) host_load_float(tmp, p, t->dtype, n);
  return tmp;
}

static void rows(int64_t b0, int64_t b1, void* arg) {
  rnn_job* j = arg;
  int64_t H = j->H, total = 0;
  for (int k = 0; k < j->n; k++) total += j->width[k] * H;
  float* s = malloc((size_t)(total > 0 ? total : 1) * sizeof(float));
  if (!s) {
    j->failed = 1;
    return;
  }
  int first_bias_row = 1;
  float* r[RNN_MAX];
  for (int64_t b = b0; b < b1; b++) {
    float* tmp = s;
    for (int k = 0; k < j->n; k++) {
      /* a bias row is loaded once per task */
      if (!(j->bias[k] && !first_bias_row)) r[k] = row_of(j, k, b, tmp);
      tmp += j->width[k] * H;
    }
    first_bias_row = 0;
    switch (j->kind) {
      case RNN_LSTM: /* ig hg cx bi bh | hy cy ws */
        ral_lstm_cell_row(H, r[0], r[1], r[3], r[4], r[2], r[5], r[6], r[7]);
        break;
      case RNN_LSTM_BWD: /* ghy gcy cx cy ws | gg gcx */
        ral_lstm_cell_backward_row(H, r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
        break;
      case RNN_GRU: /* ig hg hx bi bh | hy ws */
        ral_gru_cell_row(H, r[0], r[1], r[3], r[4], r[2], r[5], r[6]);
        break;
      default: /* ghy ws | gig ghg ghx */
        ral_gru_cell_backward_row(H, r[0], r[1], r[2], r[3], r[4]);
        break;
    }
    for (int k = 0; k < j->n; k++) {
      const ral_tensor* t = j->t[k];
      if (t && j->is_out[k] && t->dtype != RAL_DTYPE_FLOAT32)
        host_store_float(host_ptr(t) + b * j->width[k] * H * host_dtype_size(t->dtype), t->dtype, r[k],
                         j->width[k] * H);
    }
  }
  free(s);
}

/* Every present operand has its expected element count (B rows of width * H, or width *
 * H for a bias); the gates and the state fix B and H. */
static ral_status run(const ral_kernel_call* c, rnn_job* j, const ral_tensor* gates, int gate_width,
                      const ral_tensor* state) {
  ral_status s = host_check_float32_or_half(c, 1);
  if (s != RAL_OK) return s;
  if (gates->ndim != 2 || state->ndim != 2 || gates->sizes[0] != state->sizes[0] ||
      gates->sizes[1] != gate_width * state->sizes[1])
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected gates [B, %dH] and state [B, H], got [%lld, %lld] and %dd",
                     gate_width, (long long)(gates->ndim > 0 ? gates->sizes[0] : 0),
                     (long long)(gates->ndim > 1 ? gates->sizes[1] : 0), (int)state->ndim);
  j->B = state->sizes[0];
  j->H = state->sizes[1];
  for (int k = 0; k < j->n; k++) {
    if (!j->t[k]) continue;
    int64_t want = j->width[k] * j->H * (j->bias[k] ? 1 : j->B), n = host_numel(j->t[k]);
    if (n != want)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "%s %d has %lld elements, expected %lld",
                       j->is_out[k] ? "output" : "operand", k, (long long)n, (long long)want);
  }
  /* Rows per task: about 16K gate values. */
  int64_t grain = j->H > 0 && 4096 / j->H > 1 ? 4096 / j->H : 1;
  if (j->B > 0) host_parallel_for(j->B, grain, rows, j);
  return j->failed ? host_fail(c, RAL_ERROR_OUT_OF_MEMORY, "out of memory for a row") : RAL_OK;
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

static ral_status bias_grad(const ral_kernel_call* c, const ral_tensor* gg, const ral_tensor* gb, int64_t G) {
  if (!gb) return RAL_OK;
  if (host_numel(gb) != G) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bias gradient has the wrong size");
  bias_job bj = {.gg = gg, .gb = gb, .B = G > 0 ? host_numel(gg) / G : 0, .G = G};
  if (G > 0) host_parallel_for(G, 256, bias_cols, &bj);
  return RAL_OK;
}

/* The forward cells: inputs (input_gates, hidden_gates, state, input_bias?, hidden_bias?),
 * gates G * H wide; outputs of the given widths, all required. */
static ral_status cell_forward(const ral_kernel_call* c, int kind, int G, const int* out_width, int n_out) {
  ral_status s = host_check_arity(c, n_out, 5, 0);
  if (s != RAL_OK) return s;
  rnn_job j = {.kind = kind};
  for (int k = 0; k < 5; k++) add(&j, host_in(c, k), k == 2 ? 1 : G, 0, k >= 3);
  for (int k = 0; k < n_out; k++) add(&j, host_out(c, k), out_width[k], 1, 0);
  for (int k = 0; k < j.n; k++)
    if (!j.t[k] && !j.bias[k]) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "gates, state and every output are required");
  if (host_numel(j.t[1]) != host_numel(j.t[0]))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input and hidden gates differ in size");
  return run(c, &j, j.t[0], G, j.t[2]);
}

/* _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) ->
 * (hy, cy, workspace). */
ral_status host_lstm_cell(const ral_kernel_call* c) {
  static const int width[] = {1, 1, 4};
  return cell_forward(c, RNN_LSTM, 4, width, 3);
}

/* _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) ->
 * (hy, workspace). */
ral_status host_gru_cell(const ral_kernel_call* c) {
  static const int width[] = {1, 5};
  return cell_forward(c, RNN_GRU, 3, width, 2);
}

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias) ->
 * (grad_gates, grad_cx, grad_bias?); absent incoming gradients are zeros. */
ral_status host_lstm_cell_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 3, 5, 1);
  if (s != RAL_OK) return s;
  rnn_job j = {.kind = RNN_LSTM_BWD};
  add(&j, host_in(c, 0), 1, 0, 0), add(&j, host_in(c, 1), 1, 0, 0), add(&j, host_in(c, 2), 1, 0, 0);
  add(&j, host_in(c, 3), 1, 0, 0), add(&j, host_in(c, 4), 4, 0, 0);
  add(&j, host_out(c, 0), 4, 1, 0), add(&j, host_out(c, 1), 1, 1, 0);
  if (!j.t[2] || !j.t[3] || !j.t[4] || !j.t[5] || !j.t[6])
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "cx, cy, workspace, grad_gates and grad_cx are required");
  if ((s = run(c, &j, j.t[4], 4, j.t[2])) != RAL_OK) return s;
  return bias_grad(c, j.t[5], opt(host_out(c, 2)), 4 * j.H);
}

/* _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) -> (grad_input_gates,
 * grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?). */
ral_status host_gru_cell_backward(const ral_kernel_call* c) {
  ral_status s = host_check_arity(c, 5, 2, 1);
  if (s != RAL_OK) return s;
  rnn_job j = {.kind = RNN_GRU_BWD};
  add(&j, host_in(c, 0), 1, 0, 0), add(&j, host_in(c, 1), 5, 0, 0);
  add(&j, host_out(c, 0), 3, 1, 0), add(&j, host_out(c, 1), 3, 1, 0), add(&j, host_out(c, 2), 1, 1, 0);
  for (int k = 0; k < j.n; k++)
    if (!j.t[k]) return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "grad_hy, workspace and the gate gradients are required");
  if ((s = run(c, &j, j.t[1], 5, j.t[0])) != RAL_OK) return s;
  if ((s = bias_grad(c, j.t[2], opt(host_out(c, 3)), 3 * j.H)) != RAL_OK) return s;
  return bias_grad(c, j.t[3], opt(host_out(c, 4)), 3 * j.H);
}
