/*
 * conv.c -- convolution (1d/2d/3d, stride, padding, dilation, groups, transposed) and its
 * backward on any OpenCL device, as im2col/col2im kernels (kernels/conv.cl) around the
 * plugin's own register-tiled GEMM (blas.c).
 *
 * Why not CLBlast: Debian has libclblast-dev 1.5.3, whose GEMM is tuned for GPUs; on PoCL
 * (a CPU device) the plugin's GEMM is the one shaped and tuned for it (CPU-shaped packing,
 * 16-lane register tiles, docs/opencl), and taking CLBlast would add a second dlopen'd
 * runtime dependency for the same arithmetic. docs/convolution.md says more.
 *
 * The geometry is the host plugin's (plugins/host/conv.c): a *regular* convolution from X
 * [N, Cx, I...] to Y [N, Cy, O...] with weight W [Cy, Cx/G, k...], and three primitives,
 * each over a chunk of samples [n0, n0 + nb) with J = nb * osp columns:
 *   A  Y  = W @ im2col(X)               T_Y[g] = W[g] @ col[g]            (+ conv_from_t)
 *   B  X  = col2im(W^T @ Y)             col[g] = W[g]^T @ T_Y[g]         (+ conv_col2im)
 *   C  dW = sum_n Y_n @ im2col(X_n)^T   dW[g] += T_Y[g] @ colT[g]
 * where col is [G, K, J] (C's colT is [G, J, K]: its rows pack as vectors) and T_Y is
 * Y's channels-first layout [Cy, J]; each GEMM is one
 * launch batched over the G groups (depthwise included). A transposed convolution from x
 * to y is the regular one from y to x run backwards: forward = B, input gradient = A,
 * weight gradient = C with the roles swapped. Operands may have any strides and be float32,
 * float16 or bfloat16 (the kernels read and write through ld_f/st_f; the GEMM operands are
 * float32 scratch).
 */
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

/* Floats of im2col scratch per chunk of samples (the GEMM packs a copy of it too). */
#define CONV_COL_FLOATS ((int64_t)1 << 24)

typedef struct {
  int64_t stride[3], pad[3], dil[3], outpad[3];
  int transposed;
  int64_t groups;
} conv_params;

/* An int list scalar as 3 entries, right-aligned, `dflt` in front (a one-entry list is
 * repeated, as aten expands it). */
static int read_list(const ral_kernel_call* c, int at, int ns, int64_t dflt, int64_t* out) {
  int n;
  const int64_t* v = ocl_scalar_list(c, at, &n);
  for (int i = 0; i < 3; i++) out[i] = dflt;
  if (!v) n = 0;
  if (n != ns && n != 1 && n != 0) return 0;
  for (int i = 0; i < ns; i++) out[3 - ns + i] = n == 0 ? dflt : v[n == 1 ? 0 : i];
  return 1;
}

/* Scalars at `at`: stride, padding, dilation, transposed, output_padding, groups. */
static ral_status read_params(const ral_kernel_call* c, int at, int ns, conv_params* p) {
  if (!read_list(c, at, ns, 1, p->stride) || !read_list(c, at + 1, ns, 0, p->pad) ||
      !read_list(c, at + 2, ns, 1, p->dil) || !read_list(c, at + 4, ns, 0, p->outpad))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "stride/padding/dilation/output_padding do not match %d spatial dims",
                    ns);
  p->transposed = (int)ocl_scalar_i(c, at + 3, 0);
  p->groups = ocl_scalar_i(c, at + 5, 1);
  for (int i = 0; i < 3; i++)
    if (p->stride[i] < 1 || p->dil[i] < 1 || p->pad[i] < 0 || p->outpad[i] < 0)
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "stride and dilation must be >= 1, padding >= 0");
  if (p->groups < 1) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "groups must be >= 1");
  return RAL_OK;
}

/* Sizes and strides of an [N, C, spatial...] operand as 3 spatial dims (leading ones 1/0). */
static void operand_dims(const ral_tensor* t, int64_t* sp, int64_t* n_st, int64_t* c_st, int64_t* ss) {
  int ns = t->ndim - 2;
  *n_st = t->strides[0];
  *c_st = t->strides[1];
  for (int i = 0; i < 3; i++) {
    int src = i - (3 - ns);
    if (sp) sp[i] = src < 0 ? 1 : t->sizes[2 + src];
    ss[i] = src < 0 ? 0 : t->strides[2 + src];
  }
}

/* The regular geometry from the X-role and Y-role operands and the weight. */
static ral_status make_geom(const ral_kernel_call* c, const conv_params* p, const ral_tensor* x,
                            const ral_tensor* y, const ral_tensor* w, ocl_conv* g) {
  memset(g, 0, sizeof *g);
  int64_t Cx = x->sizes[1], Cy = y->sizes[1];
  g->N = x->sizes[0];
  g->G = p->groups;
  if (y->sizes[0] != g->N || Cx % g->G || Cy % g->G || w->ndim != x->ndim || w->sizes[0] != Cy ||
      w->sizes[1] != Cx / g->G)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "input, weight and output channels do not match (groups %lld)",
                    (long long)g->G);
  g->cxg = Cx / g->G;
  g->cyg = Cy / g->G;
  g->isp = g->osp = g->ksp = 1;
  int ns = x->ndim - 2;
  int64_t I[3], O[3];
  operand_dims(x, I, &g->xn, &g->xc, g->xs);
  operand_dims(y, O, &g->yn, &g->yc, g->ys);
  for (int i = 0; i < 3; i++) {
    int src = i - (3 - ns);
    g->k[i] = src < 0 ? 1 : w->sizes[2 + src];
    g->I[i] = I[i];
    g->O[i] = O[i];
    g->s[i] = p->stride[i];
    g->p[i] = p->pad[i];
    g->d[i] = p->dil[i];
    int64_t span = g->I[i] + 2 * g->p[i] - g->d[i] * (g->k[i] - 1) - 1;
    int64_t want = span < 0 ? 0 : span / g->s[i] + 1;
    int ok = p->transposed
                 ? g->I[i] == (g->O[i] - 1) * g->s[i] - 2 * g->p[i] + g->d[i] * (g->k[i] - 1) + p->outpad[i] + 1
                 : (g->O[i] == want && span >= 0);
    if (!ok) return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "spatial sizes do not match the convolution");
    g->isp *= g->I[i];
    g->osp *= g->O[i];
    g->ksp *= g->k[i];
  }
  g->K = g->cxg * g->ksp;
  g->off_x = ocl_elem_off(x);
  g->off_y = ocl_elem_off(y);
  g->dt_x = x->dtype;
  g->dt_y = y->dtype;
  return RAL_OK;
}

static ral_status check_operands(const ral_kernel_call* c, int rank) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++) {
    const ral_tensor* t = &c->tensors[i];
    if (ocl_absent(t)) continue;
    if (!ocl_cnn_dtype(t->dtype))
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "convolution takes float32/float16/bfloat16, tensor %d is %s", i,
                      ocl_dtype_name(t->dtype));
    if (t->ndim != rank && t->ndim != 1)
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d has rank %d, expected %d", i, t->ndim, rank);
  }
  if (rank < 3 || rank > 5)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "%d-d input: batched 1d, 2d or 3d convolutions only", rank);
  return RAL_OK;
}

/* ---------------------------------------------------------------- scratch and launches */
typedef struct {
  cl_mem mem;
  ocl_view v;
} conv_buf;

/* A fresh float32 buffer of `rank` dims, described as a contiguous tensor. */
static ral_status buf_new(const ral_kernel_call* c, conv_buf* b, int rank, const int64_t* sizes) {
  ocl_device* d = ocl_device_get(c->device);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= sizes[i];
  cl_int err;
  ocl_count(OCL_CNT_buffers);
  b->mem = CL.clCreateBuffer(d->ctx, CL_MEM_READ_WRITE, (size_t)(n > 0 ? n : 1) * sizeof(float), NULL, &err);
  if (!b->mem) return ocl_fail(c, ocl_cl_fail(err, "clCreateBuffer (convolution scratch)"), "%s", ocl_last_error());
  ral_tensor t;
  memset(&t, 0, sizeof t);
  t.data = b->mem;
  t.dtype = RAL_DTYPE_FLOAT32;
  ocl_view_contiguous(&b->v, &t, rank, sizes);
  return RAL_OK;
}

/* Queued kernels keep released buffers alive until they finish. */
static void buf_free(conv_buf* b) {
  if (b->mem) CL.clReleaseMemObject(b->mem);
  b->mem = NULL;
}

ral_status ocl_enqueue_rows(const ral_kernel_call* c, int kid, int nargs, ocl_arg* args, int64_t rows,
                            int64_t row_len) {
  if (rows <= 0) return RAL_OK;
  if (ocl_on_cpu(c)) return ocl_enqueue_chunked(c, kid, nargs, args, rows, row_len >= 4096 ? 1 : 4096 / (row_len ? row_len : 1));
  static const int64_t one = 1;
  args[nargs] = OCL_VAL(one);
  size_t local = ocl_flat_local(c, kid), global = (size_t)rows;
  return ocl_enqueue(c, kid, nargs + 1, args, 1, &global, &local);
}

/* The weight [Cy, Cx/G, k...] as float32 [G, cyg, K]: the tensor itself when it is
 * contiguous float32, else a converted copy in `tmp`. */
static ral_status weight_f32(const ral_kernel_call* c, const ral_tensor* w, const ocl_conv* g, conv_buf* tmp,
                             ral_tensor* out) {
  int64_t sz[3] = {g->G, g->cyg, g->K};
  if (w->dtype == RAL_DTYPE_FLOAT32 && ocl_is_contiguous(w)) {
    ocl_view_contiguous(&tmp->v, w, 3, sz);
    *out = tmp->v.t;
    return RAL_OK;
  }
  ral_status st = buf_new(c, tmp, w->ndim, w->sizes);
  if (st == RAL_OK) st = ocl_copy_tensor(c, &tmp->v.t, w);
  if (st != RAL_OK) return st;
  ral_tensor base = tmp->v.t;
  ocl_view_contiguous(&tmp->v, &base, 3, sz);
  *out = tmp->v.t;
  return RAL_OK;
}

/* A 3-d view [d0, d1, d2] of a float32 scratch buffer with the given strides. */
typedef struct {
  int64_t sizes[3], strides[3];
  ral_tensor t;
} mat3;

static const ral_tensor* mat(mat3* m, const ral_tensor* base, int64_t d0, int64_t d1, int64_t d2, int64_t s0,
                             int64_t s1, int64_t s2) {
  m->sizes[0] = d0, m->sizes[1] = d1, m->sizes[2] = d2;
  m->strides[0] = s0, m->strides[1] = s1, m->strides[2] = s2;
  m->t = *base;
  m->t.ndim = 3;
  m->t.sizes = m->sizes;
  m->t.strides = m->strides;
  return &m->t;
}

/* Samples per chunk: the im2col buffer [G, K, nb * osp] stays within CONV_COL_FLOATS. */
static int64_t chunk_samples(const ocl_conv* g) {
  int64_t per = g->G * g->K * g->osp;
  int64_t nb = per > 0 ? CONV_COL_FLOATS / per : g->N;
  if (nb < 1) nb = 1;
  return nb < g->N ? nb : g->N;
}

typedef struct {
  ocl_conv g;
  const ral_tensor *x, *y, *bias; /* X role, Y role (any strides); bias of the result or NULL */
  ral_tensor w;                   /* float32 [G, cyg, K] */
  const ral_tensor* dw;           /* C: float32 [G, cyg, K] accumulator */
} conv_job;

static void bind_bias(conv_job* j, ocl_arg* arg) {
  j->g.has_bias = j->bias != NULL;
  const ral_tensor* b = j->bias ? j->bias : j->x;
  j->g.off_b = ocl_elem_off(b);
  j->g.sb = j->bias && j->bias->ndim ? j->bias->strides[0] : 0;
  j->g.dt_b = b->dtype;
  *arg = ocl_mem(b);
}

/* prim: 'A' (Y = W @ im2col(X)), 'B' (X = col2im(W^T @ Y)) or 'C' (dW += Y @ im2col(X)^T). */
static ral_status conv_run(const ral_kernel_call* c, conv_job* j, char prim) {
  ocl_conv* g = &j->g;
  /* the geometry came from the call's operands; the roles here may be its gradients */
  operand_dims(j->x, NULL, &g->xn, &g->xc, g->xs);
  operand_dims(j->y, NULL, &g->yn, &g->yc, g->ys);
  g->off_x = ocl_elem_off(j->x);
  g->off_y = ocl_elem_off(j->y);
  g->dt_x = j->x->dtype;
  g->dt_y = j->y->dtype;
  int64_t nb = chunk_samples(g), Cy = g->G * g->cyg;
  if (g->N == 0) return RAL_OK;
  conv_buf col = {0}, ty = {0};
  /* room for B panels of up to 16 columns (conv_im2col_p) */
  int64_t csz[1] = {g->G * g->K * ((nb * g->osp + 15) / 16 * 16)}, tsz[1] = {Cy * nb * g->osp};
  ral_status st = buf_new(c, &col, 1, csz);
  if (st == RAL_OK) st = buf_new(c, &ty, 1, tsz);
  ocl_arg bias_arg;
  bind_bias(j, &bias_arg);
  for (int64_t n0 = 0; st == RAL_OK && n0 < g->N; n0 += nb) {
    g->n0 = n0;
    g->nb = g->N - n0 < nb ? g->N - n0 : nb;
    int64_t J = g->nb * g->osp;
    mat3 ma, mb, mo;
    ocl_arg args[6];
    const char* e = getenv("TORCH_FL_OPENCL_CONV_PANELS"); /* "0": im2col + the GEMM's own packing */
    int vn = prim == 'A' && !(e && e[0] == '0') ? ocl_gemm_panel(c, g->cyg, J, g->K) : 0;
    if (vn > 0 && vn <= 16) { /* im2col of X straight into the GEMM's B panels */
      g->vn = vn;
      args[0] = ocl_mem(&col.v.t), args[1] = ocl_mem(j->x), args[2] = OCL_VAL(*g);
      st = ocl_enqueue_rows(c, OCL_K_conv_im2col_p, 3, args, g->G * ((J + vn - 1) / vn), g->K * vn);
    } else if (prim == 'A') { /* im2col of X */
      vn = 0;
      args[0] = ocl_mem(&col.v.t), args[1] = ocl_mem(j->x), args[2] = OCL_VAL(*g);
      st = ocl_enqueue_rows(c, OCL_K_conv_im2col, 3, args, g->G * g->K * g->nb, g->osp);
    } else if (prim == 'C') { /* im2col of X, [G, J, K]: the GEMM's B operand packs as rows */
      args[0] = ocl_mem(&col.v.t), args[1] = ocl_mem(j->x), args[2] = OCL_VAL(*g);
      st = ocl_enqueue_rows(c, OCL_K_conv_im2col_t, 3, args, g->G * g->nb * g->O[0] * g->O[1], g->O[2] * g->K);
    }
    if (st == RAL_OK && (prim == 'B' || prim == 'C')) { /* Y into T_Y */
      args[0] = ocl_mem(&ty.v.t), args[1] = ocl_mem(j->y), args[2] = OCL_VAL(*g);
      st = ocl_enqueue_rows(c, OCL_K_conv_to_t, 3, args, Cy * g->nb * g->O[0] * g->O[1], g->O[2]);
    }
    if (st != RAL_OK) break;
    if (prim == 'A') {
      const ral_tensor *to = mat(&mo, &ty.v.t, g->G, g->cyg, J, g->cyg * J, J, 1),
                       *wa = mat(&ma, &j->w, g->G, g->cyg, g->K, g->cyg * g->K, g->K, 1);
      st = vn ? ocl_gemm_packed_b(c, to, wa, col.mem, g->K)
              : ocl_gemm(c, to, wa, mat(&mb, &col.v.t, g->G, g->K, J, g->K * J, J, 1), NULL, 0, 1);
      args[0] = ocl_mem(j->y), args[1] = ocl_mem(&ty.v.t), args[2] = bias_arg, args[3] = OCL_VAL(*g);
      if (st == RAL_OK) st = ocl_enqueue_rows(c, OCL_K_conv_from_t, 4, args, Cy * g->nb * g->O[0] * g->O[1], g->O[2]);
    } else if (prim == 'B') {
      st = ocl_gemm(c, mat(&mo, &col.v.t, g->G, g->K, J, g->K * J, J, 1),
                    mat(&ma, &j->w, g->G, g->K, g->cyg, g->cyg * g->K, 1, g->K),
                    mat(&mb, &ty.v.t, g->G, g->cyg, J, g->cyg * J, J, 1), NULL, 0, 1);
      args[0] = ocl_mem(j->x), args[1] = ocl_mem(&col.v.t), args[2] = bias_arg, args[3] = OCL_VAL(*g);
      if (st == RAL_OK)
        st = ocl_enqueue_rows(c, OCL_K_conv_col2im, 4, args, g->nb * g->G * g->cxg * g->I[0] * g->I[1],
                         g->I[2] * g->ksp);
    } else {
      const ral_tensor* dw = mat(&mo, j->dw, g->G, g->cyg, g->K, g->cyg * g->K, g->K, 1);
      st = ocl_gemm(c, dw, mat(&ma, &ty.v.t, g->G, g->cyg, J, g->cyg * J, J, 1),
                    mat(&mb, &col.v.t, g->G, J, g->K, g->K * J, g->K, 1), n0 ? dw : NULL, n0 ? 1.0 : 0.0, 1);
    }
  }
  buf_free(&col);
  buf_free(&ty);
  return st;
}

/* oneDNN's view of a regular (not transposed) call's parameters (inline_cnn.c). */
static ral_dnnl_geom dnnl_geom_of(const conv_params* p, int ns) {
  ral_dnnl_geom d = {.groups = p->groups};
  for (int i = 0; i < ns; i++) {
    d.stride[i] = p->stride[3 - ns + i];
    d.padding[i] = p->pad[3 - ns + i];
    d.dilation[i] = p->dil[3 - ns + i];
  }
  return d;
}

/* convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding,
 * groups) -> out */
ral_status ocl_convolution(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 3, 6);
  if (st != RAL_OK) return st;
  const ral_tensor *out = ocl_out(c, 0), *in = ocl_in(c, 0), *w = ocl_in(c, 1), *b = ocl_in(c, 2);
  if ((st = check_operands(c, in->ndim)) != RAL_OK) return st;
  conv_params p;
  if ((st = read_params(c, 0, in->ndim - 2, &p)) != RAL_OK) return st;
  conv_job j;
  memset(&j, 0, sizeof j);
  /* regular: X = input, Y = out; transposed: X = out, Y = input, W [Cin, Cout/G, k] */
  j.x = p.transposed ? out : in;
  j.y = p.transposed ? in : out;
  if ((st = make_geom(c, &p, j.x, j.y, w, &j.g)) != RAL_OK) return st;
  if (!ocl_absent(b)) {
    if (ocl_numel(b) != out->sizes[1])
      return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "bias has %lld elements, expected %lld",
                      (long long)ocl_numel(b), (long long)out->sizes[1]);
    j.bias = b;
  }
  if (ocl_numel(out) == 0) return RAL_OK;
  if (!p.transposed) { /* a CPU runtime with host-unified buffers: oneDNN on the host */
    ral_dnnl_geom dg = dnnl_geom_of(&p, in->ndim - 2);
    if (ocl_inline_conv(c, RAL_DNNL_FORWARD, &dg, in, w, j.bias, out, &st)) return st;
  }
  conv_buf wt = {0};
  st = weight_f32(c, w, &j.g, &wt, &j.w);
  /* K == 0 (no input channels) needs no case of its own: the GEMM sums nothing, the bias stays */
  if (st == RAL_OK) st = conv_run(c, &j, p.transposed ? 'B' : 'A');
  buf_free(&wt);
  return st;
}

/* convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
 * transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias);
 * an output the mask leaves out arrives absent. */
ral_status ocl_convolution_backward(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 3, 3, 8);
  if (st != RAL_OK) return st;
  const ral_tensor *go = ocl_in(c, 0), *in = ocl_in(c, 1), *w = ocl_in(c, 2);
  if ((st = check_operands(c, in->ndim)) != RAL_OK) return st;
  conv_params p;
  if ((st = read_params(c, 1, in->ndim - 2, &p)) != RAL_OK) return st;
  int nmask;
  const int64_t* mask = ocl_scalar_list(c, 7, &nmask);
  const ral_tensor* o[3];
  for (int k = 0; k < 3; k++) {
    const ral_tensor* t = ocl_out(c, k);
    o[k] = ocl_absent(t) || (mask && nmask == 3 && !mask[k]) ? NULL : t;
  }
  if ((o[0] && ocl_numel(o[0]) != ocl_numel(in)) || (o[1] && ocl_numel(o[1]) != ocl_numel(w)) ||
      (o[2] && ocl_numel(o[2]) != go->sizes[1]))
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "gradient outputs do not match input/weight/bias sizes");
  ocl_conv g;
  /* regular: X = input, Y = grad_output; transposed: X = grad_output, Y = input */
  st = p.transposed ? make_geom(c, &p, go, in, w, &g) : make_geom(c, &p, in, go, w, &g);
  if (st != RAL_OK) return st;
  if (!p.transposed) { /* a CPU runtime with host-unified buffers: oneDNN on the host */
    ral_dnnl_geom dg = dnnl_geom_of(&p, in->ndim - 2);
    if (o[0] && ocl_numel(o[0]) > 0 && ocl_inline_conv(c, RAL_DNNL_BACKWARD_DATA, &dg, o[0], w, NULL, go, &st)) {
      if (st != RAL_OK) return st;
      o[0] = NULL;
    }
    /* the weight gradient with the bias gradient in the same pass when both are asked for */
    if (o[1] && ocl_numel(o[1]) > 0 && ocl_inline_conv(c, RAL_DNNL_BACKWARD_WEIGHTS, &dg, in, o[1], o[2], go, &st)) {
      if (st != RAL_OK) return st;
      o[1] = o[2] = NULL;
    }
  }
  conv_buf wt = {0}, dw = {0};
  if (o[0]) {
    conv_job j = {.g = g, .x = p.transposed ? go : o[0], .y = p.transposed ? o[0] : go};
    st = weight_f32(c, w, &g, &wt, &j.w);
    /* regular: grad_input = B(grad_output); transposed: grad_input = A(grad_output) */
    if (st == RAL_OK && ocl_numel(o[0]) > 0) st = conv_run(c, &j, p.transposed ? 'A' : 'B');
  }
  if (st == RAL_OK && o[1] && ocl_numel(o[1]) > 0) {
    int64_t sz[3] = {g.G, g.cyg, g.K};
    st = buf_new(c, &dw, 3, sz);
    conv_job j = {.g = g, .x = p.transposed ? go : in, .y = p.transposed ? in : go, .dw = &dw.v.t};
    if (st == RAL_OK) st = g.N == 0 || g.osp == 0 ? ocl_zero_tensor(c, &dw.v.t) : conv_run(c, &j, 'C');
    if (st == RAL_OK) { /* [G, cyg, K] is the weight's shape, row-major: view it so and copy */
      ocl_view v;
      ocl_view_contiguous(&v, &dw.v.t, o[1]->ndim, o[1]->sizes);
      st = ocl_copy_tensor(c, o[1], &v.t);
    }
  }
  if (st == RAL_OK && o[2] && ocl_numel(o[2]) > 0) {
    ocl_conv gb = g; /* the Y role of conv_bias_grad is grad_output */
    int64_t on, oc;
    operand_dims(go, gb.O, &on, &oc, gb.ys);
    gb.N = go->sizes[0], gb.G = 1, gb.cyg = go->sizes[1], gb.yn = on, gb.yc = oc;
    gb.off_y = ocl_elem_off(go), gb.dt_y = go->dtype;
    gb.off_b = ocl_elem_off(o[2]), gb.sb = o[2]->ndim ? o[2]->strides[0] : 1, gb.dt_b = o[2]->dtype;
    ocl_arg args[3] = {ocl_mem(o[2]), ocl_mem(go), OCL_VAL(gb)};
    size_t local = 1, global = (size_t)gb.cyg;
    st = ocl_enqueue(c, OCL_K_conv_bias_grad, 3, args, 1, &global, &local);
  }
  buf_free(&wt);
  buf_free(&dw);
  return st;
}
