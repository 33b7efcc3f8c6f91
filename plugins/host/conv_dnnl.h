/*
 * conv_dnnl.h -- float32 convolutions through oneDNN when the build found it (conv_dnnl.c).
 */
#ifndef HOST_CONV_DNNL_H
#define HOST_CONV_DNNL_H

#include <stdint.h>

#include "ral_plugin.h"

typedef enum {
  HOST_DNNL_FORWARD,          /* y = conv(x, w) (+ bias) */
  HOST_DNNL_BACKWARD_DATA,    /* x = the input gradient from y (grad_output) and w */
  HOST_DNNL_BACKWARD_WEIGHTS, /* w (and bias) = the weight (and bias) gradient from x and y */
} host_dnnl_kind;

enum { HOST_DNNL_DONE = 0, HOST_DNNL_DECLINED = 1, HOST_DNNL_FAILED = 2 };

/* A regular convolution's parameters, one entry per spatial dim of x (x->ndim - 2). */
typedef struct {
  int64_t stride[3], padding[3], dilation[3];
  int64_t groups;
} host_dnnl_geom;

/*! Runs the call on oneDNN: DONE; DECLINED (nothing written: run im2col); FAILED (error). */
int host_dnnl_conv(host_dnnl_kind kind, const host_dnnl_geom* g, const ral_tensor* x, const ral_tensor* w,
                   const ral_tensor* bias, const ral_tensor* y);

/*! Whether libdnnl was found at build time and loads now (TORCH_FL_HOST_DNNL=0: never). */
int host_dnnl_available(void);

#endif /* HOST_CONV_DNNL_H */
