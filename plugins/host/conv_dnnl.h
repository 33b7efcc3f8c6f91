/*
 * conv_dnnl.h -- the host plugin's convolutions through oneDNN: its adapter
 * (conv_dnnl.c) over the shared glue in plugins/common/dnnl_conv.c.
 */
#ifndef HOST_CONV_DNNL_H
#define HOST_CONV_DNNL_H

#include "dnnl_conv.h"

typedef ral_dnnl_kind host_dnnl_kind;
typedef ral_dnnl_geom host_dnnl_geom;
#define HOST_DNNL_FORWARD RAL_DNNL_FORWARD
#define HOST_DNNL_BACKWARD_DATA RAL_DNNL_BACKWARD_DATA
#define HOST_DNNL_BACKWARD_WEIGHTS RAL_DNNL_BACKWARD_WEIGHTS
#define HOST_DNNL_DONE RAL_DNNL_DONE
#define HOST_DNNL_DECLINED RAL_DNNL_DECLINED
#define HOST_DNNL_FAILED RAL_DNNL_FAILED

/*! Runs the call on oneDNN over the tensors' host memory with the plugin's thread budget on a
 *  stream worker (one thread inline or on a pool helper): DONE; DECLINED (nothing written:
 *  run im2col); FAILED (error). */
int host_dnnl_conv(host_dnnl_kind kind, const host_dnnl_geom* g, const ral_tensor* x, const ral_tensor* w,
                   const ral_tensor* bias, const ral_tensor* y);

#endif /* HOST_CONV_DNNL_H */
