/*
 * kernels.h -- the single list of the kernels the host plugin exports through
 * get_kernel(). Adding a kernel: define `ral_status host_xxx(const ral_kernel_call*)`
 * in the file named for its family, add X(host_xxx) here, and add manifest entries
 * for the aten overloads it serves in manifests/host.json.
 */
#ifndef HOST_KERNELS_H
#define HOST_KERNELS_H

#include "ral_plugin.h"

#define HOST_KERNELS_ELEMENTWISE(X)                                                       \
  X(host_add_tensor) X(host_sub_tensor) X(host_mul_tensor) X(host_div_tensor)             \
  X(host_add_scalar) X(host_sub_scalar) X(host_rsub_scalar) X(host_mul_scalar)            \
  X(host_div_scalar) X(host_neg) X(host_pow_tensor_scalar) X(host_pow_tensor_tensor)      \
  X(host_sqrt) X(host_rsqrt) X(host_exp) X(host_log) X(host_tanh) X(host_sin) X(host_cos) \
  X(host_sigmoid) X(host_abs) X(host_reciprocal) X(host_erf) X(host_floor)                \
  X(host_silu) X(host_silu_backward) X(host_gelu) X(host_gelu_backward)                   \
  X(host_tanh_backward) X(host_sigmoid_backward) X(host_relu) X(host_threshold_backward)  \
  X(host_addcdiv) X(host_addcmul) X(host_lerp_scalar) X(host_clamp) X(host_maximum)       \
  X(host_minimum) X(host_remainder_scalar) X(host_remainder_tensor)                       \
  X(host_eq_tensor) X(host_ne_tensor) X(host_lt_tensor) X(host_gt_tensor)                 \
  X(host_le_tensor) X(host_ge_tensor) X(host_eq_scalar) X(host_ne_scalar)                 \
  X(host_lt_scalar) X(host_gt_scalar) X(host_le_scalar) X(host_ge_scalar)                 \
  X(host_logical_not) X(host_bitwise_not) X(host_where_self) X(host_masked_fill_scalar)   \
  X(host_masked_fill_tensor)

#define HOST_KERNELS_COPY(X) \
  X(host_copy_) X(host_clone) X(host_fill_scalar) X(host_fill_tensor) X(host_zero_)

#define HOST_KERNELS_REDUCE(X)                                                  \
  X(host_sum_dim) X(host_sum) X(host_mean_dim) X(host_mean) X(host_amax)       \
  X(host_amin) X(host_max_dim) X(host_min_dim) X(host_argmax) X(host_argmin)   \
  X(host_var_correction) X(host_prod) X(host_all) X(host_any) X(host_any_dim) X(host_any_dims)

#define HOST_KERNELS_BLAS(X) X(host_mm) X(host_bmm) X(host_addmm) X(host_baddbmm) X(host_dot)

#define HOST_KERNELS_NN(X)                                                               \
  X(host_softmax) X(host_log_softmax) X(host_softmax_backward)                           \
  X(host_log_softmax_backward) X(host_safe_softmax) X(host_layer_norm)                   \
  X(host_layer_norm_backward) X(host_nll_loss_forward) X(host_nll_loss_backward)         \
  X(host_sdpa_forward) X(host_sdpa_backward)

#define HOST_KERNELS_CNN(X)                                                                         \
  X(host_convolution) X(host_convolution_backward) X(host_batch_norm) X(host_batch_norm_backward)    \
  X(host_max_pool2d) X(host_max_pool2d_backward) X(host_avg_pool2d) X(host_avg_pool2d_backward)      \
  X(host_adaptive_avg_pool2d) X(host_adaptive_avg_pool2d_backward) X(host_adaptive_max_pool2d)       \
  X(host_adaptive_max_pool2d_backward) X(host_max_pool3d) X(host_max_pool3d_backward) X(host_avg_pool3d)     \
  X(host_avg_pool3d_backward) X(host_adaptive_avg_pool3d) X(host_adaptive_avg_pool3d_backward) X(host_adaptive_max_pool3d) X(host_adaptive_max_pool3d_backward) X(host_upsample_nearest2d) \
  X(host_upsample_nearest2d_backward) X(host_upsample_bilinear2d) X(host_upsample_bilinear2d_backward)  \
  X(host_upsample_nearest_exact2d) X(host_upsample_nearest_exact2d_backward) X(host_upsample_nearest1d)  \
  X(host_upsample_nearest1d_backward) X(host_upsample_nearest_exact1d) X(host_upsample_nearest_exact1d_backward) \
  X(host_upsample_linear1d) X(host_upsample_linear1d_backward) X(host_upsample_bicubic2d) \
  X(host_upsample_bicubic2d_backward) X(host_upsample_nearest3d) X(host_upsample_nearest3d_backward) \
  X(host_upsample_nearest_exact3d) X(host_upsample_nearest_exact3d_backward) X(host_upsample_trilinear3d) \
  X(host_upsample_trilinear3d_backward) \
  X(host_lstm_cell) X(host_lstm_cell_backward) \
  X(host_gru_cell) X(host_gru_cell_backward)

#define HOST_KERNELS_INDEX(X)                                                        \
  X(host_embedding) X(host_embedding_dense_backward) X(host_gather) X(host_scatter_src) \
  X(host_scatter_add) X(host_index_select)

#define HOST_KERNELS_LAYOUT(X) \
  X(host_cat) X(host_tril) X(host_triu) X(host_constant_pad_nd) X(host_slice_backward)

#define HOST_KERNELS_RANDOM(X) X(host_bernoulli_float) X(host_uniform) X(host_normal)

#define HOST_KERNELS(X)                                                              \
  HOST_KERNELS_ELEMENTWISE(X) HOST_KERNELS_COPY(X) HOST_KERNELS_REDUCE(X)            \
  HOST_KERNELS_BLAS(X) HOST_KERNELS_NN(X) HOST_KERNELS_CNN(X) HOST_KERNELS_INDEX(X) HOST_KERNELS_LAYOUT(X) \
  HOST_KERNELS_RANDOM(X)

#define HOST_DECLARE_KERNEL(name) \
  __attribute__((visibility("hidden"))) ral_status name(const ral_kernel_call* call);
HOST_KERNELS(HOST_DECLARE_KERNEL)
#undef HOST_DECLARE_KERNEL

#endif /* HOST_KERNELS_H */
