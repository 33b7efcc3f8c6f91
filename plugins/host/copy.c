/*
 * copy.c -- strided copies with dtype casts (copy_, clone), fills (fill_, zero_), and the
 * conversion helpers other kernels use for scratch buffers.
 *
 * A cast goes through a pivot type in chunks: int64 between integer/bool dtypes (exact),
 * double otherwise; each dtype then only needs a loader into and a storer out of each
 * pivot, instead of one loop per (source, destination) pair. Floating -> integer goes
 * through int64 first, which is how PyTorch wraps out-of-range values (-1.0 -> 255u8).
 */
#include <string.h>

#include "host.h"
#include "runtime.h"

#define CHUNK 256

typedef void (*load_fn)(void* dst, const char* src, int64_t stride, int64_t n);
typedef void (*store_fn)(char* dst, int64_t stride, const void* src, int64_t n);

#define DEF_LOAD(N, ST, CT, P, PN)                                              \
  static void load_##PN##_##N(void* dst, const char* src, int64_t stride, int64_t n) { \
    P* d = dst;                                                                 \
    for (int64_t i = 0; i < n; i++) d[i] = (P)HOST_TO_##N(*(const ST*)(src + i * stride)); \
  }
#define DEF_STORE_FLT(N, ST, CT, P, PN)                                         \
  static void store_##PN##_##N(char* dst, int64_t stride, const void* src, int64_t n) { \
    const P* s = src;                                                           \
    for (int64_t i = 0; i < n; i++) *(ST*)(dst + i * stride) = HOST_FROM_##N((CT)s[i]); \
  }
#define DEF_STORE_INT(N, ST, CT, P, PN)                                         \
  static void store_##PN##_##N(char* dst, int64_t stride, const void* src, int64_t n) { \
    const P* s = src;                                                           \
    for (int64_t i = 0; i < n; i++) *(ST*)(dst + i * stride) = (ST)(int64_t)s[i]; \
  }
#define DEF_STORE_BOOL(N, ST, CT, P, PN)                                        \
  static void store_##PN##_##N(char* dst, int64_t stride, const void* src, int64_t n) { \
    const P* s = src;                                                           \
    for (int64_t i = 0; i < n; i++) *(ST*)(dst + i * stride) = (ST)(s[i] != 0); \
  }
#define DEF_PIVOT(P, PN)                      \
  HOST_FOR_ALL(DEF_LOAD, P, PN)               \
  HOST_FOR_FLT(DEF_STORE_FLT, P, PN)          \
  HOST_FOR_INT(DEF_STORE_INT, P, PN)          \
  HOST_FOR_BOOL(DEF_STORE_BOOL, P, PN)

DEF_PIVOT(double, f64)
DEF_PIVOT(int64_t, i64)
DEF_PIVOT(float, f32)

#define LOAD_ENTRY(N, ST, CT, PN) [RAL_DTYPE_##N] = load_##PN##_##N,
#define STORE_ENTRY(N, ST, CT, PN) [RAL_DTYPE_##N] = store_##PN##_##N,
static const load_fn load_f64[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(LOAD_ENTRY, f64)};
static const load_fn load_i64[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(LOAD_ENTRY, i64)};
static const load_fn load_f32[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(LOAD_ENTRY, f32)};
static const store_fn store_f64[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(STORE_ENTRY, f64)};
static const store_fn store_i64[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(STORE_ENTRY, i64)};
static const store_fn store_f32[RAL_DTYPE_COUNT] = {HOST_FOR_ALL(STORE_ENTRY, f32)};

/* Contiguous 16-bit rows <-> float: the pivot loaders' stride is a runtime value, which keeps
 * the compiler from vectorizing them; these unit-stride loops vectorize (ral_half.h is
 * branch-free) and give the same bits. */
HOST_SIMD_CLONES static void widen_half_row(float* d, const uint16_t* s, int bf, int64_t n) {
  if (bf)
    for (int64_t i = 0; i < n; i++) d[i] = ral_bf2f(s[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = ral_h2f(s[i]);
}

HOST_SIMD_CLONES static void round_half_row(uint16_t* d, const float* s, int bf, int64_t n) {
  if (bf)
    for (int64_t i = 0; i < n; i++) d[i] = ral_f2bf(s[i]);
  else
    for (int64_t i = 0; i < n; i++) d[i] = ral_f2h(s[i]);
}

void host_load_float(float* dst, const char* src, int32_t dtype, int64_t n) {
  if (dtype == RAL_DTYPE_FLOAT32) memcpy(dst, src, (size_t)n * 4);
  else if (dtype == RAL_DTYPE_BFLOAT16 || dtype == RAL_DTYPE_FLOAT16)
    widen_half_row(dst, (const uint16_t*)src, dtype == RAL_DTYPE_BFLOAT16, n);
  else load_f32[dtype](dst, src, host_dtype_size(dtype), n);
}

void host_store_float(char* dst, int32_t dtype, const float* src, int64_t n) {
  if (dtype == RAL_DTYPE_FLOAT32) memcpy(dst, src, (size_t)n * 4);
  else if (dtype == RAL_DTYPE_BFLOAT16 || dtype == RAL_DTYPE_FLOAT16)
    round_half_row((uint16_t*)dst, src, dtype == RAL_DTYPE_BFLOAT16, n);
  else store_f32[dtype](dst, host_dtype_size(dtype), src, n);
}

void host_load_row(void* dst, int32_t pivot, const char* src, int64_t stride, int32_t dtype,
                   int64_t n) {
  (pivot == RAL_DTYPE_FLOAT64 ? load_f64 : load_f32)[dtype](dst, src, stride, n);
}

void host_store_row(char* dst, int64_t stride, int32_t dtype, const void* src, int32_t pivot,
                    int64_t n) {
  (pivot == RAL_DTYPE_FLOAT64 ? store_f64 : store_f32)[dtype](dst, stride, src, n);
}

double host_load_f64(const char* p, int32_t dtype) {
  double v;
  load_f64[dtype](&v, p, 0, 1);
  return v;
}

void host_store_value(char* p, int32_t dtype, double f, int64_t i) {
  if (host_dtype_is_float(dtype)) store_f64[dtype](p, 0, &f, 1);
  else if (dtype == RAL_DTYPE_BOOL) *(uint8_t*)p = (uint8_t)(f != 0 || i != 0);
  else store_i64[dtype](p, 0, &i, 1);
}

void host_read_scalar(const ral_tensor* t, double* f, int64_t* i) {
  load_f64[t->dtype](f, host_ptr(t), 0, 1);
  load_i64[t->dtype](i, host_ptr(t), 0, 1);
}

/* ---------------------------------------------------------------- row functions */
typedef struct {
  load_fn load;
  store_fn store;
  int64_t esize;
} copy_ctx;

#define DEF_MOVE(BITS)                                                                     \
  static void move_##BITS(int64_t n, char* d, int64_t sd, const char* s, int64_t ss) {     \
    for (int64_t i = 0; i < n; i++) *(uint##BITS##_t*)(d + i * sd) = *(const uint##BITS##_t*)(s + i * ss); \
  }
DEF_MOVE(8)
DEF_MOVE(16)
DEF_MOVE(32)
DEF_MOVE(64)

static void copy_same_row(int64_t n, char* const* p, const int64_t* s, const void* ctx) {
  int64_t es = ((const copy_ctx*)ctx)->esize;
  if (s[0] == es && s[1] == es) {
    memmove(p[0], p[1], (size_t)(n * es));
    return;
  }
  switch (es) {
    case 1: move_8(n, p[0], s[0], p[1], s[1]); break;
    case 2: move_16(n, p[0], s[0], p[1], s[1]); break;
    case 4: move_32(n, p[0], s[0], p[1], s[1]); break;
    case 8: move_64(n, p[0], s[0], p[1], s[1]); break;
    default:
      for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], p[1] + i * s[1], (size_t)es);
  }
}

static void copy_cast_row(int64_t n, char* const* p, const int64_t* s, const void* ctx) {
  const copy_ctx* c = ctx;
  double buf[CHUNK]; /* also holds int64 pivots: same size */
  for (int64_t i = 0; i < n; i += CHUNK) {
    int64_t k = n - i < CHUNK ? n - i : CHUNK;
    c->load(buf, p[1] + i * s[1], s[1], k);
    c->store(p[0] + i * s[0], s[0], buf, k);
  }
}

/* float32 <-> float16/bfloat16 without the double pivot: autocast casts every matmul's
 * operands, and the pivot made those copies 3-5x slower than the conversion itself. */
#define DEF_HALF_CAST(NAME, DT, ST, CONV)                                                   \
  HOST_SIMD_CLONES static void NAME(int64_t n, char* const* p, const int64_t* s, const void* ctx) { \
    (void)ctx;                                                                              \
    if (s[0] == (int64_t)sizeof(DT) && s[1] == (int64_t)sizeof(ST)) {                       \
      DT* restrict d = (DT*)p[0];                                                           \
      const ST* restrict x = (const ST*)p[1];                                               \
      for (int64_t i = 0; i < n; i++) d[i] = CONV(x[i]);                                    \
      return;                                                                               \
    }                                                                                       \
    for (int64_t i = 0; i < n; i++) *(DT*)(p[0] + i * s[0]) = CONV(*(const ST*)(p[1] + i * s[1])); \
  }
DEF_HALF_CAST(cast_f32_bf16, uint16_t, float, ral_f2bf)
DEF_HALF_CAST(cast_f32_f16, uint16_t, float, ral_f2h)
DEF_HALF_CAST(cast_bf16_f32, float, uint16_t, ral_bf2f)
DEF_HALF_CAST(cast_f16_f32, float, uint16_t, ral_h2f)

static host_row_fn half_cast_row(int32_t dst, int32_t src) {
  if (src == RAL_DTYPE_FLOAT32 && dst == RAL_DTYPE_BFLOAT16) return cast_f32_bf16;
  if (src == RAL_DTYPE_FLOAT32 && dst == RAL_DTYPE_FLOAT16) return cast_f32_f16;
  if (src == RAL_DTYPE_BFLOAT16 && dst == RAL_DTYPE_FLOAT32) return cast_bf16_f32;
  if (src == RAL_DTYPE_FLOAT16 && dst == RAL_DTYPE_FLOAT32) return cast_f16_f32;
  return NULL;
}

ral_status host_copy(const ral_tensor* dst, const ral_tensor* src) {
  if (!host_same_shape(dst, src))
    return host_error(RAL_ERROR_INVALID_ARGUMENT, "copy: source shape differs from destination");
  copy_ctx ctx = {NULL, NULL, host_dtype_size(dst->dtype)};
  host_row_fn fn = copy_same_row;
  if (dst->dtype != src->dtype) {
    if (!host_dtype_is_computable(dst->dtype) || !host_dtype_is_computable(src->dtype))
      return host_error(RAL_ERROR_UNSUPPORTED, "copy: cannot cast %s to %s",
                        host_dtype_name(src->dtype), host_dtype_name(dst->dtype));
    int int_pivot = !host_dtype_is_float(dst->dtype) && !host_dtype_is_float(src->dtype);
    ctx.load = (int_pivot ? load_i64 : load_f64)[src->dtype];
    ctx.store = (int_pivot ? store_i64 : store_f64)[dst->dtype];
    fn = half_cast_row(dst->dtype, src->dtype);
    if (!fn) fn = copy_cast_row;
  } else if (ctx.esize == 0) {
    return host_error(RAL_ERROR_UNSUPPORTED, "copy: unknown dtype code %d", dst->dtype);
  }
  const ral_tensor* ts[2] = {dst, src};
  host_iter it;
  host_iter_init(&it, ts, 2);
  host_iter_run(&it, fn, &ctx, HOST_GRAIN);
  return RAL_OK;
}

/* ---------------------------------------------------------------- fill */
typedef struct {
  int64_t esize;
  unsigned char bytes[16];
} fill_ctx;

#define DEF_FILL(BITS)                                                        \
  static void fill_##BITS(int64_t n, char* d, int64_t sd, const void* v) {    \
    uint##BITS##_t x;                                                         \
    memcpy(&x, v, sizeof x);                                                  \
    if (sd == (int64_t)sizeof x) {                                            \
      uint##BITS##_t* o = (uint##BITS##_t*)d;                                 \
      for (int64_t i = 0; i < n; i++) o[i] = x;                               \
    } else {                                                                  \
      for (int64_t i = 0; i < n; i++) *(uint##BITS##_t*)(d + i * sd) = x;     \
    }                                                                         \
  }
DEF_FILL(8)
DEF_FILL(16)
DEF_FILL(32)
DEF_FILL(64)

static void fill_row(int64_t n, char* const* p, const int64_t* s, const void* ctx) {
  const fill_ctx* c = ctx;
  switch (c->esize) {
    case 1: fill_8(n, p[0], s[0], c->bytes); break;
    case 2: fill_16(n, p[0], s[0], c->bytes); break;
    case 4: fill_32(n, p[0], s[0], c->bytes); break;
    case 8: fill_64(n, p[0], s[0], c->bytes); break;
    default:
      for (int64_t i = 0; i < n; i++) memcpy(p[0] + i * s[0], c->bytes, (size_t)c->esize);
  }
}

void host_fill(const ral_tensor* dst, double f, int64_t i) {
  fill_ctx ctx = {host_dtype_size(dst->dtype), {0}};
  if (host_dtype_is_computable(dst->dtype)) host_store_value((char*)ctx.bytes, dst->dtype, f, i);
  const ral_tensor* ts[1] = {dst};
  host_iter it;
  host_iter_init(&it, ts, 1);
  host_iter_run(&it, fill_row, &ctx, HOST_GRAIN);
}

/* ---------------------------------------------------------------- kernels */
/* copy_(Tensor(a!) self, Tensor src, bool non_blocking): outputs [self], inputs [self, src] */
ral_status host_copy_(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 2, 0);
  if (st != RAL_OK) return st;
  st = host_copy(host_out(c, 0), host_in(c, 1));
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

ral_status host_clone(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  st = host_copy(host_out(c, 0), host_in(c, 0));
  return st == RAL_OK ? st : host_fail(c, st, "%s", host_last_error());
}

/* fill_.Scalar(self, value) reads scalar 0; fill_.Tensor(self, value) reads its second
 * input, a one-element device tensor (possibly expanded to self's shape by the router). */
static ral_status fill_kernel(const ral_kernel_call* c, int from_tensor) {
  double f;
  int64_t i;
  ral_status st = host_check_arity(c, 1, 1 + from_tensor, !from_tensor);
  if (st != RAL_OK) return st;
  if (!host_dtype_is_computable(host_out(c, 0)->dtype))
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "cannot fill dtype %s",
                     host_dtype_name(host_out(c, 0)->dtype));
  if (from_tensor) {
    const ral_tensor* v = host_in(c, 1);
    if (!host_is_single_value(v) || !host_dtype_is_computable(v->dtype))
      return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "value must be a one-element real tensor");
    host_read_scalar(v, &f, &i);
  } else if (!host_scalar_num(c, 0, &f, &i)) {
    return host_fail(c, RAL_ERROR_INVALID_ARGUMENT, "fill value is not a number");
  }
  host_fill(host_out(c, 0), f, i);
  return RAL_OK;
}

ral_status host_fill_scalar(const ral_kernel_call* c) { return fill_kernel(c, 0); }
ral_status host_fill_tensor(const ral_kernel_call* c) { return fill_kernel(c, 1); }

ral_status host_zero_(const ral_kernel_call* c) {
  ral_status st = host_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  host_fill(host_out(c, 0), 0.0, 0);
  return RAL_OK;
}
