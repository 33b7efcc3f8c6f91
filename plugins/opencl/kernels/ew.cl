/* ew.cl -- element-wise ops over up to three inputs, computed in float (floating
 * operands) or long (integer/bool operands), plus a byte copy for same-dtype copies. */

/* float tanh that reaches +-1: PoCL's stops at +-0.99999994, even at +-inf, so gelu(-100)
 * came out -2.98e-6 (CPU: -0) and gelu(-inf) -inf (CPU: NaN). |x| >= 9.1 rounds to +-1 in
 * float. select/sign/fabs keep it valid for scalars and vectors alike. */
#define RAL_TANH(x) select(tanh(x), sign(x), fabs(x) >= 9.1f)

#define GELU_K0 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K1 0.044715f

inline float rem_f(float a, float b) {
  float r = fmod(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}

/* The exponents CPU's pow_tensor_scalar_optimized_kernel special-cases, computed as it does
 * (x ** -0.5 of -0.0 is 1 / sqrt(-0.0) = -inf there; pow() gives +inf). */
inline float pow_s(float a, float e) {
  if (e == 2.0f) return a * a;
  if (e == -0.5f) return 1.0f / sqrt(a);
  if (e == -2.0f) return 1.0f / (a * a);
  if (e == 1.0f) return a;
  if (e == 0.5f) return sqrt(a);
  if (e == -1.0f) return 1.0f / a;
  if (e == 3.0f) return a * a * a;
  return pow(a, e);
}

inline float maxf_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : fmax(a, b); }
inline float minf_nan(float a, float b) { return isnan(a) || isnan(b) ? NAN : fmin(a, b); }

inline float gelu_bw(float g, float x, long approx) {
  if (approx) {
    float x2 = x * x, inner = GELU_K0 * (x + GELU_K1 * x2 * x), t = RAL_TANH(inner);
    float left = 0.5f * x, right = 1.0f + t;
    float dright = left * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
    return g * (0.5f * right + dright);
  }
  float cdf = 0.5f * (1.0f + erf(x * M_SQRT1_2_F));
  float pdf = exp(-0.5f * x * x) * 0.3989422804014327f;
  return g * (cdf + x * pdf);
}

/* One element of op `op` in float. */
inline float ew_f(int op, float a, float b, float c, const ocl_geom* g) {
  float f0 = g->lf[0], f1 = g->lf[1];
  switch (op) {
    case EW_COPY: return a;
    case EW_FILL: return f0;
    case EW_ADD: return a + f0 * b;
    case EW_SUB: return a - f0 * b;
    case EW_MUL: return a * b;
    case EW_DIV: return a / b;
    case EW_POW: return pow(a, b);
    case EW_MAX: return maxf_nan(a, b);
    case EW_MIN: return minf_nan(a, b);
    case EW_REM: return rem_f(a, b);
    case EW_ADDS: return a + f0;
    case EW_MULS: return a * f0;
    case EW_DIVS: return a / f0;
    case EW_RSUBS: return f0 - f1 * a;
    case EW_POWS: return pow_s(a, f0);
    case EW_REMS: return rem_f(a, f0);
    case EW_NEG: return -a;
    case EW_SQRT: return sqrt(a);
    case EW_RSQRT: return rsqrt(a);
    case EW_EXP: return exp(a);
    case EW_LOG: return log(a);
    case EW_TANH: return RAL_TANH(a);
    case EW_SIN: return sin(a);
    case EW_COS: return cos(a);
    case EW_SIGMOID: return 1.0f / (1.0f + exp(-a));
    case EW_ABS: return fabs(a);
    case EW_RECIP: return 1.0f / a;
    case EW_ERF: return erf(a);
    case EW_FLOOR: return floor(a);
    case EW_SILU: return a / (1.0f + exp(-a));
    case EW_GELU:
      if (g->li[0]) return 0.5f * a * (1.0f + RAL_TANH(GELU_K0 * (a + GELU_K1 * a * a * a)));
      return 0.5f * a * (1.0f + erf(a * M_SQRT1_2_F));
    case EW_RELU: return a < 0.0f ? 0.0f : a;
    case EW_LNOT: return a == 0.0f ? 1.0f : 0.0f;
    case EW_CLAMP: {
      float r = a;
      if ((g->flags & 1) && r < f0) r = f0;
      if ((g->flags & 2) && r > f1) r = f1;
      return isnan(a) ? a : r;
    }
    case EW_EQ: return a == b;
    case EW_NE: return a != b;
    case EW_LT: return a < b;
    case EW_GT: return a > b;
    case EW_LE: return a <= b;
    case EW_GE: return a >= b;
    case EW_EQS: return a == f0;
    case EW_NES: return a != f0;
    case EW_LTS: return a < f0;
    case EW_GTS: return a > f0;
    case EW_LES: return a <= f0;
    case EW_GES: return a >= f0;
    case EW_SILU_BW: {
      float s = 1.0f / (1.0f + exp(-b));
      return a * s * (1.0f + b * (1.0f - s));
    }
    case EW_GELU_BW: return gelu_bw(a, b, g->li[0]);
    case EW_TANH_BW: return a * (1.0f - b * b);
    case EW_SIGMOID_BW: return a * (1.0f - b) * b;
    case EW_THRESH_BW: return b <= f0 ? 0.0f : a;
    case EW_WHERE: return a != 0.0f ? b : c;
    case EW_ADDCDIV: return a + f0 * (b / c);
    case EW_ADDCMUL: return a + f0 * b * c;
    case EW_LERPS: return f0 < 0.5f ? a + f0 * (b - a) : b - (b - a) * (1.0f - f0);
    case EW_MFILLS: return b != 0.0f ? f0 : a;
    case EW_MFILLT: return b != 0.0f ? c : a;
    default: return NAN;
  }
}

inline long rem_i(long a, long b) {
  if (b == 0) return 0;
  long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

/* One element of op `op` in long; the plugin only routes integer-safe ops here. */
inline long ew_i(int op, long a, long b, long c, const ocl_geom* g) {
  long l0 = g->li[0], l1 = g->li[1];
  switch (op) {
    case EW_COPY: return a;
    case EW_FILL: return l0;
    case EW_ADD: return a + l0 * b;
    case EW_SUB: return a - l0 * b;
    case EW_MUL: return a * b;
    case EW_MAX: return max(a, b);
    case EW_MIN: return min(a, b);
    case EW_REM: return rem_i(a, b);
    case EW_ADDS: return a + l0;
    case EW_MULS: return a * l0;
    case EW_RSUBS: return l0 - l1 * a;
    case EW_REMS: return rem_i(a, l0);
    case EW_NEG: return -a;
    case EW_ABS: return a < 0 ? -a : a;
    case EW_LNOT: return a == 0;
    case EW_BNOT: return ~a;
    case EW_RELU: return a < 0 ? 0 : a;
    case EW_CLAMP: {
      long r = a;
      if ((g->flags & 1) && r < l0) r = l0;
      if ((g->flags & 2) && r > l1) r = l1;
      return r;
    }
    case EW_EQ: return a == b;
    case EW_NE: return a != b;
    case EW_LT: return a < b;
    case EW_GT: return a > b;
    case EW_LE: return a <= b;
    case EW_GE: return a >= b;
    case EW_EQS: return a == l0;
    case EW_NES: return a != l0;
    case EW_LTS: return a < l0;
    case EW_GTS: return a > l0;
    case EW_LES: return a <= l0;
    case EW_GES: return a >= l0;
    case EW_WHERE: return a != 0 ? b : c;
    case EW_MFILLS: return b != 0 ? l0 : a;
    case EW_MFILLT: return b != 0 ? c : a;
    default: return 0;
  }
}

/* Any dtypes, any strides: operands are decoded per element. */
__kernel void ew_any(gbuf p0, gcbuf p1, gcbuf p2, gcbuf p3, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long e[4];
  geom_offsets(&g, i, e, 1 + g.nin);
  if (g.cfl) {
    float a = g.nin > 0 ? ld_f(p1, e[1], g.dt[1]) : 0.0f;
    float b = g.nin > 1 ? ld_f(p2, e[2], g.dt[2]) : 0.0f;
    float c = g.nin > 2 ? ld_f(p3, e[3], g.dt[3]) : 0.0f;
    st_f(p0, e[0], g.dt[0], ew_f(g.op, a, b, c, &g));
  } else {
    long a = g.nin > 0 ? ld_i(p1, e[1], g.dt[1]) : 0;
    long b = g.nin > 1 ? ld_i(p2, e[2], g.dt[2]) : 0;
    long c = g.nin > 2 ? ld_i(p3, e[3], g.dt[3]) : 0;
    st_i(p0, e[0], g.dt[0], ew_i(g.op, a, b, c, &g));
  }
}

/* Fast path: every operand float32 and contiguous. */
__kernel void ew_f32(__global float* o, __global const float* a, __global const float* b,
                     __global const float* c, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  float x = g.nin > 0 ? a[g.off[1] + i] : 0.0f;
  float y = g.nin > 1 ? b[g.off[2] + i] : 0.0f;
  float z = g.nin > 2 ? c[g.off[3] + i] : 0.0f;
  o[g.off[0] + i] = ew_f(g.op, x, y, z, &g);
}

/* Same-dtype copy of any strides, moving elements of g.flags bytes. */
__kernel void copy_bytes(gbuf dst, gcbuf src, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long e[2];
  geom_offsets(&g, i, e, 2);
  switch (g.flags) {
    case 8: ((__global long*)dst)[e[0]] = ((__global const long*)src)[e[1]]; break;
    case 4: ((__global int*)dst)[e[0]] = ((__global const int*)src)[e[1]]; break;
    case 2: ((__global short*)dst)[e[0]] = ((__global const short*)src)[e[1]]; break;
    default: dst[e[0]] = src[e[1]]; break;
  }
}

/* Cross-dtype copy (a cast), any strides. Through double when either side is float64 (so
 * int64 <-> float64 stays exact), through long between integer dtypes, else through
 * float (float32 holds every float16/bfloat16 value exactly). */
__kernel void copy_cast(gbuf dst, gcbuf src, ocl_geom g) {
  long i = get_global_id(0);
  if (i >= g.n) return;
  long e[2];
  geom_offsets(&g, i, e, 2);
  int dd = g.dt[0], ds = g.dt[1];
#ifdef OCL_HAS_FP64
  if (dd == DT_F64 || ds == DT_F64) {
    st_d(dst, e[0], dd, ld_d(src, e[1], ds));
    return;
  }
#endif
  if (g.cfl) st_f(dst, e[0], dd, ld_f(src, e[1], ds));
  else st_i(dst, e[0], dd, ld_i(src, e[1], ds));
}

/* ---------------------------------------------------------------- CPU-shaped variants
 * On a CPU runtime a work-group is a loop on one core and every work-group costs a
 * scheduling step, so one element per work-item (above) spends most of its time in the
 * runtime. These take a chunk of elements per work-item (local size 1, ocl_cpu_chunks)
 * and keep the op switch outside the loops, so each loop is straight-line code. */

/* Every operand float32; the output and each input contiguous (stride 1), or an input
 * broadcast from one element (stride 0, any dtype: a wrapped Python scalar). Ops with a
 * vector form run 16 lanes at a time; the rest go element by element through ew_f. */
#define EWC_LDV(p, sv, bc, i) ((bc) ? (float16)(sv) : vload16(0, (p) + (i)))
#define EWC_LOOP(OP)                                                                       \
  {                                                                                        \
    long i = i0;                                                                           \
    for (; i + 16 <= i1; i += 16) {                                                        \
      float16 x = EWC_LDV(pa, sa, ba, i), y = EWC_LDV(pb, sb, bb, i), z = EWC_LDV(pc, sc, bc, i); \
      vstore16(OP(float16), 0, po + i);                                                    \
    }                                                                                      \
    for (; i < i1; i++) {                                                                  \
      float x = ba ? sa : pa[i], y = bb ? sb : pb[i], z = bc ? sc : pc[i];                 \
      po[i] = OP(float);                                                                   \
    }                                                                                      \
  }                                                                                        \
  break;
/* Type-generic bodies (T = float or float16) over x, y, z and the scalars f0, f1; each is
 * the same formula as the op's case in ew_f. */
#define EWV_COPY(T) (x)
#define EWV_FILL(T) ((T)(f0))
#define EWV_ADD(T) (x + f0 * y)
#define EWV_SUB(T) (x - f0 * y)
#define EWV_MUL(T) (x * y)
#define EWV_DIV(T) (x / y)
#define EWV_ADDS(T) (x + f0)
#define EWV_MULS(T) (x * f0)
#define EWV_DIVS(T) (x / f0)
#define EWV_RSUBS(T) (f0 - f1 * x)
#define EWV_POWS(T)                                                                          \
  (f0 == 2.0f ? x * x : f0 == 1.0f ? x : f0 == 0.5f ? sqrt(x) : f0 == -1.0f ? 1.0f / x \
   : f0 == 3.0f ? x * x * x : f0 == -0.5f ? 1.0f / sqrt(x) : f0 == -2.0f ? 1.0f / (x * x)   \
   : pow(x, (T)(f0)))
#define EWV_NEG(T) (-x)
#define EWV_SQRT(T) (sqrt(x))
#define EWV_RSQRT(T) (rsqrt(x))
#define EWV_EXP(T) (exp(x))
#define EWV_LOG(T) (log(x))
#define EWV_TANH(T) (RAL_TANH(x))
#define EWV_SIGMOID(T) (1.0f / (1.0f + exp(-x)))
#define EWV_RECIP(T) (1.0f / x)
#define EWV_ERF(T) (erf(x))
#define EWV_SILU(T) (x / (1.0f + exp(-x)))
#define EWV_GELU(T)                                                                          \
  (gl ? 0.5f * x * (1.0f + RAL_TANH(GELU_K0 * (x + GELU_K1 * x * x * x)))                        \
      : 0.5f * x * (1.0f + erf(x * M_SQRT1_2_F)))
#define EWV_GELU_BW(T) (GELU_BW_##T(x, y, gl))
#define GELU_BW_float(g, x, approx) gelu_bw(g, x, approx)
#define EWV_RELU(T) (select(x, (T)(0.0f), x < (T)(0.0f)))
#define EWV_TANH_BW(T) (x * (1.0f - y * y))
#define EWV_SIGMOID_BW(T) (x * (1.0f - y) * y)
#define EWV_THRESH_BW(T) (select(x, (T)(0.0f), y <= (T)(f0)))
#define EWV_ADDCDIV(T) (x + f0 * (y / z))
#define EWV_ADDCMUL(T) (x + f0 * y * z)
/* gelu_bw on 16 lanes: the same formulas. */
inline float16 GELU_BW_float16(float16 g, float16 x, int approx) {
  if (approx) {
    float16 x2 = x * x, inner = GELU_K0 * (x + GELU_K1 * x2 * x), t = RAL_TANH(inner);
    float16 left = 0.5f * x, right = 1.0f + t;
    float16 dright = left * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x2);
    return g * (0.5f * right + dright);
  }
  float16 cdf = 0.5f * (1.0f + erf(x * M_SQRT1_2_F));
  float16 pdf = exp(-0.5f * x * x) * 0.3989422804014327f;
  return g * (cdf + x * pdf);
}

__kernel void ew_f32c(__global float* out, gcbuf p1, gcbuf p2, gcbuf p3, ocl_geom g, long chunk) {
  long i0 = get_global_id(0) * chunk, i1 = min(i0 + chunk, g.n);
  if (i0 >= i1) return;
  __global float* po = out + g.off[0];
  __global const float* pa = (__global const float*)p1 + g.off[1];
  __global const float* pb = (__global const float*)p2 + g.off[2];
  __global const float* pc = (__global const float*)p3 + g.off[3];
  /* Absent operands read as a broadcast zero (never from memory). */
  int ba = g.nin < 1 || g.st[1][0] == 0, bb = g.nin < 2 || g.st[2][0] == 0, bc = g.nin < 3 || g.st[3][0] == 0;
  float sa = g.nin >= 1 && ba ? ld_f(p1, g.off[1], g.dt[1]) : 0.0f;
  float sb = g.nin >= 2 && bb ? ld_f(p2, g.off[2], g.dt[2]) : 0.0f;
  float sc = g.nin >= 3 && bc ? ld_f(p3, g.off[3], g.dt[3]) : 0.0f;
  float f0 = g.lf[0], f1 = g.lf[1];
  int gl = g.li[0] != 0, op = g.op;
  switch (op) {
    case EW_COPY: EWC_LOOP(EWV_COPY)
    case EW_FILL: EWC_LOOP(EWV_FILL)
    case EW_ADD: EWC_LOOP(EWV_ADD)
    case EW_SUB: EWC_LOOP(EWV_SUB)
    case EW_MUL: EWC_LOOP(EWV_MUL)
    case EW_DIV: EWC_LOOP(EWV_DIV)
    case EW_ADDS: EWC_LOOP(EWV_ADDS)
    case EW_MULS: EWC_LOOP(EWV_MULS)
    case EW_DIVS: EWC_LOOP(EWV_DIVS)
    case EW_RSUBS: EWC_LOOP(EWV_RSUBS)
    case EW_POWS: EWC_LOOP(EWV_POWS)
    case EW_NEG: EWC_LOOP(EWV_NEG)
    case EW_SQRT: EWC_LOOP(EWV_SQRT)
    case EW_RSQRT: EWC_LOOP(EWV_RSQRT)
    case EW_EXP: EWC_LOOP(EWV_EXP)
    case EW_LOG: EWC_LOOP(EWV_LOG)
    case EW_TANH: EWC_LOOP(EWV_TANH)
    case EW_SIGMOID: EWC_LOOP(EWV_SIGMOID)
    case EW_RECIP: EWC_LOOP(EWV_RECIP)
    case EW_ERF: EWC_LOOP(EWV_ERF)
    case EW_SILU: EWC_LOOP(EWV_SILU)
    case EW_GELU: EWC_LOOP(EWV_GELU)
    case EW_RELU: EWC_LOOP(EWV_RELU)
    case EW_TANH_BW: EWC_LOOP(EWV_TANH_BW)
    case EW_SIGMOID_BW: EWC_LOOP(EWV_SIGMOID_BW)
    case EW_THRESH_BW: EWC_LOOP(EWV_THRESH_BW)
    case EW_ADDCDIV: EWC_LOOP(EWV_ADDCDIV)
    case EW_ADDCMUL: EWC_LOOP(EWV_ADDCMUL)
    case EW_GELU_BW: EWC_LOOP(EWV_GELU_BW)
    default:
      for (long i = i0; i < i1; i++) {
        float x = ba ? sa : pa[i], y = bb ? sb : pb[i], z = bc ? sc : pc[i];
        po[i] = ew_f(op, x, y, z, &g);
      }
  }
}

/* ew_f32c's form for float16 / bfloat16: the output and every contiguous input of one 16-bit
 * dtype (an input broadcast from one element may be any dtype). Each 16-lane block is
 * widened to float, computed by the same bodies and rounded once (bfloat16: c10's rounding,
 * as ral_f2bf; float16: vstore_half, as st_f), so results equal ew_anyc's bit for bit. */
inline float16 h16_bf_ld(gcbuf p, long i) {
  return as_float16(convert_uint16(vload16(0, (__global const ushort*)p + i)) << 16);
}
inline void h16_bf_st(gbuf p, long i, float16 v) {
  uint16 u = as_uint16(v);
  uint16 r = (u + (uint16)0x7FFFu + ((u >> 16) & (uint16)1u)) >> 16;
  /* NaN to the quiet NaN on the bits, as ral_f2bf */
  r = select(r, (uint16)0x7FC0u, (u & (uint16)0x7FFFFFFFu) > (uint16)0x7F800000u);
  vstore16(convert_ushort16(r), 0, (__global ushort*)p + i);
}
inline float16 h16_h_ld(gcbuf p, long i) { return vload_half16(0, (__global const half*)p + i); }
inline void h16_h_st(gbuf p, long i, float16 v) { vstore_half16(v, 0, (__global half*)p + i); }
#define EWH_LDV(L, p, sv, bc, i) ((bc) ? (float16)(sv) : L(p, i))
#define EWH_LOOP(OP, L, S, LS, SS)                                                          \
  {                                                                                        \
    long i = i0;                                                                           \
    for (; i + 16 <= i1; i += 16) {                                                        \
      float16 x = EWH_LDV(L, pa, sa, ba, i), y = EWH_LDV(L, pb, sb, bb, i), z = EWH_LDV(L, pc, sc, bc, i); \
      S(po, i, OP(float16));                                                               \
    }                                                                                      \
    for (; i < i1; i++) {                                                                  \
      float x = ba ? sa : LS(pa, i), y = bb ? sb : LS(pb, i), z = bc ? sc : LS(pc, i);     \
      SS(po, i, OP(float));                                                                \
    }                                                                                      \
  }                                                                                        \
  break;
#define EWH_BF_LS(p, i) ld_f(p, i, DT_BF16)
#define EWH_BF_SS(p, i, v) st_f(p, i, DT_BF16, v)
#define EWH_H_LS(p, i) ld_f(p, i, DT_F16)
#define EWH_H_SS(p, i, v) st_f(p, i, DT_F16, v)
#define EWH_CASES(L, S, LS, SS)                                         \
  switch (op) {                                                         \
    case EW_COPY: EWH_LOOP(EWV_COPY, L, S, LS, SS)                      \
    case EW_FILL: EWH_LOOP(EWV_FILL, L, S, LS, SS)                      \
    case EW_ADD: EWH_LOOP(EWV_ADD, L, S, LS, SS)                        \
    case EW_SUB: EWH_LOOP(EWV_SUB, L, S, LS, SS)                        \
    case EW_MUL: EWH_LOOP(EWV_MUL, L, S, LS, SS)                        \
    case EW_DIV: EWH_LOOP(EWV_DIV, L, S, LS, SS)                        \
    case EW_ADDS: EWH_LOOP(EWV_ADDS, L, S, LS, SS)                      \
    case EW_MULS: EWH_LOOP(EWV_MULS, L, S, LS, SS)                      \
    case EW_DIVS: EWH_LOOP(EWV_DIVS, L, S, LS, SS)                      \
    case EW_RSUBS: EWH_LOOP(EWV_RSUBS, L, S, LS, SS)                    \
    case EW_NEG: EWH_LOOP(EWV_NEG, L, S, LS, SS)                        \
    case EW_RELU: EWH_LOOP(EWV_RELU, L, S, LS, SS)                      \
    case EW_THRESH_BW: EWH_LOOP(EWV_THRESH_BW, L, S, LS, SS)            \
    case EW_ADDCDIV: EWH_LOOP(EWV_ADDCDIV, L, S, LS, SS)                \
    case EW_ADDCMUL: EWH_LOOP(EWV_ADDCMUL, L, S, LS, SS)                \
    case EW_SQRT: EWH_LOOP(EWV_SQRT, L, S, LS, SS)                      \
    case EW_EXP: EWH_LOOP(EWV_EXP, L, S, LS, SS)                        \
    case EW_SIGMOID: EWH_LOOP(EWV_SIGMOID, L, S, LS, SS)                \
    case EW_TANH: EWH_LOOP(EWV_TANH, L, S, LS, SS)                      \
    case EW_SILU: EWH_LOOP(EWV_SILU, L, S, LS, SS)                      \
    case EW_GELU: EWH_LOOP(EWV_GELU, L, S, LS, SS)                      \
    case EW_TANH_BW: EWH_LOOP(EWV_TANH_BW, L, S, LS, SS)                \
    case EW_SIGMOID_BW: EWH_LOOP(EWV_SIGMOID_BW, L, S, LS, SS)          \
    case EW_GELU_BW: EWH_LOOP(EWV_GELU_BW, L, S, LS, SS)                \
    default:                                                            \
      for (long i = i0; i < i1; i++) {                                  \
        float x = ba ? sa : LS(pa, i), y = bb ? sb : LS(pb, i), z = bc ? sc : LS(pc, i); \
        SS(po, i, ew_f(op, x, y, z, &g));                               \
      }                                                                 \
  }

__kernel void ew_h16c(gbuf out, gcbuf p1, gcbuf p2, gcbuf p3, ocl_geom g, long chunk) {
  long i0 = get_global_id(0) * chunk, i1 = min(i0 + chunk, g.n);
  if (i0 >= i1) return;
  long es = 2; /* bytes per element of the 16-bit operands */
  gbuf po = out + g.off[0] * es;
  /* Absent or broadcast operands read one element of their own dtype (never a block). */
  int ba = g.nin < 1 || g.st[1][0] == 0, bb = g.nin < 2 || g.st[2][0] == 0, bc = g.nin < 3 || g.st[3][0] == 0;
  gcbuf pa = p1 + (ba ? 0 : g.off[1] * es), pb = p2 + (bb ? 0 : g.off[2] * es), pc = p3 + (bc ? 0 : g.off[3] * es);
  float sa = g.nin >= 1 && ba ? ld_f(p1, g.off[1], g.dt[1]) : 0.0f;
  float sb = g.nin >= 2 && bb ? ld_f(p2, g.off[2], g.dt[2]) : 0.0f;
  float sc = g.nin >= 3 && bc ? ld_f(p3, g.off[3], g.dt[3]) : 0.0f;
  float f0 = g.lf[0], f1 = g.lf[1];
  int gl = g.li[0] != 0, op = g.op;
  if (g.dt[0] == DT_BF16) {
    EWH_CASES(h16_bf_ld, h16_bf_st, EWH_BF_LS, EWH_BF_SS)
  } else {
    EWH_CASES(h16_h_ld, h16_h_st, EWH_H_LS, EWH_H_SS)
  }
}

/* Contiguous float32 <-> float16/bfloat16 casts, 16 lanes at a time: autocast casts every
 * matmul's operands and results, and copy_castc's per-element dtype switch took 0.4 ms for a
 * [512, 1024] cast (the bits are ld_f/st_f's: h16_*_st round as st_f does). */
__kernel void copy_h16c(gbuf dst, gcbuf src, ocl_geom g, long chunk) {
  long i0 = get_global_id(0) * chunk, i1 = min(i0 + chunk, g.n);
  if (i0 >= i1) return;
  int dd = g.dt[0], ds = g.dt[1];
  long i = i0;
  if (ds == DT_F32) {
    __global const float* s = (__global const float*)src + g.off[1];
    gbuf d = dst + g.off[0] * 2;
    if (dd == DT_BF16)
      for (; i + 16 <= i1; i += 16) h16_bf_st(d, i, vload16(0, s + i));
    else
      for (; i + 16 <= i1; i += 16) h16_h_st(d, i, vload16(0, s + i));
    for (; i < i1; i++) st_f(d, i, dd, s[i]);
  } else {
    __global float* d = (__global float*)dst + g.off[0];
    gcbuf s = src + g.off[1] * 2;
    if (ds == DT_BF16)
      for (; i + 16 <= i1; i += 16) vstore16(h16_bf_ld(s, i), 0, d + i);
    else
      for (; i + 16 <= i1; i += 16) vstore16(h16_h_ld(s, i), 0, d + i);
    for (; i < i1; i++) d[i] = ld_f(s, i, ds);
  }
}

/* All-float32 strided operands: typed loads, the op switch outside the walk. */
#define EWA_LOOP(OP)                                                                   \
  GEOM_CHUNK_WALK(g, chunk, nt, {                                                      \
    float x = pa[e[1] + j * s[1]];                                                     \
    float y = g.nin > 1 ? pb[e[2] + j * s[2]] : 0.0f;                                  \
    float z = g.nin > 2 ? pc[e[3] + j * s[3]] : 0.0f;                                  \
    po[e[0] + j * s[0]] = OP(float);                                                   \
  })                                                                                   \
  break;

/* Any dtypes and strides, a chunk per work-item (the CPU form of ew_any). */
__kernel void ew_anyc(gbuf p0, gcbuf p1, gcbuf p2, gcbuf p3, ocl_geom g, long chunk) {
  int nt = 1 + g.nin;
  int f32 = g.cfl && g.nin >= 1 && g.dt[0] == DT_F32 && g.dt[1] == DT_F32 && (g.nin < 2 || g.dt[2] == DT_F32) &&
            (g.nin < 3 || g.dt[3] == DT_F32);
  if (f32) {
    __global float* po = (__global float*)p0;
    __global const float* pa = (__global const float*)p1;
    __global const float* pb = (__global const float*)p2;
    __global const float* pc = (__global const float*)p3;
    float f0 = g.lf[0], f1 = g.lf[1];
    int op = g.op;
    switch (op) {
      case EW_ADD: EWA_LOOP(EWV_ADD)
      case EW_SUB: EWA_LOOP(EWV_SUB)
      case EW_MUL: EWA_LOOP(EWV_MUL)
      case EW_DIV: EWA_LOOP(EWV_DIV)
      case EW_COPY: EWA_LOOP(EWV_COPY)
      case EW_MULS: EWA_LOOP(EWV_MULS)
      case EW_ADDS: EWA_LOOP(EWV_ADDS)
      case EW_EXP: EWA_LOOP(EWV_EXP)
      default:
        GEOM_CHUNK_WALK(g, chunk, nt, {
          float x = pa[e[1] + j * s[1]];
          float y = g.nin > 1 ? pb[e[2] + j * s[2]] : 0.0f;
          float z = g.nin > 2 ? pc[e[3] + j * s[3]] : 0.0f;
          po[e[0] + j * s[0]] = ew_f(op, x, y, z, &g);
        })
    }
    return;
  }
  if (g.cfl) {
    GEOM_CHUNK_WALK(g, chunk, nt, {
      float a = g.nin > 0 ? ld_f(p1, e[1] + j * s[1], g.dt[1]) : 0.0f;
      float b = g.nin > 1 ? ld_f(p2, e[2] + j * s[2], g.dt[2]) : 0.0f;
      float cc = g.nin > 2 ? ld_f(p3, e[3] + j * s[3], g.dt[3]) : 0.0f;
      st_f(p0, e[0] + j * s[0], g.dt[0], ew_f(g.op, a, b, cc, &g));
    })
  } else {
    GEOM_CHUNK_WALK(g, chunk, nt, {
      long a = g.nin > 0 ? ld_i(p1, e[1] + j * s[1], g.dt[1]) : 0;
      long b = g.nin > 1 ? ld_i(p2, e[2] + j * s[2], g.dt[2]) : 0;
      long cc = g.nin > 2 ? ld_i(p3, e[3] + j * s[3], g.dt[3]) : 0;
      st_i(p0, e[0] + j * s[0], g.dt[0], ew_i(g.op, a, b, cc, &g));
    })
  }
}

/* Same-dtype strided copy, a chunk per work-item (the CPU form of copy_bytes). */
#define COPYC_CASE(T)                                                                        \
  GEOM_CHUNK_WALK(g, chunk, 2, { ((__global T*)dst)[e[0] + j * s[0]] = ((__global const T*)src)[e[1] + j * s[1]]; }) \
  break;
__kernel void copy_bytesc(gbuf dst, gcbuf src, ocl_geom g, long chunk) {
  switch (g.flags) {
    case 8: COPYC_CASE(long)
    case 4: COPYC_CASE(int)
    case 2: COPYC_CASE(short)
    default: COPYC_CASE(char)
  }
}

/* Cross-dtype copy, a chunk per work-item (the CPU form of copy_cast). */
__kernel void copy_castc(gbuf dst, gcbuf src, ocl_geom g, long chunk) {
  int dd = g.dt[0], ds = g.dt[1];
#ifdef OCL_HAS_FP64
  if (dd == DT_F64 || ds == DT_F64) {
    GEOM_CHUNK_WALK(g, chunk, 2, { st_d(dst, e[0] + j * s[0], dd, ld_d(src, e[1] + j * s[1], ds)); })
    return;
  }
#endif
  if (g.cfl) {
    GEOM_CHUNK_WALK(g, chunk, 2, { st_f(dst, e[0] + j * s[0], dd, ld_f(src, e[1] + j * s[1], ds)); })
  } else {
    GEOM_CHUNK_WALK(g, chunk, 2, { st_i(dst, e[0] + j * s[0], dd, ld_i(src, e[1] + j * s[1], ds)); })
  }
}
