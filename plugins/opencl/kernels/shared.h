/*
 * shared.h -- definitions read by both the plugin's C code and its OpenCL C kernels (the
 * Makefile prepends this file to every kernel program), so the argument structs and op
 * codes cannot drift apart. Only types whose layout is identical in C11 and OpenCL C.
 */
#ifndef OCL_SHARED_H
#define OCL_SHARED_H

#ifdef __OPENCL_VERSION__
typedef long g_i64;
typedef int g_i32;
#else
typedef int64_t g_i64;
typedef int32_t g_i32;
#endif

/* Largest rank a kernel indexes; the manifest's max_rank matches. */
#define OCL_MAXR 8
/* Largest work-group the reduction-style kernels use (their local arrays). */
#define OCL_MAX_LOCAL 256

/* Element-wise geometry: up to 4 operands (0 = output) over one iteration shape. */
typedef struct {
  g_i64 size[OCL_MAXR];
  g_i64 st[4][OCL_MAXR]; /* element strides */
  g_i64 off[4];          /* element offsets */
  g_i64 n;               /* number of elements */
  g_i64 li[4];           /* integer scalars */
  g_i32 ndim;
  g_i32 dt[4];           /* ral dtype codes */
  g_i32 op;
  g_i32 cfl;             /* 1: compute in float, 0: in long */
  g_i32 nin;             /* number of input operands (1..3) */
  g_i32 flags;
  g_i32 pad0;
  float lf[2];           /* float scalars */
} ocl_geom;

/* Reduction geometry: every output element reduces `n_red` input elements. */
typedef struct {
  g_i64 osize[OCL_MAXR], ost_in[OCL_MAXR], ost_out[OCL_MAXR]; /* kept dims */
  g_i64 rsize[OCL_MAXR], rst[OCL_MAXR];                       /* reduced dims */
  g_i64 off_in, off_out, off_idx, n_out, n_red;
  g_i32 ondim, rndim, op, dt_in, dt_out, cfl;
  float correction, scale;
} ocl_rgeom;

/* Row geometry for softmax-like and norm kernels over contiguous data. */
typedef struct {
  g_i64 rows, len, inner;   /* row r = (r / inner, r % inner); element j at stride inner */
  g_i64 off[6];             /* element offsets of the buffers in kernel order */
  g_i64 li0, li1;
  g_i32 op, flags;
  float eps, f0;
} ocl_rows;

/* Fused LSTM/GRU cells (rnn.c): a B x H grid; buffer i is the call's tensor i (outputs
 * first) at element offset off[i] of dtype dt[i], present iff bit i of `has`. */
typedef struct {
  g_i64 B, H;
  g_i64 off[8];
  g_i32 dt[8];
  g_i32 has, pad0;
} ocl_rnn;

/* Batched matmul: C[b] = beta * Cin[b] + alpha * A[b] @ B[b], any strides. */
typedef struct {
  g_i64 M, N, K, batch;
  g_i64 sa_b, sa_m, sa_k, sb_b, sb_k, sb_n, sc_b, sc_m, sc_n, si_b, si_m, si_n;
  g_i64 off_a, off_b, off_c, off_i;
  g_i32 has_in, pad0;
  float alpha, beta;
} ocl_mmgeom;

/* Fused attention forward, one work-item per query row: out = softmax(scale * q k^T
 * + mask, causal) v and its log-sum-exp. Element strides per (batch, head, row, col); the
 * mask's are 0 along broadcast dims. Head sizes up to OCL_SDPA_MAXE (private arrays). */
#define OCL_SDPA_MAXE 256
typedef struct {
  g_i64 B, H, L, S, E, Ev;
  g_i64 sq[4], sk[4], sv[4], sm[4], so[4], sl[3];
  g_i64 off_q, off_k, off_v, off_m, off_o, off_l;
  g_i32 causal, has_mask; /* has_mask: 0 none, 1 float (added), 2 bool (False = masked) */
  float scale, pad0;
} ocl_sdpa;

/* GEMM operand packing: panel p of V consecutive rows (outer index) stored k-major,
 * dst[((b * P + p) * K + k) * V + j] = src[off + b*s_b + (p*V + j)*s_o + k*s_k], zero past
 * `outer`. P = ceil(outer / V). */
typedef struct {
  g_i64 batch, outer, K, s_b, s_o, s_k, off, P;
  g_i32 V, pad0;
} ocl_pack;

/* Convolution (conv.c, conv.cl) over one regular geometry, a convolution from X to Y:
 * X [N, Cx, I0, I1, I2], Y [N, Cy, O0, O1, O2], weight [Cy, Cx/G, k0, k1, k2] (missing
 * leading spatial dims have size 1). Columns of the im2col buffer are j = nl * osp + o over
 * the samples [n0, n0 + nb) of one chunk: col[(grp * K + kk) * (nb * osp) + j]. The
 * "transposed" layout T of Y is [Cy, nb * osp]. Strides and offsets in elements. */
typedef struct {
  g_i64 N, G, cxg, cyg, K, ksp, isp, osp, n0, nb;
  g_i64 I[3], O[3], k[3], s[3], p[3], d[3];
  g_i64 xn, xc, xs[3], yn, yc, ys[3];
  g_i64 off_x, off_y, off_b, sb;
  g_i32 dt_x, dt_y, dt_b, has_bias;
  g_i32 vn, pad0; /* conv_im2col_p: columns per GEMM panel (<= 16) */
} ocl_conv;

/* Batch norm over contiguous [N, C, S]: buffers in BN_* order, absent ones flagged. */
enum { BN_X, BN_Y /* out, or grad_input */, BN_G /* grad_output */, BN_W, BN_B, BN_RM, BN_RV, BN_SM, BN_SI, BN_GW, BN_GB, BN_N };
typedef struct {
  g_i64 N, C, S;
  g_i64 off[BN_N];
  g_i32 dt[BN_N];
  g_i32 has; /* bit i: buffer i present */
  g_i32 training;
  float momentum, eps;
} ocl_bn;

/* Element (plane b = n * C + c, h, w) of an operand with element offset `off` and element
 * strides s[4] over (n, c, h, w). */
#define OCL_PLANE_AT(off, s, C, b, h, w) ((off) + ((b) / (C)) * (s)[0] + ((b) % (C)) * (s)[1] + (h) * (s)[2] + (w) * (s)[3])

/* 2-d pooling over [B, H, W] planes (B = N * C) of x (the larger side: input, or
 * grad_input) into y ([B, OH, OW]: output, or grad_output), operands of any strides (xs, ys
 * over n, c, h, w; max pooling's indices `is`, laid out as y's shape). Average pooling:
 * divisor (0: none), count_include_pad, adaptive (windows from the sizes alone). */
typedef struct {
  g_i64 B, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
  g_i64 off_x, off_y, off_i, divisor, C;
  g_i64 xs[4], ys[4], is[4];
  g_i32 dt, count_include_pad, adaptive, pad0;
} ocl_pool;

/* 3-d pooling over [B, D, H, W] volumes (B = N * C) of x (input, or grad_input) into y
 * ([B, OD, OH, OW]: output, or grad_output), operands of any strides (xs, ys, is over n, c,
 * d, h, w; is: max pooling's indices, laid out as y's shape). Axis arrays: depth, height,
 * width. Average pooling: divisor (0: none), count_include_pad, adaptive (windows from the
 * sizes alone, the sum divided by each extent in turn). */
typedef struct {
  g_i64 B, C, I[3], O[3], k[3], s[3], p[3], d[3];
  g_i64 off_x, off_y, off_i, divisor;
  g_i64 xs[5], ys[5], is[5];
  g_i32 dt, count_include_pad, adaptive, pad0;
} ocl_pool3;

/* Element (volume b = n * C + c, z, h, w) of an operand with element offset `off` and element
 * strides s[5] over (n, c, d, h, w). */
#define OCL_VOLUME_AT(off, s, C, b, z, h, w) \
  ((off) + ((b) / (C)) * (s)[0] + ((b) % (C)) * (s)[1] + (z) * (s)[2] + (h) * (s)[3] + (w) * (s)[4])

/* 2-d nearest / bilinear / bicubic upsampling of [B, H, W] planes x into [B, OH, OW] planes y (both
 * of any strides: xs, ys over n, c, h, w): step_h/w are the source steps
 * (plugins/common/resample.c: ral_up_scale, and for bilinear / bicubic ral_up_linear_step), computed
 * on the host so both sides round alike. three_d: [B, D, H, W] volumes into [B, OD, OH, OW]
 * (nearest or trilinear), depth strides xsd, ysd and step step_d; else D = OD = 1, xsd = ysd = 0. */
typedef struct {
  g_i64 B, C, H, W, OH, OW, off_x, off_y;
  g_i64 xs[4], ys[4];
  g_i64 D, OD, xsd, ysd;
  float step_h, step_w, step_d;
  g_i32 dt, linear, align, exact; /* exact: nearest-exact (linear 0) */
  g_i32 one_d;                    /* [N, C, L] as planes of one row, linear along W alone */
  g_i32 cubic;                    /* bicubic (linear 0; align: align_corners) */
  g_i32 three_d;
} ocl_upsample;

/* Fault sites of the bounds-checked index kernels: the code they record in their
 * stream's fault record (see queue.c), whose OCL_ERR_INTS ints are site, index lo/hi,
 * dim, size lo/hi. OCL_SITE_SCATTER + 1 is scatter_add. */
enum { OCL_SITE_NONE, OCL_SITE_GATHER, OCL_SITE_INDEX_SELECT, OCL_SITE_SCATTER, OCL_SITE_SCATTER_ADD,
       OCL_SITE_EMBEDDING, OCL_SITE_EMBEDDING_BACKWARD, OCL_SITE_NLL_LOSS, OCL_SITE_MAX_POOL_BACKWARD,
       OCL_SITE_ADAPTIVE_MAX_POOL_BACKWARD, OCL_SITE_MAX_POOL3D_BACKWARD,
       OCL_SITE_ADAPTIVE_MAX_POOL3D_BACKWARD, OCL_N_SITES };
#define OCL_ERR_INTS 6

/* Element-wise op codes (ew_* kernels). */
enum {
  EW_COPY, EW_FILL, EW_ADD, EW_SUB, EW_MUL, EW_DIV, EW_POW, EW_MAX, EW_MIN, EW_REM,
  EW_ADDS, EW_MULS, EW_DIVS, EW_RSUBS, EW_POWS, EW_REMS,
  EW_NEG, EW_SQRT, EW_RSQRT, EW_EXP, EW_LOG, EW_TANH, EW_SIN, EW_COS, EW_SIGMOID, EW_ABS,
  EW_RECIP, EW_ERF, EW_FLOOR, EW_SILU, EW_GELU, EW_RELU, EW_LNOT, EW_BNOT, EW_CLAMP,
  EW_EQ, EW_NE, EW_LT, EW_GT, EW_LE, EW_GE,
  EW_EQS, EW_NES, EW_LTS, EW_GTS, EW_LES, EW_GES,
  EW_SILU_BW, EW_GELU_BW, EW_TANH_BW, EW_SIGMOID_BW, EW_THRESH_BW,
  EW_WHERE, EW_ADDCDIV, EW_ADDCMUL, EW_LERPS, EW_MFILLS, EW_MFILLT,
  EW_COUNT
};

/* Reduction op codes (reduce kernel). */
enum { RD_SUM, RD_MEAN, RD_MAX, RD_MIN, RD_PROD, RD_ARGMAX, RD_ARGMIN, RD_VAR, RD_ALL, RD_ANY };

/* Random distributions (random kernel). */
enum { RNG_UNIFORM, RNG_NORMAL, RNG_BERNOULLI };

/* ral dtype codes as the kernels see them (ral_plugin.h numbering). */
enum {
  DT_BOOL = 0, DT_U8 = 1, DT_I8 = 2, DT_I16 = 3, DT_I32 = 4, DT_I64 = 5, DT_F16 = 6,
  DT_BF16 = 7, DT_F32 = 8, DT_F64 = 9
};

#endif /* OCL_SHARED_H */
