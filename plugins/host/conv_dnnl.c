/*
 * conv_dnnl.c -- the host plugin's side of oneDNN convolutions: host addresses of its tensors
 * and its thread budget for the shared glue (plugins/common/dnnl_conv.c, compiled into this
 * library by the Makefile; TORCH_FL_HOST_DNNL=0 switches it off).
 *
 * Threads: on the stream worker the OpenMP team gets the plugin's budget for the call while
 * the pool idles (the worker is this thread, so no pool region of this stream runs), then
 * goes back to one thread; inline (caller-thread) and pool-helper calls keep one thread.
 */
#include "conv_dnnl.h"

#include "host.h"
#include "pool.h"

int host_dnnl_conv(host_dnnl_kind kind, const host_dnnl_geom* g, const ral_tensor* x, const ral_tensor* w,
                   const ral_tensor* bias, const ral_tensor* y) {
  const ral_tensor* t[RAL_DNNL_N_OPERANDS] = {x, w, bias, y};
  void* host[RAL_DNNL_N_OPERANDS] = {host_ptr(x), host_ptr(w), bias ? host_ptr(bias) : NULL, host_ptr(y)};
  return ral_dnnl_conv(kind, g, t, host, host_pool_team_size());
}
