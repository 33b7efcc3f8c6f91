/*
 * rnn_cells.h -- the pointwise math of the fused LSTM and GRU cells (forward and backward)
 * over one batch row of float32, as CUDA's kernels compute it
 * (aten/src/ATen/native/cuda/RNN.cu): LSTM gates [i, f, g, o], workspace [B, 4H] of the
 * activated gates; GRU gates [r, z, n], workspace [B, 5H] = [r, z, n, hidden n-gate with its
 * bias, hx]. The host plugin runs it per row of its buffers, the OpenCL plugin per row of a
 * host-unified buffer on the calling thread; its OpenCL kernels (kernels/rnn.cl) restate it.
 * Absent optional operands are NULL (biases and incoming gradients: zeros).
 */
#ifndef RAL_RNN_CELLS_H
#define RAL_RNN_CELLS_H

#include <stddef.h>
#include <stdint.h>

#include "ral_plugin.h"

/* The four cell ops; each plugin's kernels take the call's tensors in call order, outputs
 * first (ral_rnn_layouts says what each one is). */
typedef enum { RAL_RNN_LSTM, RAL_RNN_LSTM_BWD, RAL_RNN_GRU, RAL_RNN_GRU_BWD, RAL_RNN_KINDS } ral_rnn_kind;
enum { RAL_RNN_MAX_TENSORS = 8 };
typedef struct {
  const char* names[RAL_RNN_MAX_TENSORS]; /* ATen's argument and result names, for errors */
  int n_out, n_in;
  int width[RAL_RNN_MAX_TENSORS];    /* row width in units of H */
  int bias[RAL_RNN_MAX_TENSORS];     /* 1: one row (a bias or a bias gradient), not B rows */
  int optional[RAL_RNN_MAX_TENSORS]; /* 1: may be absent */
  int bias_src[RAL_RNN_MAX_TENSORS]; /* a bias gradient output: the output it sums over rows; else -1 */
  int gates, state;                  /* the tensors that fix B and H */
} ral_rnn_layout;
extern const ral_rnn_layout ral_rnn_layouts[RAL_RNN_KINDS];

/*! Check a call's tensors (ts[i] NULL: absent) against `kind`'s layout: float32/float16/
 *  bfloat16, contiguous, every size; B and H into *B, *H. 0 with the reason in why[n]. */
int ral_rnn_check(ral_rnn_kind kind, const ral_tensor* const* ts, int64_t* B, int64_t* H, char* why, size_t n);
/*! One batch row of `kind`: r[i] is row b of tensor i as float (NULL: absent; bias rows
 *  are their one row; bias gradient outputs are not touched). */
void ral_rnn_row(ral_rnn_kind kind, int64_t H, float* const* r);

/*! hy, cy [H] and ws [4H] of one row from ig, hg [4H], biases [4H] (or NULL) and cx [H]. */
void ral_lstm_cell_row(int64_t H, const float* ig, const float* hg, const float* bi, const float* bh, const float* cx,
                       float* hy, float* cy, float* ws);
/*! grad_gates [4H] and grad_cx [H] of one row; ghy, gcy may be NULL (zeros). */
void ral_lstm_cell_backward_row(int64_t H, const float* ghy, const float* gcy, const float* cx, const float* cy,
                                const float* ws, float* gg, float* gcx);
/*! hy [H] and ws [5H] of one row from ig, hg [3H], biases [3H] (or NULL) and hx [H]. */
void ral_gru_cell_row(int64_t H, const float* ig, const float* hg, const float* bi, const float* bh, const float* hx,
                      float* hy, float* ws);
/*! grad_input_gates, grad_hidden_gates [3H] and grad_hx [H] of one row from ghy [H], ws [5H]. */
void ral_gru_cell_backward_row(int64_t H, const float* ghy, const float* ws, float* gig, float* ghg, float* ghx);

#endif /* RAL_RNN_CELLS_H */
