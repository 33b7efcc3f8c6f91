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

#include <stdint.h>

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
