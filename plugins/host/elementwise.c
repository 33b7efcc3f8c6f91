/*
 * elementwise.c -- pointwise kernels: arithmetic, math, activations and their backward
 * passes, comparisons, where, masked_fill.
 *
 * Each op is one expression (OP_<name>) over values of the compute type T, with x, y, z
 * the inputs and p0, p1 the op's scalar arguments. The op lists below instantiate a row
 * function per (op, dtype) and a dtype-indexed table per op; a kernel is then just
 * "read the scalars, pick the table, run the iterator". Rows take a contiguous path
 * (constant strides, which GCC vectorizes), a broadcast-scalar path for binary ops, and
 * a generic strided path.
 */
#include <math.h>
#include <string.h>
#include <tgmath.h>

#include "fastmath.h"
#include "host.h"

typedef struct {
  double f[2];
  int64_t i[2];
} ew_params;

static inline int isnan_f(float v) { return v != v; }
static inline int isnan_d(double v) { return v != v; }
static inline int isnan_never(int64_t v) { return 0; }
#define ISNAN(v) _Generic((v), float: isnan_f, double: isnan_d, default: isnan_never)(v)
#define PARAM(k) _Generic((T)0, float: (T)prm->f[k], double: (T)prm->f[k], default: (T)prm->i[k])

#define GELU_BETA 0.7978845608028654 /* sqrt(2/pi) */
#define GELU_KAPPA 0.044715
#define INV_SQRT_2PI 0.3989422804014327
/* Python-style modulo: the result takes the divisor's sign. */
#define MOD(a, b) ({ T r_ = fmod(a, b); (r_ != 0 && ((r_ < 0) != ((b) < 0))) ? r_ + (b) : r_; })

/* ---------------------------------------------------------------- op expressions */
#define OP_neg(x) (-(x))
#define OP_sqrt(x) sqrt(x)
#define OP_rsqrt(x) ((T)1 / sqrt(x))
#define OP_exp(x) HOST_EXP(x)
#define OP_log(x) HOST_LOG(x)
#define OP_tanh(x) HOST_TANH(x)
#define OP_sin(x) sin(x)
#define OP_cos(x) cos(x)
#define OP_sigmoid(x) HOST_SIGMOID(x)
#define OP_abs(x) ((x) < 0 ? -(x) : (x) + (T)0) /* + 0: abs(-0.0) is +0.0, as fabs */
#define OP_reciprocal(x) ((T)1 / (x))
#define OP_erf(x) HOST_ERF(x)
#define OP_floor(x) floor(x)
#define OP_silu(x) ((x) * HOST_SIGMOID(x))
#define OP_gelu(x) ((T)0.5 * (x) * ((T)1 + HOST_ERF((x) * (T)M_SQRT1_2)))
#define OP_gelu_tanh(x) \
  ((T)0.5 * (x) * ((T)1 + HOST_TANH((T)GELU_BETA * ((x) + (T)GELU_KAPPA * (x) * (x) * (x)))))
#define OP_relu(x) ((x) < 0 ? (T)0 : (x)) /* CPU's clamp_min: NaN and -0.0 pass through */
#define OP_adds(x) ((x) + p0 * p1)
#define OP_subs(x) ((x) - p0 * p1)
#define OP_rsubs(x) (p0 - p1 * (x))
#define OP_muls(x) ((x) * p0)
#define OP_divs(x) ((x) / p0)
#define OP_pows(x) pow(x, p0)
#define OP_square(x) ((x) * (x))
#define OP_cube(x) ((x) * (x) * (x))
#define OP_pow4(x) ({ T x2_ = (x) * (x); x2_ * x2_; })
#define OP_rsquare(x) ((T)1 / ((x) * (x)))
#define OP_one(x) ((void)(x), (T)1)
#define OP_ident(x) (x)
#define OP_clamp_min(x) ((x) < p0 ? p0 : (x))
#define OP_clamp_max(x) ((x) > p1 ? p1 : (x))
#define OP_clamp(x) OP_clamp_max(OP_clamp_min(x))
#define OP_remainders(x) MOD(x, p0)
#define OP_bnot(x) (~(x))
#define OP_lnot(x) (!(x))
#define OP_lognot(x) OP_lnot(x) /* same expression, bool output from any dtype */
#define OP_eqs(x) ((x) == p0)
#define OP_nes(x) ((x) != p0)
#define OP_lts(x) ((x) < p0)
#define OP_gts(x) ((x) > p0)
#define OP_les(x) ((x) <= p0)
#define OP_ges(x) ((x) >= p0)

#define OP_add(x, y) ((x) + p0 * (y))
#define OP_sub(x, y) ((x) - p0 * (y))
#define OP_mul(x, y) ((x) * (y))
#define OP_div(x, y) ((x) / (y))
#define OP_powt(x, y) pow(x, y)
#define OP_silu_bw(g, v) ({ T s_ = HOST_SIGMOID(v); (g) * s_ * ((T)1 + (v) * ((T)1 - s_)); })
#define OP_gelu_bw(g, v)                                            \
  ({                                                                \
    T cdf_ = (T)0.5 * ((T)1 + HOST_ERF((v) * (T)M_SQRT1_2));             \
    T pdf_ = HOST_EXP((T)-0.5 * (v) * (v)) * (T)INV_SQRT_2PI;            \
    (g) * (cdf_ + (v) * pdf_);                                      \
  })
#define OP_gelu_tanh_bw(g, v)                                                         \
  ({                                                                                  \
    T v2_ = (v) * (v);                                                                \
    T th_ = HOST_TANH((T)GELU_BETA * ((v) + (T)GELU_KAPPA * v2_ * (v)));                   \
    T dinner_ = (T)GELU_BETA * ((T)1 + (T)(3 * GELU_KAPPA) * v2_);                    \
    (g) * ((T)0.5 * ((T)1 + th_) + (T)0.5 * (v) * ((T)1 - th_ * th_) * dinner_);      \
  })
#define OP_tanh_bw(g, y) ((g) * ((T)1 - (y) * (y)))
#define OP_sigmoid_bw(g, y) ((g) * ((T)1 - (y)) * (y))
#define OP_threshold_bw(g, x) ((x) <= p0 ? (T)0 : (g))
#define OP_lerp(x, y) \
  (fabs(p0) < (T)0.5 ? (x) + p0 * ((y) - (x)) : (y) - ((y) - (x)) * ((T)1 - p0))
#define OP_maximum(x, y) (ISNAN(x) ? (x) : ISNAN(y) ? (y) : (x) > (y) ? (x) : (y))
#define OP_minimum(x, y) (ISNAN(x) ? (x) : ISNAN(y) ? (y) : (x) < (y) ? (x) : (y))
#define OP_remainder(x, y) MOD(x, y)
#define OP_eq(x, y) ((x) == (y))
#define OP_ne(x, y) ((x) != (y))
#define OP_lt(x, y) ((x) < (y))
#define OP_gt(x, y) ((x) > (y))
#define OP_le(x, y) ((x) <= (y))
#define OP_ge(x, y) ((x) >= (y))
#define OP_masked_fill(x, m) ((m) ? p0 : (x))

#define OP_addcdiv(x, y, z) ((x) + p0 * ((y) / (z)))
#define OP_addcmul(x, y, z) ((x) + p0 * (y) * (z))
#define OP_where(c, x, y) ((c) ? (x) : (y))

/* ---------------------------------------------------------------- row generators */
#define PRELUDE(CT)                                  \
  typedef CT T;                                      \
  const ew_params* prm = ctx;                        \
  __attribute__((unused)) const T p0 = PARAM(0);     \
  __attribute__((unused)) const T p1 = PARAM(1);     \
  char* restrict po = p[0];                          \
  const char* restrict pa = p[1];

#define AT(ST, TO, P, S) TO(*(const ST*)((P) + i * (S)))
#define PUT(ST, FROM, V, S) (*(ST*)(po + i * (S)) = FROM(V))

#define LOOP1(OP, OST, OFROM, AST, ATO, SO, SA) \
  for (int64_t i = 0; i < n; i++) {             \
    const T x = AT(AST, ATO, pa, SA);           \
    PUT(OST, OFROM, OP(x), SO);                 \
  }
#define ROW1(FN, OP, CT, OST, OFROM, AST, ATO)                                      \
  HOST_SIMD_CLONES static void FN(int64_t n, char* const* p, const int64_t* s, const void* ctx) {    \
    PRELUDE(CT)                                                                     \
    const int64_t so = s[0], sa = s[1];                                             \
    if (so == sizeof(OST) && sa == sizeof(AST))                                     \
      LOOP1(OP, OST, OFROM, AST, ATO, sizeof(OST), sizeof(AST))                     \
    else                                                                            \
      LOOP1(OP, OST, OFROM, AST, ATO, so, sa)                                       \
  }

#define LOOP2(OP, OST, OFROM, AST, ATO, BST, BTO, SO, SA, SB) \
  for (int64_t i = 0; i < n; i++) {                           \
    const T x = AT(AST, ATO, pa, SA);                         \
    const T y = AT(BST, BTO, pb, SB);                         \
    PUT(OST, OFROM, OP(x, y), SO);                            \
  }
#define ROW2(FN, OP, CT, OST, OFROM, AST, ATO, BST, BTO)                          \
  HOST_SIMD_CLONES static void FN(int64_t n, char* const* p, const int64_t* s, const void* ctx) {  \
    PRELUDE(CT)                                                                   \
    const char* restrict pb = p[2];                                               \
    const int64_t so = s[0], sa = s[1], sb = s[2];                                \
    const int64_t co = sizeof(OST), ca = sizeof(AST), cb = sizeof(BST);          \
    if (so == co && sa == ca && sb == cb)                                         \
      LOOP2(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), sizeof(AST), sizeof(BST)) \
    else if (so == co && sa == ca && sb == 0)                                     \
      LOOP2(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), sizeof(AST), 0)      \
    else if (so == co && sa == 0 && sb == cb)                                     \
      LOOP2(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), 0, sizeof(BST))      \
    else                                                                          \
      LOOP2(OP, OST, OFROM, AST, ATO, BST, BTO, so, sa, sb)                       \
  }

#define LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, SO, SA, SB, SC) \
  for (int64_t i = 0; i < n; i++) {                               \
    const T x = AT(AST, ATO, pa, SA);                             \
    const T y = AT(BST, BTO, pb, SB);                             \
    const T z = AT(BST, BTO, pc, SC);                             \
    PUT(OST, OFROM, OP(x, y, z), SO);                             \
  }
#define ROW3(FN, OP, CT, OST, OFROM, AST, ATO, BST, BTO)                          \
  HOST_SIMD_CLONES static void FN(int64_t n, char* const* p, const int64_t* s, const void* ctx) {  \
    PRELUDE(CT)                                                                   \
    const char* restrict pb = p[2];                                               \
    const char* restrict pc = p[3];                                               \
    const int64_t so = s[0], sa = s[1], sb = s[2], sc = s[3];                     \
    if (so == sizeof(OST) && sa == sizeof(AST) && sb == sizeof(BST) && sc == sizeof(BST)) \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), sizeof(AST), sizeof(BST), \
            sizeof(BST))                                                          \
    /* a 0-dim (broadcast) second or third operand, e.g. where(mask, x, fill): the  \
     * general strided loop does not vectorise and was ~10x slower */              \
    else if (so == sizeof(OST) && sa == sizeof(AST) && sb == sizeof(BST) && sc == 0) \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), sizeof(AST), sizeof(BST), 0) \
    else if (so == sizeof(OST) && sa == sizeof(AST) && sb == 0 && sc == sizeof(BST)) \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), sizeof(AST), 0, sizeof(BST)) \
    /* a first operand broadcast along the row (a [rows, 1] mask in where): 2.5x slower   \
     * strided; with a 0-dim fill beside it too */                                   \
    else if (so == sizeof(OST) && sa == 0 && sb == sizeof(BST) && sc == sizeof(BST))   \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), 0, sizeof(BST), sizeof(BST)) \
    else if (so == sizeof(OST) && sa == 0 && sb == sizeof(BST) && sc == 0)             \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), 0, sizeof(BST), 0)       \
    else if (so == sizeof(OST) && sa == 0 && sb == 0 && sc == sizeof(BST))             \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, sizeof(OST), 0, 0, sizeof(BST))       \
    else                                                                          \
      LOOP3(OP, OST, OFROM, AST, ATO, BST, BTO, so, sa, sb, sc)                   \
  }

/* Operand shapes of the op families: D is the key dtype, B is bool. */
#define GEN_MAP1(N, ST, CT, OP) ROW1(OP##_##N, OP_##OP, CT, ST, HOST_FROM_##N, ST, HOST_TO_##N)
#define GEN_CMP1(N, ST, CT, OP) \
  ROW1(OP##_##N, OP_##OP, CT, uint8_t, HOST_FROM_BOOL, ST, HOST_TO_##N)
#define GEN_MAP2(N, ST, CT, OP) \
  ROW2(OP##_##N, OP_##OP, CT, ST, HOST_FROM_##N, ST, HOST_TO_##N, ST, HOST_TO_##N)
#define GEN_CMP2(N, ST, CT, OP) \
  ROW2(OP##_##N, OP_##OP, CT, uint8_t, HOST_FROM_BOOL, ST, HOST_TO_##N, ST, HOST_TO_##N)
#define GEN_MASK2(N, ST, CT, OP) \
  ROW2(OP##_##N, OP_##OP, CT, ST, HOST_FROM_##N, ST, HOST_TO_##N, uint8_t, HOST_TO_BOOL)
#define GEN_MAP3(N, ST, CT, OP) \
  ROW3(OP##_##N, OP_##OP, CT, ST, HOST_FROM_##N, ST, HOST_TO_##N, ST, HOST_TO_##N)
#define GEN_WHERE3(N, ST, CT, OP) \
  ROW3(OP##_##N, OP_##OP, CT, ST, HOST_FROM_##N, uint8_t, HOST_TO_BOOL, ST, HOST_TO_##N)

/* ---------------------------------------------------------------- op lists
 * X(op, family, dtype set, grain). The family fixes operand dtypes (see GEN_*). */
#define EW_OPS(X)                                                                      \
  X(neg, MAP1, NUM, HOST_GRAIN) X(sqrt, MAP1, FLT, HOST_GRAIN_HEAVY)                   \
  X(rsqrt, MAP1, FLT, HOST_GRAIN_HEAVY) X(exp, MAP1, FLT, HOST_GRAIN_HEAVY)            \
  X(log, MAP1, FLT, HOST_GRAIN_HEAVY) X(tanh, MAP1, FLT, HOST_GRAIN_HEAVY)             \
  X(sin, MAP1, FLT, HOST_GRAIN_HEAVY) X(cos, MAP1, FLT, HOST_GRAIN_HEAVY)              \
  X(sigmoid, MAP1, FLT, HOST_GRAIN_HEAVY) X(abs, MAP1, NUM, HOST_GRAIN)                \
  X(reciprocal, MAP1, FLT, HOST_GRAIN) X(erf, MAP1, FLT, HOST_GRAIN_HEAVY)             \
  X(floor, MAP1, FLT, HOST_GRAIN) X(silu, MAP1, FLT, HOST_GRAIN_HEAVY)                 \
  X(gelu, MAP1, FLT, HOST_GRAIN_HEAVY) X(gelu_tanh, MAP1, FLT, HOST_GRAIN_HEAVY)       \
  X(relu, MAP1, NUM, HOST_GRAIN) X(adds, MAP1, NUM, HOST_GRAIN)                        \
  X(subs, MAP1, NUM, HOST_GRAIN) X(rsubs, MAP1, NUM, HOST_GRAIN)                       \
  X(muls, MAP1, NUM, HOST_GRAIN) X(divs, MAP1, FLT, HOST_GRAIN)                        \
  X(pows, MAP1, FLT, HOST_GRAIN_HEAVY) X(square, MAP1, FLT, HOST_GRAIN)                \
  X(cube, MAP1, FLT, HOST_GRAIN) X(pow4, MAP1, FLT, HOST_GRAIN)                        \
  X(rsquare, MAP1, FLT, HOST_GRAIN) X(one, MAP1, FLT, HOST_GRAIN)                      \
  X(ident, MAP1, FLT, HOST_GRAIN)                \
  X(clamp, MAP1, NUM, HOST_GRAIN) X(clamp_min, MAP1, NUM, HOST_GRAIN)                  \
  X(clamp_max, MAP1, NUM, HOST_GRAIN) X(remainders, MAP1, FLT, HOST_GRAIN_HEAVY)       \
  X(bnot, MAP1, INT, HOST_GRAIN) X(lnot, MAP1, BOOL, HOST_GRAIN)                       \
  X(lognot, CMP1, ALL, HOST_GRAIN) X(eqs, CMP1, ALL, HOST_GRAIN)                       \
  X(nes, CMP1, ALL, HOST_GRAIN) X(lts, CMP1, ALL, HOST_GRAIN)                          \
  X(gts, CMP1, ALL, HOST_GRAIN) X(les, CMP1, ALL, HOST_GRAIN)                          \
  X(ges, CMP1, ALL, HOST_GRAIN)                                                        \
  X(add, MAP2, NUM, HOST_GRAIN) X(sub, MAP2, NUM, HOST_GRAIN)                          \
  X(mul, MAP2, NUM, HOST_GRAIN) X(div, MAP2, FLT, HOST_GRAIN)                          \
  X(powt, MAP2, FLT, HOST_GRAIN_HEAVY) X(silu_bw, MAP2, FLT, HOST_GRAIN_HEAVY)         \
  X(gelu_bw, MAP2, FLT, HOST_GRAIN_HEAVY) X(gelu_tanh_bw, MAP2, FLT, HOST_GRAIN_HEAVY) \
  X(tanh_bw, MAP2, FLT, HOST_GRAIN) X(sigmoid_bw, MAP2, FLT, HOST_GRAIN)               \
  X(threshold_bw, MAP2, NUM, HOST_GRAIN) X(lerp, MAP2, FLT, HOST_GRAIN)                \
  X(maximum, MAP2, NUM, HOST_GRAIN) X(minimum, MAP2, NUM, HOST_GRAIN)                  \
  X(remainder, MAP2, FLT, HOST_GRAIN_HEAVY)                                            \
  X(eq, CMP2, ALL, HOST_GRAIN) X(ne, CMP2, ALL, HOST_GRAIN) X(lt, CMP2, ALL, HOST_GRAIN) \
  X(gt, CMP2, ALL, HOST_GRAIN) X(le, CMP2, ALL, HOST_GRAIN) X(ge, CMP2, ALL, HOST_GRAIN) \
  X(masked_fill, MASK2, ALL, HOST_GRAIN)                                               \
  X(addcdiv, MAP3, FLT, HOST_GRAIN) X(addcmul, MAP3, NUM, HOST_GRAIN)                  \
  X(where, WHERE3, ALL, HOST_GRAIN)

/* Operand roles per family, for run_ew's checks: output first, then inputs. */
#define ROLES_MAP1 "DD"
#define ROLES_CMP1 "BD"
#define ROLES_MAP2 "DDD"
#define ROLES_CMP2 "BDD"
#define ROLES_MASK2 "DDB"
#define ROLES_MAP3 "DDDD"
#define ROLES_WHERE3 "DBDD"

typedef struct {
  const char* roles;
  int64_t grain;
  host_row_fn fn[RAL_DTYPE_COUNT];
} ew_op;

#define INSTANTIATE(OP, FAM, SET, GRAIN) HOST_FOR_##SET(GEN_##FAM, OP)
EW_OPS(INSTANTIATE)
#undef INSTANTIATE

#define FN_ENTRY(N, ST, CT, OP) [RAL_DTYPE_##N] = OP##_##N,
#define DEFINE_TABLE(OP, FAM, SET, GRAIN) \
  static const ew_op T_##OP = {ROLES_##FAM, GRAIN, {HOST_FOR_##SET(FN_ENTRY, OP)}};
EW_OPS(DEFINE_TABLE)
#undef DEFINE_TABLE

/* ---------------------------------------------------------------- driver */
static ral_status run_ew(const ral_kernel_call* c, const ew_op* op, const ew_params* prm) {
  int nt = (int)strlen(op->roles);
  if (c->n_outputs != 1 || c->n_inputs != nt - 1)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expected 1 output and %d inputs, got %d and %d",
                     nt - 1, c->n_outputs, c->n_inputs);
  const ral_tensor* ts[HOST_MAX_OPERANDS];
  int32_t key = -1;
  for (int k = 0; k < nt; k++) {
    ts[k] = &c->tensors[k];
    if (key < 0 && op->roles[k] == 'D') key = ts[k]->dtype;
  }
  if (key < 0 || key >= RAL_DTYPE_COUNT || !op->fn[key])
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s is not supported", host_dtype_name(key));
  for (int k = 0; k < nt; k++) {
    int32_t want = op->roles[k] == 'B' ? RAL_DTYPE_BOOL : key;
    if (ts[k]->dtype != want)
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "tensor %d is %s, expected %s", k,
                       host_dtype_name(ts[k]->dtype), host_dtype_name(want));
    if (!host_same_shape(ts[k], ts[0]))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT,
                       "tensor %d does not have the output's shape (inputs must be expanded)", k);
  }
  host_iter it;
  host_iter_init(&it, ts, nt);
  host_iter_run(&it, op->fn[key], prm, op->grain);
  return RAL_OK;
}

/* The op's first `count` scalars, in order, become p0, p1. */
static ral_status run_with_scalars(const ral_kernel_call* c, const ew_op* op, int count) {
  ew_params prm = {{1, 1}, {1, 1}};
  for (int k = 0; k < count; k++)
    if (!host_scalar_num(c, k, &prm.f[k], &prm.i[k]))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "scalar argument %d is not a number", k);
  return run_ew(c, op, &prm);
}

#define KERNEL(NAME, OP, NSCALARS) \
  ral_status NAME(const ral_kernel_call* c) { return run_with_scalars(c, &T_##OP, NSCALARS); }

KERNEL(host_add_tensor, add, 1)
KERNEL(host_sub_tensor, sub, 1)
KERNEL(host_mul_tensor, mul, 0)
KERNEL(host_div_tensor, div, 0)
KERNEL(host_add_scalar, adds, 2)
KERNEL(host_sub_scalar, subs, 2)
KERNEL(host_rsub_scalar, rsubs, 2)
KERNEL(host_mul_scalar, muls, 1)
KERNEL(host_div_scalar, divs, 1)
KERNEL(host_neg, neg, 0)
KERNEL(host_pow_tensor_tensor, powt, 0)
KERNEL(host_sqrt, sqrt, 0)
KERNEL(host_rsqrt, rsqrt, 0)
KERNEL(host_exp, exp, 0)
KERNEL(host_log, log, 0)
KERNEL(host_tanh, tanh, 0)
KERNEL(host_sin, sin, 0)
KERNEL(host_cos, cos, 0)
KERNEL(host_sigmoid, sigmoid, 0)
KERNEL(host_abs, abs, 0)
KERNEL(host_reciprocal, reciprocal, 0)
KERNEL(host_erf, erf, 0)
KERNEL(host_floor, floor, 0)
KERNEL(host_silu, silu, 0)
KERNEL(host_silu_backward, silu_bw, 0)
KERNEL(host_tanh_backward, tanh_bw, 0)
KERNEL(host_sigmoid_backward, sigmoid_bw, 0)
KERNEL(host_relu, relu, 0)
KERNEL(host_threshold_backward, threshold_bw, 1)
KERNEL(host_addcdiv, addcdiv, 1)
KERNEL(host_addcmul, addcmul, 1)
KERNEL(host_lerp_scalar, lerp, 1)
KERNEL(host_maximum, maximum, 0)
KERNEL(host_minimum, minimum, 0)
KERNEL(host_remainder_scalar, remainders, 1)
KERNEL(host_remainder_tensor, remainder, 0)
KERNEL(host_eq_tensor, eq, 0)
KERNEL(host_ne_tensor, ne, 0)
KERNEL(host_lt_tensor, lt, 0)
KERNEL(host_gt_tensor, gt, 0)
KERNEL(host_le_tensor, le, 0)
KERNEL(host_ge_tensor, ge, 0)
KERNEL(host_eq_scalar, eqs, 1)
KERNEL(host_ne_scalar, nes, 1)
KERNEL(host_lt_scalar, lts, 1)
KERNEL(host_gt_scalar, gts, 1)
KERNEL(host_le_scalar, les, 1)
KERNEL(host_ge_scalar, ges, 1)
KERNEL(host_logical_not, lognot, 0)
KERNEL(host_where_self, where, 0)
KERNEL(host_masked_fill_scalar, masked_fill, 1)

/* bitwise_not is logical on bool and bitwise on integers. */
ral_status host_bitwise_not(const ral_kernel_call* c) {
  int bool_in = c->n_inputs > 0 && host_in(c, 0)->dtype == RAL_DTYPE_BOOL;
  return run_with_scalars(c, bool_in ? &T_lnot : &T_bnot, 0);
}

/* pow with a constant exponent: small integer exponents are multiplies and the
 * half-integers sqrt/rsqrt (as aten's own pow kernel does, so results match it);
 * powf is ~20x slower than a multiply and does not vectorize. */
ral_status host_pow_tensor_scalar(const ral_kernel_call* c) {
  double e;
  int64_t ei;
  if (!host_scalar_num(c, 0, &e, &ei))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "exponent is not a number");
  static const struct {
    double e;
    const ew_op* op;
  } fast[] = {{0, &T_one},        {1, &T_ident},      {2, &T_square}, {3, &T_cube},
              {4, &T_pow4},       {-1, &T_reciprocal}, {-2, &T_rsquare},
              {0.5, &T_sqrt},     {-0.5, &T_rsqrt}};
  const ew_op* op = &T_pows;
  for (size_t k = 0; k < sizeof fast / sizeof fast[0]; k++)
    if (e == fast[k].e) op = fast[k].op;
  return run_with_scalars(c, op, 1);
}

/* gelu(self, *, str approximate): "none" or "tanh". */
static const ew_op* gelu_variant(const ral_kernel_call* c, const ew_op* exact, const ew_op* tanh_op) {
  if (c->n_scalars < 1 || c->scalars[0].tag != RAL_SCALAR_STRING || !c->scalars[0].v.s) return exact;
  if (strcmp(c->scalars[0].v.s, "tanh") == 0) return tanh_op;
  return strcmp(c->scalars[0].v.s, "none") == 0 ? exact : NULL;
}

ral_status host_gelu(const ral_kernel_call* c) {
  const ew_op* op = gelu_variant(c, &T_gelu, &T_gelu_tanh);
  return op ? run_with_scalars(c, op, 0)
            : host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "approximate must be 'none' or 'tanh'");
}

ral_status host_gelu_backward(const ral_kernel_call* c) {
  const ew_op* op = gelu_variant(c, &T_gelu_bw, &T_gelu_tanh_bw);
  return op ? run_with_scalars(c, op, 0)
            : host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "approximate must be 'none' or 'tanh'");
}

/* clamp(self, Scalar? min, Scalar? max): an absent bound is skipped, not +-inf, so
 * integer dtypes need no sentinel. */
ral_status host_clamp(const ral_kernel_call* c) {
  ew_params prm = {{0, 0}, {0, 0}};
  int has_lo = host_scalar_num(c, 0, &prm.f[0], &prm.i[0]);
  int has_hi = host_scalar_num(c, 1, &prm.f[1], &prm.i[1]);
  if (!has_lo && !has_hi)
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "at least one of min and max must be given");
  for (int i = 0; i < 2; i++)
    if (i < c->n_scalars && c->scalars[i].tag == RAL_SCALAR_INT &&
        !ral_sdk_int_to_dtype(c->scalars[i].v.i, host_out(c, 0)->dtype, &prm.i[i]))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "value %lld cannot be converted to type %s without overflow",
                       (long long)c->scalars[i].v.i, ral_sdk_dtype_name(host_out(c, 0)->dtype));
  return run_ew(c, has_lo && has_hi ? &T_clamp : has_lo ? &T_clamp_min : &T_clamp_max, &prm);
}

/* masked_fill.Tensor(self, mask, Tensor value): value is a one-element device tensor,
 * possibly expanded to the output shape with 0-strides. */
ral_status host_masked_fill_tensor(const ral_kernel_call* c) {
  ew_params prm = {{0, 0}, {0, 0}};
  if (c->n_inputs != 3 || !host_is_single_value(host_in(c, 2)) ||
      !host_dtype_is_computable(host_in(c, 2)->dtype))
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "expects (self, mask, one-element value)");
  host_read_scalar(host_in(c, 2), &prm.f[0], &prm.i[0]);
  ral_kernel_call two = *c; /* the value is a parameter here, not an operand */
  two.n_inputs = 2;
  return run_ew(&two, &T_masked_fill, &prm);
}
