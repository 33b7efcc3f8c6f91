/* random.c -- bernoulli_, uniform_, normal_ (Philox; the convention is in random.cl). */
#include <stdatomic.h>
#include <string.h>

#include "ocl.h"

#define DEFAULT_SEED 67280421310721ull

static _Atomic uint64_t g_offset;

static int64_t double_bits(double v) {
  int64_t bits;
  memcpy(&bits, &v, sizeof bits);
  return bits;
}

/* in-place: outputs [self], inputs [self]; scalars [a, b, generator] (bernoulli: [p, gen]). */
static ral_status random_run(const ral_kernel_call* c, int kind, int gen_at) {
  ral_status st = ocl_check_arity(c, 1, 1, 0);
  if (st != RAL_OK) return st;
  const ral_tensor* t = ocl_out(c, 0);
  if (!ocl_dtype_is_float(t->dtype) && kind != RNG_BERNOULLI)
    return ocl_fail(c, RAL_ERROR_UNSUPPORTED, "dtype %s is not supported", ocl_dtype_name(t->dtype));
  double a = kind == RNG_BERNOULLI ? 0.5 : 0.0, b = 1.0;
  a = ocl_scalar_f(c, 0, a);
  if (kind != RNG_BERNOULLI) b = ocl_scalar_f(c, 1, b);
  int64_t n = ocl_numel(t);
  int ng;
  const int64_t* gen = ocl_scalar_list(c, gen_at, &ng);
  uint64_t seed = DEFAULT_SEED, offset;
  if (gen && ng >= 2) {
    seed = (uint64_t)gen[0];
    offset = (uint64_t)gen[1];
  } else {
    offset = atomic_fetch_add(&g_offset, (uint64_t)n);
  }
  ocl_geom g;
  ocl_geom_init(&g, &t, 1);
  if (g.n == 0) return RAL_OK;
  g.op = kind;
  g.li[0] = (int64_t)seed;
  g.li[1] = (int64_t)offset;
  g.li[2] = double_bits(a);
  g.li[3] = double_bits(b);
  ocl_arg args[2] = {ocl_mem(t), OCL_VAL(g)};
  size_t global = (size_t)g.n, local = 64;
  return ocl_enqueue(c, OCL_K_random_k, 2, args, 1, &global, &local);
}

/* bernoulli_.float(self, p, *, generator) */
ral_status ocl_bernoulli_float(const ral_kernel_call* c) { return random_run(c, RNG_BERNOULLI, 1); }
/* uniform_(self, from, to, *, generator) */
ral_status ocl_uniform(const ral_kernel_call* c) { return random_run(c, RNG_UNIFORM, 2); }
/* normal_(self, mean, std, *, generator) */
ral_status ocl_normal(const ral_kernel_call* c) { return random_run(c, RNG_NORMAL, 2); }
