/*
 * inline_matmul.c -- matrix products on oneDNN (plugins/common/dnnl_matmul.c) on the calling
 * thread over the buffers' host memory, for CPU runtimes whose buffers are host memory (PoCL;
 * inline.c says when a device qualifies). The queued path widens float16/bfloat16
 * operands into float32 panels for the OpenCL GEMM (half.c); oneDNN's bfloat16 primitives (AMX,
 * AVX512-BF16) run GPT-2's products about 10x faster, accumulating in float32 and rounding
 * once, as that path does. float32 products above the inline size (ocl_gemm, also the float32
 * shadows of 16-bit products oneDNN declines natively): oneDNN's float32 kernels, 2-2.8x
 * PoCL's compiled GEMM on the LSTM benchmark's decoder, equal on GPT-2's smaller products at
 * a quarter less CPU per training step (PoCL's workers spin between kernels).
 */
#include <omp.h>

#include "dnnl_matmul.h"
#include "ocl.h"

int ocl_inline_matmul(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a, const ral_tensor* b,
                      const ral_tensor* self, double beta, double alpha, ral_status* st) {
  int32_t dt = out->dtype;
  if (!c->stream || !c->stream->inl || !ral_dnnl_matmul_takes(dt)) return 0;
  const ral_tensor* t[RAL_DNNL_MM_N_OPERANDS] = {out, a, b};
  void* host[RAL_DNNL_MM_N_OPERANDS];
  for (int i = 0; i < RAL_DNNL_MM_N_OPERANDS; i++)
    if (t[i]->dtype != dt || !(host[i] = ocl_tensor_host(t[i]))) return 0;
  if (beta != 0.0 && self && (self->data != out->data || self->byte_offset != out->byte_offset)) {
    /* the addend (a bias row for nn.Linear) into out first: the product's `sum` reads it */
    if (!ocl_tensor_host(self)) return 0;
    ocl_view addend;
    ocl_view_expand(&addend, self, out);
    ral_status cs = ocl_copy_tensor(c, out, &addend.t);
    if (cs != RAL_OK) {
      *st = cs;
      return 1;
    }
  }
  if (!ocl_inline_begin_drained(c->stream)) return 0; /* queued path: it rereads self */
  int r = ral_dnnl_matmul(t, host, alpha, beta, omp_get_max_threads());
  ocl_inline_end(c->stream);
  if (r == RAL_DNNL_DECLINED) return 0;
  ocl_count(OCL_CNT_inline_ops);
  *st = r == RAL_DNNL_DONE ? RAL_OK : ocl_fail(c, RAL_ERROR_INTERNAL, "oneDNN matmul failed");
  return 1;
}
