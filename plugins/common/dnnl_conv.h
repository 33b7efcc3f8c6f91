/*
 * dnnl_conv.h -- convolutions through oneDNN (dnnl_conv.c), shared by every plugin whose
 * tensors live in host memory the CPU can address (the host plugin; the OpenCL plugin on a CPU
 * runtime with host-unified buffers). Each plugin compiles this source into its own library.
 */
#ifndef RAL_DNNL_CONV_H
#define RAL_DNNL_CONV_H

#include <stdint.h>

#include "dnnl_lib.h"

typedef enum {
  RAL_DNNL_FORWARD,          /* y = conv(x, w) (+ bias) */
  RAL_DNNL_BACKWARD_DATA,    /* x = the input gradient from y (grad_output) and w */
  RAL_DNNL_BACKWARD_WEIGHTS, /* w (and bias) = the weight (and bias) gradient from x and y */
} ral_dnnl_kind;

/* A regular convolution's parameters, one entry per spatial dim of x (x->ndim - 2). */
typedef struct {
  int64_t stride[3], padding[3], dilation[3];
  int64_t groups;
} ral_dnnl_geom;

/* The operands of one call, in this order (bias may be NULL): t[] describes them (sizes,
 * strides, dtype: float32, bfloat16 or float16, the same for all), host[] gives the host
 * address of each one's first element. */
enum { RAL_DNNL_X, RAL_DNNL_W, RAL_DNNL_BIAS, RAL_DNNL_Y, RAL_DNNL_N_OPERANDS };

/*! Runs the call on oneDNN with an OpenMP team of `team` threads for its duration: DONE;
 *  DECLINED (nothing written: the caller runs its own kernel); FAILED (outputs touched). */
int ral_dnnl_conv(ral_dnnl_kind kind, const ral_dnnl_geom* g, const ral_tensor* const t[RAL_DNNL_N_OPERANDS],
                  void* const host[RAL_DNNL_N_OPERANDS], int team);

#endif /* RAL_DNNL_CONV_H */
