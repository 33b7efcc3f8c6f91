/*
 * kernels_list.h -- the single list of kernels the plugin exports through get_kernel().
 * Adding one: define `ral_status ocl_xxx(const ral_kernel_call*)` in the file of its
 * family, add X(ocl_xxx) here and manifest entries in manifests/opencl.json.
 */
#ifndef OCL_KERNELS_LIST_H
#define OCL_KERNELS_LIST_H

#define OCL_KERNELS_EW(X)                                                                  \
  X(ocl_add_tensor) X(ocl_sub_tensor) X(ocl_mul_tensor) X(ocl_div_tensor) X(ocl_add_scalar) \
  X(ocl_sub_scalar) X(ocl_rsub_scalar) X(ocl_mul_scalar) X(ocl_div_scalar) X(ocl_neg)       \
  X(ocl_pow_tensor_scalar) X(ocl_pow_tensor_tensor) X(ocl_sqrt) X(ocl_rsqrt) X(ocl_exp)     \
  X(ocl_log) X(ocl_tanh) X(ocl_sin) X(ocl_cos) X(ocl_sigmoid) X(ocl_abs) X(ocl_reciprocal)  \
  X(ocl_erf) X(ocl_floor) X(ocl_silu) X(ocl_silu_backward) X(ocl_gelu) X(ocl_gelu_backward) \
  X(ocl_tanh_backward) X(ocl_sigmoid_backward) X(ocl_relu) X(ocl_threshold_backward)        \
  X(ocl_addcdiv) X(ocl_addcmul) X(ocl_lerp_scalar) X(ocl_clamp) X(ocl_maximum)              \
  X(ocl_minimum) X(ocl_remainder_scalar) X(ocl_remainder_tensor) X(ocl_eq_tensor)           \
  X(ocl_ne_tensor) X(ocl_lt_tensor) X(ocl_gt_tensor) X(ocl_le_tensor) X(ocl_ge_tensor)      \
  X(ocl_eq_scalar) X(ocl_ne_scalar) X(ocl_lt_scalar) X(ocl_gt_scalar) X(ocl_le_scalar)      \
  X(ocl_ge_scalar) X(ocl_logical_not) X(ocl_bitwise_not) X(ocl_where_self)                  \
  X(ocl_masked_fill_scalar) X(ocl_masked_fill_tensor)

#define OCL_KERNELS_COPY(X) \
  X(ocl_copy_) X(ocl_clone) X(ocl_fill_scalar) X(ocl_fill_tensor) X(ocl_zero_)

#define OCL_KERNELS_REDUCE(X)                                                             \
  X(ocl_sum_dim) X(ocl_sum) X(ocl_mean_dim) X(ocl_mean) X(ocl_amax) X(ocl_amin)           \
  X(ocl_max_dim) X(ocl_min_dim) X(ocl_argmax) X(ocl_argmin) X(ocl_var_correction)         \
  X(ocl_prod) X(ocl_dot) X(ocl_all) X(ocl_any)

#define OCL_KERNELS_BLAS(X) X(ocl_mm) X(ocl_bmm) X(ocl_addmm) X(ocl_baddbmm)

#define OCL_KERNELS_NN(X)                                                                 \
  X(ocl_softmax) X(ocl_log_softmax) X(ocl_softmax_backward) X(ocl_log_softmax_backward)   \
  X(ocl_safe_softmax) X(ocl_sdpa_forward) X(ocl_layer_norm) X(ocl_layer_norm_backward) X(ocl_nll_loss_forward) \
  X(ocl_nll_loss_backward)

#define OCL_KERNELS_INDEX(X)                                                              \
  X(ocl_embedding) X(ocl_embedding_dense_backward) X(ocl_gather) X(ocl_scatter_src)       \
  X(ocl_scatter_add) X(ocl_index_select) X(ocl_cat) X(ocl_tril) X(ocl_triu)               \
  X(ocl_constant_pad_nd) X(ocl_slice_backward)

#define OCL_KERNELS_RANDOM(X) X(ocl_bernoulli_float) X(ocl_uniform) X(ocl_normal)

#define OCL_KERNELS_CNN(X)                                                                \
  X(ocl_convolution) X(ocl_convolution_backward) X(ocl_batch_norm) X(ocl_batch_norm_backward) \
  X(ocl_max_pool2d_with_indices) X(ocl_max_pool2d_with_indices_backward)                  \
  X(ocl_adaptive_max_pool2d) X(ocl_adaptive_max_pool2d_backward) \
  X(ocl_avg_pool2d) X(ocl_avg_pool2d_backward) X(ocl_adaptive_avg_pool2d)                 \
  X(ocl_max_pool3d_with_indices) X(ocl_max_pool3d_with_indices_backward) X(ocl_avg_pool3d)         \
  X(ocl_avg_pool3d_backward) X(ocl_adaptive_avg_pool3d) X(ocl_adaptive_avg_pool3d_backward) X(ocl_adaptive_max_pool3d) X(ocl_adaptive_max_pool3d_backward) X(ocl_adaptive_avg_pool2d_backward) X(ocl_upsample_nearest2d) X(ocl_upsample_nearest2d_backward) \
  X(ocl_upsample_bilinear2d) X(ocl_upsample_bilinear2d_backward) X(ocl_upsample_nearest_exact2d)    \
  X(ocl_upsample_nearest_exact2d_backward) X(ocl_upsample_nearest1d) X(ocl_upsample_nearest1d_backward)   \
  X(ocl_upsample_nearest_exact1d) X(ocl_upsample_nearest_exact1d_backward) X(ocl_upsample_linear1d)        \
  X(ocl_upsample_linear1d_backward) X(ocl_upsample_bicubic2d) X(ocl_upsample_bicubic2d_backward)    \
  X(ocl_upsample_nearest3d) X(ocl_upsample_nearest3d_backward) X(ocl_upsample_nearest_exact3d)        \
  X(ocl_upsample_nearest_exact3d_backward) X(ocl_upsample_trilinear3d) X(ocl_upsample_trilinear3d_backward)

#define OCL_KERNELS_RNN(X) \
  X(ocl_lstm_cell) X(ocl_lstm_cell_backward) X(ocl_gru_cell) X(ocl_gru_cell_backward)

#define OCL_KERNELS(X)                                                                    \
  OCL_KERNELS_EW(X) OCL_KERNELS_COPY(X) OCL_KERNELS_REDUCE(X) OCL_KERNELS_BLAS(X)         \
  OCL_KERNELS_NN(X) OCL_KERNELS_INDEX(X) OCL_KERNELS_RANDOM(X) OCL_KERNELS_CNN(X)         \
  OCL_KERNELS_RNN(X)

#define OCL_DECLARE_KERNEL(name) \
  __attribute__((visibility("hidden"))) ral_status name(const ral_kernel_call* call);
OCL_KERNELS(OCL_DECLARE_KERNEL)
#undef OCL_DECLARE_KERNEL

#endif /* OCL_KERNELS_LIST_H */
