/*
 * inline_pool.c -- 2-d average pooling (plain and adaptive) and nearest / bilinear
 * upsampling, forward and backward, run on the calling thread over the buffers' host memory
 * for CPU runtimes whose buffers are host memory (PoCL), as inline_cnn.c does for max
 * pooling and for the same reasons: the data is host memory already, and a loop over planes
 * on PyTorch's OpenMP team beats a round trip through the runtime's worker threads.
 *
 * The plane math is the host plugin's (plugins/common/resample.c), one source for both
 * plugins; ordering and fallbacks are inline_cnn.c's (ocl_inline_begin_drained: outstanding
 * work finishes first; GPUs, TORCH_FL_OPENCL_INLINE=0, kernel profiling and buffers without
 * host memory keep the OpenCL kernels of pool.cl / upsample.cl).
 */
#include <string.h>

#include "ocl.h"
#include "resample.h"

/* Split the planes over PyTorch's OpenMP team only when it is worth waking it. */
#define POOL_PARALLEL_WORK ((int64_t)1 << 15)

/* Host addresses of big and small (float32), or 0. */
static int host_pair(const ral_kernel_call* c, const ral_tensor* big, const ral_tensor* small, float** pb,
                     float** ps) {
  if (!c->stream || !c->stream->inl || big->dtype != RAL_DTYPE_FLOAT32 || small->dtype != RAL_DTYPE_FLOAT32) return 0;
  *pb = ocl_tensor_host(big);
  *ps = ocl_tensor_host(small);
  return *pb && *ps;
}

int ocl_inline_avgpool(const ral_kernel_call* c, const ocl_pool* g, const ral_tensor* big, const ral_tensor* small,
                       int backward) {
  float *pb, *ps;
  if (!host_pair(c, big, small, &pb, &ps) || !ocl_inline_begin_drained(c->stream)) return 0;
  ral_avg_pool a = {.H = g->H, .W = g->W, .OH = g->OH, .OW = g->OW, .kh = g->kh, .kw = g->kw, .sh = g->sh,
                    .sw = g->sw, .ph = g->ph, .pw = g->pw, .divisor = g->divisor,
                    .count_include_pad = g->count_include_pad, .adaptive = g->adaptive};
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
#pragma omp parallel for schedule(static) if (g->B * (hw + ohw) >= POOL_PARALLEL_WORK)
  for (int64_t b = 0; b < g->B; b++) {
    if (!backward) {
      ral_avg_pool_plane(&a, pb + b * hw, ps + b * ohw);
      continue;
    }
    memset(pb + b * hw, 0, (size_t)hw * sizeof(float));
    ral_avg_pool_plane_backward(&a, pb + b * hw, ps + b * ohw);
  }
  ocl_inline_end(c->stream);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}

int ocl_inline_upsample(const ral_kernel_call* c, const ocl_upsample* g, const ral_tensor* big,
                        const ral_tensor* small, int backward) {
  float *pb, *ps;
  if (!host_pair(c, big, small, &pb, &ps)) return 0;
  /* the tables from the steps upsample.c computed: the scale of a nearest axis is its step, and
   * a linear axis's step is ral_up_linear_step of its scale (align_corners ignores it) */
  ral_upsample u = {.H = g->H, .W = g->W, .OH = g->OH, .OW = g->OW, .linear = g->linear};
  if (!ral_upsample_tables(&u, g->align, g->step_h, g->step_w)) {
    ral_upsample_free(&u);
    return 0; /* out of memory for two small tables: the queued kernels need none */
  }
  if (!ocl_inline_begin_drained(c->stream)) {
    ral_upsample_free(&u);
    return 0;
  }
  int64_t hw = g->H * g->W, ohw = g->OH * g->OW;
#pragma omp parallel for schedule(static) if (g->B * (hw + ohw) >= POOL_PARALLEL_WORK)
  for (int64_t b = 0; b < g->B; b++) {
    if (!backward) {
      ral_upsample_plane(&u, pb + b * hw, ps + b * ohw);
      continue;
    }
    memset(pb + b * hw, 0, (size_t)hw * sizeof(float));
    ral_upsample_plane_backward(&u, pb + b * hw, ps + b * ohw);
  }
  ocl_inline_end(c->stream);
  ral_upsample_free(&u);
  ocl_count(OCL_CNT_inline_ops);
  return 1;
}
