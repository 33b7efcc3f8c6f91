/*
 * rnn.c -- the fused LSTM and GRU cell ops (_thnn_fused_lstm_cell, _thnn_fused_gru_cell and
 * their backward ops), which ATen's nn.LSTM / nn.GRU call per cell and time step on every
 * non-CPU device: one kernel for the pointwise work between the two gate GEMMs instead of
 * ~15 launches of the decomposition (torch_fl/tiers/rnn_cells.py), plus one column-sum
 * kernel per bias gradient. CUDA's gate order and workspaces, so forward and backward may
 * run on different tiers; the checks and the row math are the host plugin's
 * (../common/rnn_cells.c), the kernels (kernels/rnn.cl) restate the math.
 *
 * On a CPU runtime with host-unified buffers a cell up to OCL_INLINE_WORK runs on the
 * calling thread when its stream is idle (inline.c), as the small GEMMs around it do: the
 * whole time step then never wakes the runtime's workers (float16/bfloat16 through float32
 * shadows, outputs rounded once). Otherwise (GPUs, a busy stream, TORCH_FL_OPENCL_INLINE=0)
 * the kernels are queued; they read and write the half types through ld_f/st_f.
 */
#include "ocl.h"
#include "rnn_cells.h"

static const ral_tensor* present(const ral_tensor* t) { return ocl_absent(t) ? NULL : t; }

/* ---------------------------------------------------------------- inline */
static int run_inline(const ral_kernel_call* c, ral_rnn_kind kind, const ral_tensor* const* ts, int64_t B, int64_t H) {
  const ral_rnn_layout* L = &ral_rnn_layouts[kind];
  int n = L->n_out + L->n_in;
  if (!c->stream || !c->stream->inl || B * H * 5 > OCL_INLINE_WORK) return 0;
  /* float16/bfloat16 cells compute in float32 over shadows, outputs rounded once (inline_cnn.c) */
  ocl_f32_view v[RAL_RNN_MAX_TENSORS];
  float* base[RAL_RNN_MAX_TENSORS] = {0};
  int k = 0;
  for (; k < n; k++) {
    if (!ocl_f32_open(ts[k], &v[k])) break;
    base[k] = v[k].f;
  }
  int ok = k == n && ocl_inline_begin(c->stream);
  if (ok) {
    for (int i = L->n_out; i < n; i++) ocl_f32_load(&v[i]);
    float* r[RAL_RNN_MAX_TENSORS];
    for (int64_t b = 0; b < B; b++) {
      for (int i = 0; i < n; i++) r[i] = base[i] && !L->bias[i] ? base[i] + b * L->width[i] * H : base[i];
      ral_rnn_row(kind, H, r);
    }
    for (int i = 0; i < L->n_out; i++) { /* bias gradients: rows in order, as rnn_bias_grad */
      if (L->bias_src[i] < 0 || !base[i]) continue;
      int64_t G = L->width[i] * H;
      const float* gg = base[L->bias_src[i]];
      for (int64_t j = 0; j < G; j++) {
        float acc = 0.0f;
        for (int64_t b = 0; b < B; b++) acc += gg[b * G + j];
        base[i][j] = acc;
      }
    }
    for (int i = 0; i < L->n_out; i++) ocl_f32_store(&v[i]);
    ocl_inline_end(c->stream);
    ocl_count(OCL_CNT_inline_ops);
  }
  for (int i = 0; i < k && i < n; i++) ocl_f32_close(&v[i]);
  if (k < n) ocl_f32_close(&v[k]);
  return ok;
}

/* ---------------------------------------------------------------- queued */
/* Bind tensors ts[0..n) as kernel args in order (an absent one: ts[0]'s buffer, its bit in
 * g->has clear), g after them, then launch over n_items elements. */
static ral_status launch(const ral_kernel_call* c, int kid, ocl_rnn* g, const ral_tensor* const* ts, int n,
                         int64_t n_items) {
  ocl_arg a[RAL_RNN_MAX_TENSORS + 2];
  for (int i = 0; i < n; i++) {
    const ral_tensor* u = ts[i] ? ts[i] : ts[0];
    if (ts[i]) g->has |= 1 << i;
    g->off[i] = ocl_elem_off(u);
    g->dt[i] = u->dtype;
    a[i] = ocl_mem(u);
  }
  a[n] = OCL_VAL(*g);
  if (n_items <= 0) return RAL_OK;
  if (ocl_on_cpu(c)) return ocl_enqueue_chunked(c, kid, n + 1, a, n_items, 1024);
  static const int64_t one = 1;
  a[n + 1] = OCL_VAL(one);
  size_t local = ocl_flat_local(c, kid), global = (size_t)n_items;
  return ocl_enqueue(c, kid, n + 2, a, 1, &global, &local);
}

static const int cell_kernel[RAL_RNN_KINDS] = {
    [RAL_RNN_LSTM] = OCL_K_lstm_cell_fwd,
    [RAL_RNN_LSTM_BWD] = OCL_K_lstm_cell_bwd,
    [RAL_RNN_GRU] = OCL_K_gru_cell_fwd,
    [RAL_RNN_GRU_BWD] = OCL_K_gru_cell_bwd,
};

static ral_status run(const ral_kernel_call* c, ral_rnn_kind kind) {
  const ral_rnn_layout* L = &ral_rnn_layouts[kind];
  ral_status st = ocl_check_arity(c, L->n_out, L->n_in, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* ts[RAL_RNN_MAX_TENSORS] = {0};
  int n = L->n_out + L->n_in;
  for (int k = 0; k < n; k++) ts[k] = present(&c->tensors[k]);
  int64_t B, H;
  char why[160];
  if (!ral_rnn_check(kind, ts, &B, &H, why, sizeof why)) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "%s", why);
  if (run_inline(c, kind, ts, B, H)) return RAL_OK;
  ocl_rnn g = {.B = B, .H = H};
  if ((st = launch(c, cell_kernel[kind], &g, ts, n, B * H)) != RAL_OK) return st;
  for (int k = 0; k < L->n_out && st == RAL_OK; k++) {
    if (L->bias_src[k] < 0 || !ts[k]) continue;
    const ral_tensor* pair[2] = {ts[k], ts[L->bias_src[k]]};
    ocl_rnn gb = {.B = B, .H = L->width[k] * H}; /* columns */
    st = launch(c, OCL_K_rnn_bias_grad, &gb, pair, 2, gb.H);
  }
  return st;
}

/* _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) ->
 * (hy, cy, workspace). */
ral_status ocl_lstm_cell(const ral_kernel_call* c) { return run(c, RAL_RNN_LSTM); }

/* _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias) ->
 * (grad_gates, grad_cx, grad_bias?); absent incoming gradients are zeros. */
ral_status ocl_lstm_cell_backward(const ral_kernel_call* c) { return run(c, RAL_RNN_LSTM_BWD); }

/* _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) ->
 * (hy, workspace). */
ral_status ocl_gru_cell(const ral_kernel_call* c) { return run(c, RAL_RNN_GRU); }

/* _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) -> (grad_input_gates,
 * grad_hidden_gates, grad_hx, grad_input_bias?, grad_hidden_bias?). */
ral_status ocl_gru_cell_backward(const ral_kernel_call* c) { return run(c, RAL_RNN_GRU_BWD); }
