/*
 * random.c -- bernoulli_, uniform_, normal_ with Philox4x32-10.
 *
 * The generator arrives as an INT_LIST scalar [seed, offset]. Element i (row-major
 * position in the tensor) uses the Philox block at counter offset + i under key seed, so
 * a result depends only on (seed, offset, shape): not on threads, strides or chunking.
 * Each call consumes numel counters; the caller advances its offset by numel.
 * Without a generator (NONE), a process-wide offset advances on every call.
 */
#include <math.h>
#include <stdatomic.h>

#include "host.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define DEFAULT_SEED 67280421310721ull

static void philox(uint64_t counter, uint64_t seed, uint32_t out[4]) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* uniform in [0, 1) with 53 random bits */
static double unit(const uint32_t* r) {
  return (double)((((uint64_t)r[0] << 32) | r[1]) >> 11) * 0x1.0p-53;
}

typedef enum { RNG_UNIFORM, RNG_NORMAL, RNG_BERNOULLI } rng_kind;

static double sample(rng_kind kind, uint64_t counter, uint64_t seed, double a, double b,
                     int32_t dtype) {
  uint32_t r[4];
  philox(counter, seed, r);
  double u = unit(r);
  switch (kind) {
    case RNG_UNIFORM: {
      double v = a + (b - a) * u;
      /* rounding to a narrow type must not produce the excluded upper bound */
      if (dtype != RAL_DTYPE_FLOAT64 && v >= b) v = nextafterf((float)b, (float)a);
      return v;
    }
    case RNG_NORMAL: {
      double u2 = unit(r + 2), radius = sqrt(-2.0 * log(1.0 - u)); /* 1-u in (0, 1] */
      return a + b * radius * cos(2.0 * M_PI * u2);
    }
    case RNG_BERNOULLI:
      return u < a ? 1.0 : 0.0;
  }
  return 0;
}

static _Atomic uint64_t g_offset;

/* in-place: outputs [self], inputs [self]; scalars [a, b, generator] (bernoulli: [p, gen]) */
static ral_status random_kernel(const ral_kernel_call* c, rng_kind kind, int gen_at) {
  ral_status st = host_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* t = host_out(c, 0);
  if (!host_dtype_is_computable(t->dtype) || (kind != RNG_BERNOULLI && !host_dtype_is_float(t->dtype)))
    return host_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s is not supported", host_dtype_name(t->dtype));
  double a = kind == RNG_BERNOULLI ? 0.5 : 0.0, b = 1.0;
  int64_t unused;
  host_scalar_num(c, 0, &a, &unused);
  if (kind != RNG_BERNOULLI) host_scalar_num(c, 1, &b, &unused);
  int64_t n = host_numel(t);
  int ng;
  const int64_t* gen = host_scalar_list(c, gen_at, &ng);
  uint64_t seed = DEFAULT_SEED, offset;
  if (gen && ng >= 2) {
    seed = (uint64_t)gen[0];
    offset = (uint64_t)gen[1];
  } else {
    offset = atomic_fetch_add(&g_offset, (uint64_t)n);
  }
  int64_t es = host_dtype_size(t->dtype);
  char* base = host_ptr(t);
  int contiguous = host_is_contiguous(t);
#pragma omp parallel for schedule(static) if (n > HOST_GRAIN_HEAVY)
  for (int64_t i = 0; i < n; i++) {
    int64_t off = i;
    if (!contiguous) {
      int64_t rest = i;
      off = 0;
      for (int d = t->ndim - 1; d >= 0; d--) {
        off += (rest % t->sizes[d]) * t->strides[d];
        rest /= t->sizes[d];
      }
    }
    double v = sample(kind, offset + (uint64_t)i, seed, a, b, t->dtype);
    host_store_value(base + off * es, t->dtype, v, (int64_t)v);
  }
  return RAL_OK;
}

/* bernoulli_.float(self, p, *, generator) */
ral_status host_bernoulli_float(const ral_kernel_call* c) { return random_kernel(c, RNG_BERNOULLI, 1); }
/* uniform_(self, from, to, *, generator) */
ral_status host_uniform(const ral_kernel_call* c) { return random_kernel(c, RNG_UNIFORM, 2); }
/* normal_(self, mean, std, *, generator) */
ral_status host_normal(const ral_kernel_call* c) { return random_kernel(c, RNG_NORMAL, 2); }
