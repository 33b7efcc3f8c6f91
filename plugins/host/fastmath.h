/*
 * fastmath.h -- the host kernels' type-generic picks of ral_fastmath.h's float32 functions
 * (torch_fl/_native/include, shared with the jit's C kernels): the fast float versions for
 * float, libm for double and anything else, so op expressions are written once.
 */
#ifndef HOST_FASTMATH_H
#define HOST_FASTMATH_H

#include <math.h>

#include "ral_fastmath.h"

#define HOST_EXP(v) _Generic((v), float: ral_expf, default: exp)(v)
#define HOST_LOG(v) _Generic((v), float: ral_logf, default: log)(v)
#define HOST_TANH(v) _Generic((v), float: ral_tanhf, default: tanh)(v)
#define HOST_ERF(v) _Generic((v), float: ral_erff, default: erf)(v)
static inline double host_sigmoid_d(double x) { return 1.0 / (1.0 + exp(-x)); }
#define HOST_SIGMOID(v) _Generic((v), float: ral_sigmoidf, default: host_sigmoid_d)(v)

#endif /* HOST_FASTMATH_H */
