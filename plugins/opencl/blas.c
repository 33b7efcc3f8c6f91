/*
 * blas.c -- mm/bmm/addmm/baddbmm/dot on one tiled kernel that reads any strides, so
 * transposed weights (x @ W.t()) need no copy. float32 only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ocl.h"

#define BLK 32 /* C block per work-group (blas.cl) */
#define TS 16  /* work-group edge (blas.cl) */

/* Strides of a [B?, R, C] tensor as (batch, row, col); rank 2 has batch stride 0. */
static void mat_strides(const ral_tensor* t, int64_t* sb, int64_t* sr, int64_t* sc) {
  int r = t->ndim;
  *sb = r == 3 ? t->strides[0] : 0;
  *sr = r >= 2 ? t->strides[r - 2] : 0;
  *sc = r >= 1 ? t->strides[r - 1] : 0;
}

/* Register-tiled variants (blas.cl GEMM_REG): kernel, rows per item, columns per item. */
typedef struct {
  int kid, tm, vn;
  const char* name;
} gemm_variant;
static const gemm_variant k_variants[] = {
    {OCL_K_gemm_r8x8, 8, 8, "r8x8"},
    {OCL_K_gemm_r4x16, 4, 16, "r4x16"},
    {OCL_K_gemm_r6x16, 6, 16, "r6x16"},
    {OCL_K_gemm_r4x8, 4, 8, "r4x8"},
    {OCL_K_gemm_r8x16, 8, 16, "r8x16"},
    {OCL_K_gemm_r12x16, 12, 16, "r12x16"},
    {OCL_K_gemm_r16x16, 16, 16, "r16x16"},
};
#define N_VARIANTS ((int)(sizeof k_variants / sizeof k_variants[0]))

static int ocl_gemm_reg_ok(const ral_kernel_call* c) {
  const char* e = getenv("TORCH_FL_OPENCL_GEMM");
  return !(e && strcmp(e, "tiled") == 0);
}

/* Shape classes a tuned choice is recorded for (benchmarks/tune_opencl_gemm.py). */
enum { CLS_NARROW, CLS_SMALL, CLS_LARGE, N_CLASSES };
static const char* k_class_name[N_CLASSES] = {"narrow", "small", "large"};

static int shape_class(const ocl_mmgeom* g) {
  if (g->N <= 8) return CLS_NARROW;
  return g->M * g->N < 256 * 256 ? CLS_SMALL : CLS_LARGE;
}

/* Tuned tiles per device, read once from gemm_tiles.conf beside the program binaries:
 * lines "<device name>\t<class>\t<variant>"; anything else is ignored. -1: none. */
static pthread_mutex_t g_tuned_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_tuned_loaded[OCL_MAX_DEVICES];
static int g_tuned[OCL_MAX_DEVICES][N_CLASSES];

static void load_tuned(int dev, const ocl_device* d) {
  for (int c = 0; c < N_CLASSES; c++) g_tuned[dev][c] = -1;
  char path[4200], line[512];
  if (!ocl_cache_file("gemm_tiles.conf", path, sizeof path)) return;
  FILE* f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    char* name = strtok(line, "\t\n");
    char* cls = strtok(NULL, "\t\n");
    char* var = strtok(NULL, "\t\n");
    if (!name || !cls || !var || strcmp(name, d->name) != 0) continue;
    for (int c = 0; c < N_CLASSES; c++)
      for (int v = 0; v < N_VARIANTS; v++)
        if (strcmp(cls, k_class_name[c]) == 0 && strcmp(var, k_variants[v].name) == 0) g_tuned[dev][c] = v;
  }
  fclose(f);
}

/* The tile per shape class and device: a tuned choice from gemm_tiles.conf if there is
 * one; else 16-wide rows where the runtime prefers 16 floats per vector (AVX-512 under
 * PoCL), 8 otherwise, and tall tiles only when M fills them.
 * TORCH_FL_OPENCL_GEMM=<variant name> forces one (benchmarks/tune_opencl_gemm.py). */
static const gemm_variant* pick_variant(const ral_kernel_call* c, const ocl_mmgeom* g) {
  const char* e = getenv("TORCH_FL_OPENCL_GEMM");
  for (int i = 0; e && i < N_VARIANTS; i++)
    if (strcmp(e, k_variants[i].name) == 0) return &k_variants[i];
  ocl_device* d = ocl_device_get(c->device);
  if (d && c->device >= 0 && c->device < OCL_MAX_DEVICES) {
    pthread_mutex_lock(&g_tuned_lock);
    if (!g_tuned_loaded[c->device]) {
      load_tuned(c->device, d);
      g_tuned_loaded[c->device] = 1;
    }
    int t = g_tuned[c->device][shape_class(g)];
    pthread_mutex_unlock(&g_tuned_lock);
    if (t >= 0) return &k_variants[t];
  }
  int wide = d && d->vec_f32 >= 16 && g->N > 8;
  if (wide) return &k_variants[g->M >= 96 ? 5 /* r12x16 */ : 1 /* r4x16 */];
  return &k_variants[g->M >= 64 ? 0 /* r8x8 */ : 3 /* r4x8 */];
}

/* Pack one operand into zero-padded k-major panels of V rows (blas.cl gemm_pack). */
static ral_status pack(const ral_kernel_call* c, cl_mem* dst, const ral_tensor* src, int64_t batch,
                       int64_t outer, int64_t K, int64_t s_b, int64_t s_o, int64_t s_k, int V) {
  ocl_device* d = ocl_device_get(c->device);
  ocl_pack p;
  memset(&p, 0, sizeof p);
  p.batch = batch, p.outer = outer, p.K = K, p.s_b = s_b, p.s_o = s_o, p.s_k = s_k;
  p.off = ocl_elem_off(src);
  p.P = (outer + V - 1) / V;
  p.V = V;
  size_t n = (size_t)(batch * p.P * K * V);
  cl_int err;
  *dst = ocl_panel_get(c, n * sizeof(float), &err);
  if (!*dst) return ocl_fail(c, ocl_cl_fail(err, "clCreateBuffer (gemm panel)"), "%s", ocl_last_error());
  ral_tensor t = *src;
  t.data = *dst;
  ocl_arg args[4] = {ocl_mem(&t), ocl_mem(src), OCL_VAL(p)};
  if (d->cpu) return ocl_enqueue_chunked(c, OCL_K_gemm_packc, 3, args, batch * p.P * K, 4096 / V);
  size_t local = 64, global = (n + local - 1) / local * local;
  return ocl_enqueue(c, OCL_K_gemm_pack, 3, args, 1, &global, &local);
}

/* pre_b: B already packed by the caller (panels of v->vn columns), else packed here. */
static ral_status gemm_reg_run(const ral_kernel_call* c, ocl_mmgeom* g, const ral_tensor* out,
                               const ral_tensor* a, const ral_tensor* b, const ral_tensor* in, cl_mem pre_b) {
  const gemm_variant* v = pick_variant(c, g);
  cl_mem pa = NULL, pb = pre_b;
  ral_status st = pack(c, &pa, a, g->batch, g->M, g->K, g->sa_b, g->sa_m, g->sa_k, v->tm);
  if (st == RAL_OK && !pre_b) st = pack(c, &pb, b, g->batch, g->N, g->K, g->sb_b, g->sb_n, g->sb_k, v->vn);
  if (st == RAL_OK) {
    size_t items_n = (size_t)((g->N + v->vn - 1) / v->vn), items_m = (size_t)((g->M + v->tm - 1) / v->tm);
    size_t lx = 4, ly = 4;
    const char* e = getenv("TORCH_FL_OPENCL_GEMM_WG");
    if (e) sscanf(e, "%zux%zu", &lx, &ly);
    size_t global[3] = {(items_n + lx - 1) / lx * lx, (items_m + ly - 1) / ly * ly, (size_t)g->batch};
    size_t local[3] = {lx, ly, 1};
    ral_tensor ta = *a, tb = *b;
    ta.data = pa, tb.data = pb;
    ocl_arg args[5] = {ocl_mem(out), ocl_mem(&ta), ocl_mem(&tb), ocl_mem(in), OCL_VAL(*g)};
    st = ocl_enqueue(c, v->kid, 5, args, 3, global, local);
  }
  /* Back to the stream's cache: its in-order queue runs any later pack into them after this GEMM. */
  ocl_panel_put(c, pa);
  if (!pre_b) ocl_panel_put(c, pb);
  return st;
}

int ocl_gemm_panel(const ral_kernel_call* c, int64_t M, int64_t N, int64_t K) {
  if (K <= 0 || M * N < 64 || !ocl_gemm_reg_ok(c)) return 0;
  ocl_mmgeom g;
  memset(&g, 0, sizeof g);
  g.M = M, g.N = N, g.K = K;
  return pick_variant(c, &g)->vn;
}

ral_status ocl_gemm_packed_b(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a, cl_mem pb,
                             int64_t K) {
  ocl_mmgeom g;
  memset(&g, 0, sizeof g);
  g.batch = out->sizes[0], g.M = out->sizes[1], g.N = out->sizes[2], g.K = K;
  mat_strides(a, &g.sa_b, &g.sa_m, &g.sa_k);
  mat_strides(out, &g.sc_b, &g.sc_m, &g.sc_n);
  g.off_a = ocl_elem_off(a);
  g.off_c = ocl_elem_off(out);
  g.alpha = 1.0f;
  if (g.M == 0 || g.N == 0 || g.batch == 0) return RAL_OK;
  return gemm_reg_run(c, &g, out, a, a, out, pb);
}

static ral_status matmul_run(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a,
                             const ral_tensor* b, const ral_tensor* bias, double beta, double alpha) {
  for (int i = 0; i < c->n_outputs + c->n_inputs; i++)
    if (c->tensors[i].dtype != RAL_DTYPE_FLOAT32)
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "matmul takes float32, tensor %d is %s", i,
                      ocl_dtype_name(c->tensors[i].dtype));
  return ocl_gemm(c, out, a, b, bias, beta, alpha);
}

ral_status ocl_gemm(const ral_kernel_call* c, const ral_tensor* out, const ral_tensor* a, const ral_tensor* b,
                    const ral_tensor* bias, double beta, double alpha) {
  int r = out->ndim;
  if (r < 2 || r > 3 || a->ndim != r || b->ndim != r)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "matmul expects rank-%d operands, got %d and %d", r, a->ndim, b->ndim);
  ocl_mmgeom g;
  memset(&g, 0, sizeof g);
  g.batch = r == 3 ? out->sizes[0] : 1;
  g.M = out->sizes[r - 2];
  g.N = out->sizes[r - 1];
  g.K = a->sizes[r - 1];
  if (b->sizes[r - 2] != g.K || a->sizes[r - 2] != g.M || b->sizes[r - 1] != g.N)
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "matmul shapes do not agree");
  mat_strides(a, &g.sa_b, &g.sa_m, &g.sa_k);
  mat_strides(b, &g.sb_b, &g.sb_k, &g.sb_n);
  mat_strides(out, &g.sc_b, &g.sc_m, &g.sc_n);
  g.off_a = ocl_elem_off(a);
  g.off_b = ocl_elem_off(b);
  g.off_c = ocl_elem_off(out);
  g.alpha = (float)alpha;
  g.beta = (float)beta;
  ocl_view bv;
  if (bias && beta != 0.0) { /* beta == 0 ignores self entirely, NaNs included */
    ocl_view_expand(&bv, bias, out);
    mat_strides(&bv.t, &g.si_b, &g.si_m, &g.si_n);
    g.off_i = ocl_elem_off(bias);
    g.has_in = 1;
  }
  if (g.M == 0 || g.N == 0 || g.batch == 0) return RAL_OK;
  if (ocl_inline_gemm(c, &g, out, a, b, g.has_in ? bias : NULL)) return RAL_OK;
  /* Above the inline size on a CPU runtime: oneDNN's float32 kernels on the calling thread
   * (inline_matmul.c). The LSTM benchmark's decoder products ([700, 200] @ [200, 33278] and
   * its gradients) took 51-67 ms as PoCL kernels, 23-27 ms there. */
  ral_status st;
  if (out->dtype == RAL_DTYPE_FLOAT32 && ocl_inline_matmul(c, out, a, b, g.has_in ? bias : NULL, beta, alpha, &st))
    return st;
  /* Tiny products (dot, 1xN) would mostly compute padding in a register tile. */
  if (g.K > 0 && g.M * g.N >= 64 && ocl_gemm_reg_ok(c)) return gemm_reg_run(c, &g, out, a, b, g.has_in ? bias : out, NULL);
  size_t global[3] = {(size_t)((g.N + BLK - 1) / BLK) * TS, (size_t)((g.M + BLK - 1) / BLK) * TS, (size_t)g.batch};
  size_t local[3] = {TS, TS, 1};
  ocl_arg args[5] = {ocl_mem(out), ocl_mem(a), ocl_mem(b), ocl_mem(g.has_in ? bias : out), OCL_VAL(g)};
  return ocl_enqueue(c, OCL_K_matmul_tiled, 5, args, 3, global, local);
}

/* The 16-bit path widens every operand alike, so it would compute a float16 @ bfloat16 (or
 * float32 @ float16) product that CPU refuses: one dtype for all, as matmul_run checked. */
static ral_status one_dtype(const ral_kernel_call* c) {
  int32_t dt = c->tensors[0].dtype;
  for (int i = 1; i < c->n_outputs + c->n_inputs; i++)
    if (c->tensors[i].dtype != dt)
      return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "matmul operands must share one dtype: tensor %d is %s, the output %s",
                      i, ocl_dtype_name(c->tensors[i].dtype), ocl_dtype_name(dt));
  return RAL_OK;
}

static ral_status mm_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  return st != RAL_OK ? st : matmul_run(c, ocl_out(c, 0), ocl_in(c, 0), ocl_in(c, 1), NULL, 0, 1);
}

/* mm(self, mat2); float16/bfloat16 through float32 panels, rounded once (half.c) */
ral_status ocl_mm(const ral_kernel_call* c) {
  ral_status st = one_dtype(c);
  if (st == RAL_OK && ocl_is_half(c->tensors[0].dtype) && ocl_check_arity(c, 1, 2, 0) == RAL_OK &&
      ocl_inline_matmul(c, ocl_out(c, 0), ocl_in(c, 0), ocl_in(c, 1), NULL, 0, 1, &st))
    return st;
  return st != RAL_OK ? st : ocl_half_via_f32(c, mm_f32);
}

/* bmm(self, mat2) */
ral_status ocl_bmm(const ral_kernel_call* c) { return ocl_mm(c); }

/* addmm(self, mat1, mat2, beta, alpha) and baddbmm(self, batch1, batch2, beta, alpha) */
static ral_status addmm_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 3, 0);
  if (st != RAL_OK) return st;
  return matmul_run(c, ocl_out(c, 0), ocl_in(c, 1), ocl_in(c, 2), ocl_in(c, 0), ocl_scalar_f(c, 0, 1.0),
                    ocl_scalar_f(c, 1, 1.0));
}
ral_status ocl_addmm(const ral_kernel_call* c) {
  ral_status st = one_dtype(c);
  if (st == RAL_OK && ocl_is_half(c->tensors[0].dtype) && ocl_check_arity(c, 1, 3, 0) == RAL_OK &&
      ocl_inline_matmul(c, ocl_out(c, 0), ocl_in(c, 1), ocl_in(c, 2), ocl_in(c, 0), ocl_scalar_f(c, 0, 1.0),
                        ocl_scalar_f(c, 1, 1.0), &st))
    return st;
  return st != RAL_OK ? st : ocl_half_via_f32(c, addmm_f32);
}

ral_status ocl_baddbmm(const ral_kernel_call* c) { return ocl_addmm(c); }

/* dot(self, tensor): a 1xK by Kx1 product. */
static ral_status dot_f32(const ral_kernel_call* c) {
  ral_status st = ocl_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  const ral_tensor *x = ocl_in(c, 0), *y = ocl_in(c, 1);
  if (x->ndim != 1 || y->ndim != 1 || x->sizes[0] != y->sizes[0])
    return ocl_fail(c, RAL_ERROR_INVALID_ARGUMENT, "dot expects two 1-D tensors of one length");
  int64_t k = x->sizes[0], one = 1, zero = 0;
  int64_t as[2] = {one, k}, ast[2] = {zero, x->strides[0]};
  int64_t bs[2] = {k, one}, bst[2] = {y->strides[0], zero};
  int64_t os[2] = {one, one}, ost[2] = {one, one};
  ral_tensor a = *x, b = *y, o = *ocl_out(c, 0);
  a.ndim = b.ndim = o.ndim = 2;
  a.sizes = as, a.strides = ast, b.sizes = bs, b.strides = bst, o.sizes = os, o.strides = ost;
  return matmul_run(c, &o, &a, &b, NULL, 0, 1);
}
ral_status ocl_dot(const ral_kernel_call* c) {
  ral_status st = one_dtype(c);
  return st != RAL_OK ? st : ocl_half_via_f32(c, dot_f32);
}
