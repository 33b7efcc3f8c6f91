/*
 * ew.c -- element-wise kernels, copies and fills. Every op here is one launch of
 * ew_f32 (all float32 and contiguous) or ew_any (any dtypes and strides) with an op code.
 */
#include <string.h>

#include "ocl.h"
#include "ral_half.h"

void ocl_view_expand(ocl_view* v, const ral_tensor* in, const ral_tensor* shape_of) {
  int nd = shape_of->ndim, shift = nd - in->ndim;
  for (int d = 0; d < nd; d++) {
    int s = d - shift;
    v->sizes[d] = shape_of->sizes[d];
    v->strides[d] = (s < 0 || (in->sizes[s] == 1 && shape_of->sizes[d] != 1)) ? 0 : in->strides[s];
  }
  v->t = *in;
  v->t.ndim = nd;
  v->t.sizes = v->sizes;
  v->t.strides = v->strides;
}

void ocl_view_contiguous(ocl_view* v, const ral_tensor* t, int ndim, const int64_t* sizes) {
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    v->sizes[d] = sizes[d];
    v->strides[d] = stride;
    stride *= sizes[d];
  }
  v->t = *t;
  v->t.ndim = ndim;
  v->t.sizes = v->sizes;
  v->t.strides = v->strides;
}

static int same_shape(const ral_tensor* a, const ral_tensor* b) {
  if (a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->sizes[d] != b->sizes[d]) return 0;
  return 1;
}

/* Ops that only make sense on floating values (routed to ew_f, never ew_i). */
static int float_only(int op) {
  switch (op) {
    case EW_DIV: case EW_POW: case EW_DIVS: case EW_POWS: case EW_SQRT: case EW_RSQRT:
    case EW_EXP: case EW_LOG: case EW_TANH: case EW_SIN: case EW_COS: case EW_SIGMOID:
    case EW_RECIP: case EW_ERF: case EW_FLOOR: case EW_SILU: case EW_GELU: case EW_SILU_BW:
    case EW_GELU_BW: case EW_TANH_BW: case EW_SIGMOID_BW: case EW_THRESH_BW: case EW_ADDCDIV:
    case EW_ADDCMUL: case EW_LERPS:
      return 1;
    default:
      return 0;
  }
}

/* Whether the output is `dt` and contiguous (one flattened dim of stride 1) and every input
 * is `dt` and contiguous too, or one broadcast element (stride 0, any dtype): the chunked
 * fast kernels' operands. */
static int contiguous_of(const ral_tensor* const* ts, const ocl_geom* g, int nt, int32_t dt) {
  if (ts[0]->dtype != dt || g->ndim != 1 || g->st[0][0] != 1) return 0;
  for (int k = 1; k < nt; k++)
    if (g->st[k][0] != 0 && (g->st[k][0] != 1 || ts[k]->dtype != dt)) return 0;
  return 1;
}

ral_status ocl_ew_run(const ral_kernel_call* c, int op, const ral_tensor* const* ts, int nt,
                      const double* f, const int64_t* li) {
  ocl_view views[4];
  const ral_tensor* use[4];
  int cfl = ocl_dtype_is_float(ts[0]->dtype), all_f32 = 1;
  for (int k = 0; k < nt; k++) {
    use[k] = ts[k];
    if (k > 0 && !same_shape(ts[k], ts[0])) {
      ocl_view_expand(&views[k], ts[k], ts[0]);
      use[k] = &views[k].t;
    }
    cfl |= ocl_dtype_is_float(ts[k]->dtype);
    all_f32 &= ts[k]->dtype == RAL_DTYPE_FLOAT32;
  }
  if (f && f[2] != 0) cfl = 1; /* a fractional scalar operand forces float compute */
  if (!cfl && float_only(op))
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "needs floating operands, got %s", ocl_dtype_name(ts[0]->dtype));
  ocl_geom g;
  ocl_geom_init(&g, use, nt);
  if (g.n == 0) return RAL_OK;
  g.op = op;
  g.nin = nt - 1;
  g.cfl = cfl;
  g.flags = li ? (int32_t)li[2] : 0;
  for (int i = 0; i < 2; i++) {
    g.lf[i] = f ? (float)f[i] : 0.0f;
    g.li[i] = li ? li[i] : 0;
  }
  if (cfl && ocl_inline_ew(c, &g, use, nt)) return RAL_OK;
  ocl_arg args[6];
  for (int k = 0; k < 4; k++) args[k] = ocl_mem(use[k < nt ? k : 0]);
  args[4] = OCL_VAL(g);
  if (ocl_on_cpu(c)) {
    /* ew_f32c: float32 out and inputs, each contiguous or one broadcast element (of any
     * dtype: a wrapped Python scalar). */
    int fastc = contiguous_of(ts, &g, nt, RAL_DTYPE_FLOAT32);
    /* ew_h16c: its form for one 16-bit dtype (16 lanes widened, computed, rounded once) */
    int h16c = !fastc && cfl && (contiguous_of(ts, &g, nt, RAL_DTYPE_BFLOAT16) || contiguous_of(ts, &g, nt, RAL_DTYPE_FLOAT16));
    return ocl_enqueue_chunked(c, fastc ? OCL_K_ew_f32c : h16c ? OCL_K_ew_h16c : OCL_K_ew_anyc, 5, args, g.n, 4096);
  }
  int fast = all_f32 && g.ndim == 1;
  for (int k = 0; k < nt && fast; k++) fast = g.st[k][0] == 1;
  size_t global = (size_t)g.n, local = 64;
  return ocl_enqueue(c, fast ? OCL_K_ew_f32 : OCL_K_ew_any, 5, args, 1, &global, &local);
}

/* A copy kernel over g: `kid` one element per work-item, or `kid_cpu` in chunks on a CPU. */
static ral_status copy_launch(const ral_kernel_call* c, int kid, int kid_cpu, const ral_tensor* dst,
                              const ral_tensor* src, const ocl_geom* g) {
  ocl_arg args[4] = {ocl_mem(dst), ocl_mem(src), OCL_VAL(*g)};
  size_t global = (size_t)g->n, local = 64;
  if (ocl_on_cpu(c)) return ocl_enqueue_chunked(c, kid_cpu, 3, args, g->n, 4096);
  return ocl_enqueue(c, kid, 3, args, 1, &global, &local);
}

/* Same-dtype copy between two descriptors of one shape. */
static ral_status copy_same_dtype(const ral_kernel_call* c, const ral_tensor* dst, const ral_tensor* src) {
  int64_t n = ocl_numel(dst), es = ocl_dtype_size(dst->dtype);
  if (n == 0) return RAL_OK;
  if (ocl_is_contiguous(dst) && ocl_is_contiguous(src) && dst->data != src->data) {
    uint64_t nb = (uint64_t)(n * es);
    unsigned char* hd = c->stream->inl && n <= OCL_INLINE_WORK ? ocl_host_span(dst->data, dst->byte_offset, nb) : NULL;
    unsigned char* hs = hd ? ocl_host_span(src->data, src->byte_offset, nb) : NULL;
    if (hs && ocl_inline_begin(c->stream)) { /* idle stream: copy on this thread (inline.c) */
      memcpy(hd, hs, nb);
      ocl_inline_end(c->stream);
      ocl_count(OCL_CNT_inline_copies);
      return RAL_OK;
    }
    ocl_stream_hold(c->stream);
    ocl_count(OCL_CNT_copies);
    cl_event ev = NULL;
    cl_int err = CL.clEnqueueCopyBuffer(c->stream->q, (cl_mem)src->data, (cl_mem)dst->data, src->byte_offset,
                                        dst->byte_offset, (size_t)(n * es), 0, NULL, OCL_TAIL_EV(c->stream, &ev));
    err = ocl_stream_enqueued(c->stream, err, 0, ev);
    return err == CL_SUCCESS ? RAL_OK : ocl_fail(c, ocl_cl_fail(err, "clEnqueueCopyBuffer"), "%s", ocl_last_error());
  }
  const ral_tensor* ts[2] = {dst, src};
  ocl_geom g;
  ocl_geom_init(&g, ts, 2);
  g.flags = (int32_t)es;
  if (ocl_inline_copy(c, &g, ts)) return RAL_OK;
  return copy_launch(c, OCL_K_copy_bytes, OCL_K_copy_bytesc, dst, src, &g);
}

/* float32 to or from float16/bfloat16 (copy_h16c's casts). */
static int is_h16_f32_pair(int32_t a, int32_t b) {
  return (ocl_is_half(a) && b == RAL_DTYPE_FLOAT32) || (ocl_is_half(b) && a == RAL_DTYPE_FLOAT32);
}

/* A cast: the manifest matches copy_ on its destination's dtype only, so the source may be
 * any dtype; the ones the kernels cannot decode are refused rather than misread. */
static ral_status copy_cast(const ral_kernel_call* c, const ral_tensor* dst, const ral_tensor* src) {
  ocl_device* d = ocl_device_get(c->device);
  const ral_tensor* ts[2] = {dst, src};
  for (int k = 0; k < 2; k++) {
    int dt = ts[k]->dtype;
    if (dt < 0 || dt > RAL_DTYPE_FLOAT64 || (dt == RAL_DTYPE_FLOAT64 && !d->fp64))
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "no OpenCL cast %s -> %s on this device",
                      ocl_dtype_name(src->dtype), ocl_dtype_name(dst->dtype));
  }
  ocl_geom g;
  ocl_geom_init(&g, ts, 2);
  if (g.n == 0) return RAL_OK;
  g.cfl = ocl_dtype_is_float(dst->dtype) || ocl_dtype_is_float(src->dtype);
  if (ocl_on_cpu(c) && g.ndim == 1 && g.st[0][0] == 1 && g.st[1][0] == 1 && is_h16_f32_pair(dst->dtype, src->dtype)) {
    ocl_arg args[4] = {ocl_mem(dst), ocl_mem(src), OCL_VAL(g)};
    return ocl_enqueue_chunked(c, OCL_K_copy_h16c, 3, args, g.n, 4096);
  }
  return copy_launch(c, OCL_K_copy_cast, OCL_K_copy_castc, dst, src, &g);
}

ral_status ocl_copy_tensor(const ral_kernel_call* c, const ral_tensor* dst, const ral_tensor* src) {
  ocl_view v;
  if (!same_shape(dst, src)) {
    ocl_view_expand(&v, src, dst);
    src = &v.t;
  }
  if (dst->data == src->data && ocl_numel(dst) > 0) {
    /* Same buffer: an element-wise copy could read what it already overwrote, so go
     * through a scratch buffer (released once the queued copies are done with it). */
    ocl_device* d = ocl_device_get(c->device);
    int64_t n = ocl_numel(src);
    cl_int err;
    ocl_count(OCL_CNT_buffers);
    cl_mem tmp = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, (size_t)(n * ocl_dtype_size(src->dtype)), NULL, &err);
    if (!tmp) return ocl_fail(c, ocl_cl_fail(err, "clCreateBuffer (copy scratch)"), "%s", ocl_last_error());
    ocl_view tv;
    ral_tensor base = *src;
    base.data = tmp;
    base.byte_offset = 0;
    ocl_view_contiguous(&tv, &base, src->ndim, src->sizes);
    ral_status st = copy_same_dtype(c, &tv.t, src);
    if (st == RAL_OK) st = ocl_copy_tensor(c, dst, &tv.t);
    CL.clReleaseMemObject(tmp);
    return st;
  }
  if (dst->dtype == src->dtype) return copy_same_dtype(c, dst, src);
  return copy_cast(c, dst, src);
}

/* Fill with one value: a pattern fill for contiguous tensors, else a kernel. */
static ral_status fill_value(const ral_kernel_call* c, const ral_tensor* t, double f, int64_t i) {
  int64_t n = ocl_numel(t);
  if (n == 0) return RAL_OK;
  union {
    float f32;
    double f64;
    int64_t i64;
    int32_t i32;
    int16_t i16;
    int8_t i8;
    uint8_t u8;
  } pat;
  memset(&pat, 0, sizeof pat);
  int es = ocl_dtype_size(t->dtype), ok = 1;
  switch (t->dtype) {
    case RAL_DTYPE_FLOAT32: pat.f32 = (float)f; break;
    case RAL_DTYPE_FLOAT64: pat.f64 = f; break;
    case RAL_DTYPE_INT64: pat.i64 = i; break;
    case RAL_DTYPE_INT32: pat.i32 = (int32_t)i; break;
    case RAL_DTYPE_INT16: pat.i16 = (int16_t)i; break;
    case RAL_DTYPE_INT8: pat.i8 = (int8_t)i; break;
    case RAL_DTYPE_UINT8: pat.u8 = (uint8_t)i; break;
    case RAL_DTYPE_BOOL: pat.u8 = f != 0; break;
    /* 16-bit floats as a 2-byte pattern too: ew_h16c's fill (a constant vstore_half16 loop)
     * crashed PoCL 3.1's code at an odd element offset (x[1:].fill_(2.5) in float16). */
    case RAL_DTYPE_FLOAT16: pat.i16 = (int16_t)ral_f2h((float)f); break;
    case RAL_DTYPE_BFLOAT16: pat.i16 = (int16_t)ral_f2bf((float)f); break;
    default: ok = 0;
  }
  if (ok && ocl_is_contiguous(t)) {
    uint64_t nb = (uint64_t)(n * es);
    unsigned char* hd = c->stream->inl && n <= OCL_INLINE_WORK ? ocl_host_span(t->data, t->byte_offset, nb) : NULL;
    if (hd && ocl_inline_begin(c->stream)) { /* idle stream: fill on this thread (inline.c) */
      for (uint64_t k = 0; k < nb; k += (uint64_t)es) memcpy(hd + k, &pat, (size_t)es);
      ocl_inline_end(c->stream);
      ocl_count(OCL_CNT_inline_copies);
      return RAL_OK;
    }
    ocl_stream_hold(c->stream);
    ocl_count(OCL_CNT_fills);
    cl_event ev = NULL;
    cl_int err = CL.clEnqueueFillBuffer(c->stream->q, (cl_mem)t->data, &pat, (size_t)es, t->byte_offset,
                                        (size_t)(n * es), 0, NULL, OCL_TAIL_EV(c->stream, &ev));
    err = ocl_stream_enqueued(c->stream, err, 0, ev);
    return err == CL_SUCCESS ? RAL_OK : ocl_fail(c, ocl_cl_fail(err, "clEnqueueFillBuffer"), "%s", ocl_last_error());
  }
  double fs[3] = {f, 0, 0};
  int64_t is[3] = {i, 0, 0};
  return ocl_ew_run(c, EW_FILL, &t, 1, fs, is);
}

ral_status ocl_zero_tensor(const ral_kernel_call* c, const ral_tensor* t) { return fill_value(c, t, 0.0, 0); }

/* ---------------------------------------------------------------- kernel entries */

/* Scalar i as (float, int) pair, and whether it was given as a non-integral float. */
static void scalar_pair(const ral_kernel_call* c, int i, double dflt, double* f, int64_t* v, double* frac) {
  *f = dflt;
  *v = (int64_t)dflt;
  ocl_scalar_num(c, i, f, v);
  if (frac && i < c->n_scalars && c->scalars[i].tag == RAL_SCALAR_FLOAT && *f != (double)(int64_t)*f) *frac = 1;
}

/* out, in0, in1 (, in2) with scalars in f/li. */
static ral_status ew_call(const ral_kernel_call* c, int op, int n_in, const double* f, const int64_t* li) {
  ral_status st = ocl_check_arity(c, 1, n_in, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* ts[4] = {ocl_out(c, 0), NULL, NULL, NULL};
  for (int k = 0; k < n_in; k++) ts[k + 1] = ocl_in(c, k);
  return ocl_ew_run(c, op, ts, n_in + 1, f, li);
}

/* Ops whose scalars[0] (if any) is a plain factor: alpha, value, weight, threshold. */
static ral_status ew_scaled(const ral_kernel_call* c, int op, int n_in, int scalar, double dflt) {
  double f[3] = {dflt, 0, 0};
  int64_t li[3] = {(int64_t)dflt, 0, 0};
  if (scalar >= 0) scalar_pair(c, scalar, dflt, &f[0], &li[0], NULL);
  return ew_call(c, op, n_in, f, li);
}

/* self op Scalar: the scalar is scalars[0]; `alpha` at scalars[1] folds into it. */
static ral_status ew_with_scalar(const ral_kernel_call* c, int op, double sign) {
  double f[3] = {0, 0, 0}, alpha = 1;
  int64_t li[3] = {0, 0, 0}, ialpha = 1;
  scalar_pair(c, 0, 0, &f[0], &li[0], &f[2]);
  if (op == EW_ADDS || op == EW_RSUBS) scalar_pair(c, 1, 1, &alpha, &ialpha, &f[2]);
  if (op == EW_ADDS) {
    f[0] *= alpha * sign;
    li[0] *= ialpha * (int64_t)sign;
  } else if (op == EW_RSUBS) {
    f[1] = alpha;
    li[1] = ialpha;
  }
  return ew_call(c, op, 1, f, li);
}

#define EW_TENSOR_ALPHA(name, OP) \
  ral_status name(const ral_kernel_call* c) { return ew_scaled(c, OP, 2, 0, 1.0); }
EW_TENSOR_ALPHA(ocl_add_tensor, EW_ADD)
EW_TENSOR_ALPHA(ocl_sub_tensor, EW_SUB)

#define EW_PLAIN(name, OP, NIN) \
  ral_status name(const ral_kernel_call* c) { return ew_call(c, OP, NIN, NULL, NULL); }
EW_PLAIN(ocl_mul_tensor, EW_MUL, 2)
EW_PLAIN(ocl_div_tensor, EW_DIV, 2)
EW_PLAIN(ocl_pow_tensor_tensor, EW_POW, 2)
EW_PLAIN(ocl_maximum, EW_MAX, 2)
EW_PLAIN(ocl_minimum, EW_MIN, 2)
EW_PLAIN(ocl_remainder_tensor, EW_REM, 2)
EW_PLAIN(ocl_eq_tensor, EW_EQ, 2)
EW_PLAIN(ocl_ne_tensor, EW_NE, 2)
EW_PLAIN(ocl_lt_tensor, EW_LT, 2)
EW_PLAIN(ocl_gt_tensor, EW_GT, 2)
EW_PLAIN(ocl_le_tensor, EW_LE, 2)
EW_PLAIN(ocl_ge_tensor, EW_GE, 2)
EW_PLAIN(ocl_neg, EW_NEG, 1)
EW_PLAIN(ocl_sqrt, EW_SQRT, 1)
EW_PLAIN(ocl_rsqrt, EW_RSQRT, 1)
EW_PLAIN(ocl_exp, EW_EXP, 1)
EW_PLAIN(ocl_log, EW_LOG, 1)
EW_PLAIN(ocl_tanh, EW_TANH, 1)
EW_PLAIN(ocl_sin, EW_SIN, 1)
EW_PLAIN(ocl_cos, EW_COS, 1)
EW_PLAIN(ocl_sigmoid, EW_SIGMOID, 1)
EW_PLAIN(ocl_abs, EW_ABS, 1)
EW_PLAIN(ocl_reciprocal, EW_RECIP, 1)
EW_PLAIN(ocl_erf, EW_ERF, 1)
EW_PLAIN(ocl_floor, EW_FLOOR, 1)
EW_PLAIN(ocl_silu, EW_SILU, 1)
EW_PLAIN(ocl_relu, EW_RELU, 1)
EW_PLAIN(ocl_logical_not, EW_LNOT, 1)
EW_PLAIN(ocl_silu_backward, EW_SILU_BW, 2)
EW_PLAIN(ocl_tanh_backward, EW_TANH_BW, 2)
EW_PLAIN(ocl_sigmoid_backward, EW_SIGMOID_BW, 2)
EW_PLAIN(ocl_where_self, EW_WHERE, 3)
EW_PLAIN(ocl_masked_fill_tensor, EW_MFILLT, 3)

#define EW_SCALED(name, OP, NIN, DFLT) \
  ral_status name(const ral_kernel_call* c) { return ew_scaled(c, OP, NIN, 0, DFLT); }
EW_SCALED(ocl_threshold_backward, EW_THRESH_BW, 2, 0.0)
EW_SCALED(ocl_addcdiv, EW_ADDCDIV, 3, 1.0)
EW_SCALED(ocl_addcmul, EW_ADDCMUL, 3, 1.0)
EW_SCALED(ocl_lerp_scalar, EW_LERPS, 2, 0.0)
EW_SCALED(ocl_masked_fill_scalar, EW_MFILLS, 2, 0.0)

#define EW_SCALAR(name, OP, SIGN) \
  ral_status name(const ral_kernel_call* c) { return ew_with_scalar(c, OP, SIGN); }
EW_SCALAR(ocl_add_scalar, EW_ADDS, 1.0)
EW_SCALAR(ocl_sub_scalar, EW_ADDS, -1.0)
EW_SCALAR(ocl_rsub_scalar, EW_RSUBS, 1.0)
EW_SCALAR(ocl_mul_scalar, EW_MULS, 1.0)
EW_SCALAR(ocl_div_scalar, EW_DIVS, 1.0)
EW_SCALAR(ocl_pow_tensor_scalar, EW_POWS, 1.0)
EW_SCALAR(ocl_remainder_scalar, EW_REMS, 1.0)
EW_SCALAR(ocl_eq_scalar, EW_EQS, 1.0)
EW_SCALAR(ocl_ne_scalar, EW_NES, 1.0)
EW_SCALAR(ocl_lt_scalar, EW_LTS, 1.0)
EW_SCALAR(ocl_gt_scalar, EW_GTS, 1.0)
EW_SCALAR(ocl_le_scalar, EW_LES, 1.0)
EW_SCALAR(ocl_ge_scalar, EW_GES, 1.0)

/* bitwise_not: logical not on bool, ~x on integers. */
ral_status ocl_bitwise_not(const ral_kernel_call* c) {
  if (c->n_outputs == 1 && ocl_out(c, 0)->dtype == RAL_DTYPE_BOOL) return ew_call(c, EW_LNOT, 1, NULL, NULL);
  return ew_call(c, EW_BNOT, 1, NULL, NULL);
}

/* gelu(self, approximate) and gelu_backward(grad, self, approximate): "tanh" or "none". */
static ral_status gelu_like(const ral_kernel_call* c, int op, int n_in) {
  const ral_scalar* s = c->n_scalars > 0 ? &c->scalars[0] : NULL;
  int64_t li[3] = {s && s->tag == RAL_SCALAR_STRING && s->v.s && strcmp(s->v.s, "tanh") == 0, 0, 0};
  return ew_call(c, op, n_in, NULL, li);
}
ral_status ocl_gelu(const ral_kernel_call* c) { return gelu_like(c, EW_GELU, 1); }
ral_status ocl_gelu_backward(const ral_kernel_call* c) { return gelu_like(c, EW_GELU_BW, 2); }

/* clamp(self, min?, max?) */
ral_status ocl_clamp(const ral_kernel_call* c) {
  double f[3] = {0, 0, 0};
  int64_t li[3] = {0, 0, 0};
  for (int i = 0; i < 2; i++)
    if (!(i >= c->n_scalars || c->scalars[i].tag == RAL_SCALAR_NONE)) {
      scalar_pair(c, i, 0, &f[i], &li[i], &f[2]);
      li[2] |= 1 << i;
      if (c->scalars[i].tag == RAL_SCALAR_INT && !ral_sdk_int_to_dtype(li[i], ocl_out(c, 0)->dtype, &li[i]))
        return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "value %lld cannot be converted to type %s without overflow",
                        (long long)c->scalars[i].v.i, ral_sdk_dtype_name(ocl_out(c, 0)->dtype));
    }
  return ew_call(c, EW_CLAMP, 1, f, li);
}

/* copy_(self, src, non_blocking): outputs [self]; inputs [self, src]. */
ral_status ocl_copy_(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  return st != RAL_OK ? st : ocl_copy_tensor(c, ocl_out(c, 0), ocl_in(c, 1));
}

/* clone(self, memory_format): a fresh contiguous copy. */
ral_status ocl_clone(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 0);
  return st != RAL_OK ? st : ocl_copy_tensor(c, ocl_out(c, 0), ocl_in(c, 0));
}

/* fill_.Scalar(self, value) */
ral_status ocl_fill_scalar(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 1);
  if (st != RAL_OK) return st;
  double f;
  int64_t v;
  scalar_pair(c, 0, 0, &f, &v, NULL);
  return fill_value(c, ocl_out(c, 0), f, v);
}

/* fill_.Tensor(self, value): value is a 0-d device tensor. */
ral_status ocl_fill_tensor(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  return st != RAL_OK ? st : ocl_copy_tensor(c, ocl_out(c, 0), ocl_in(c, 1));
}

/* zero_(self) */
ral_status ocl_zero_(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 1, 0);
  return st != RAL_OK ? st : ocl_zero_tensor(c, ocl_out(c, 0));
}
