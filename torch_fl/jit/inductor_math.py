"""Vector math for inductor's C++ kernels on host-mappable ral devices.

Inductor's C++ generator writes float32 `tanh` as `at::vec::Vectorized<float>::tanh()`, which
is Sleef's 1-ulp `tanhf` and about three times the cost of the rest of a tanh-GELU: a GPT-2
step's four GELU forwards and four GELU backwards were half its C++ kernel time. The eager
host plugin and the jit's C kernels compute tanh with `ral_fastmath.h`'s branch-free
`ral_tanhf` (1.33 ulp, odd polynomial below 0.625, else 1 - 2/(e^2|x| + 1)). `rewrite()`
makes a kernel's float vector `tanh` that function written in at::vec operations (its
e^t is the vector `exp_u20`, 2 ulp), pasted into the kernel's source (inductor keys its
compiled modules on the source text). Scalar tails (`std::tanh`) and other vector types
keep inductor's code. The switch
`TORCH_FL_INDUCTOR_FAST_MATH=0` keeps inductor's code (and its Welford variances:
`inductor_variance`); it is part of inductor's cache key
(`inductor_key`).
"""

from __future__ import annotations

import functools
import os
import re

_TANH = re.compile(r"\b(tmp\d+)\.tanh\(\)")
_PREFIX = "#include <torch/csrc/inductor/cpp_prefix.h>"


def enabled() -> bool:
    """Whether inductor kernels generated now take ral_fastmath.h's vector tanh."""
    return os.environ.get("TORCH_FL_INDUCTOR_FAST_MATH", "1") != "0"


@functools.cache
def prelude() -> str:
    """C++ text defining `ral_vtanh`: ral_fastmath.h's `ral_tanhf` in at::vec operations for
    float vectors (e^t by the vector `exp_u20`), the vector's own tanh for other types."""
    return """
// torch_fl.jit.inductor_math: ral_fastmath.h's ral_tanhf on inductor's float vectors
template <typename V> static inline V ral_vtanh(const V& x) { return x.tanh(); }
static inline at::vec::Vectorized<float> ral_vtanh(const at::vec::Vectorized<float>& x) {
  using V = at::vec::Vectorized<float>;
  const V a = x.abs(), z = x * x;
  V p = V(-5.70498872745e-3f);
  p = p * z + V(2.06390887954e-2f);
  p = p * z - V(5.37397155531e-2f);
  p = p * z + V(1.33314422036e-1f);
  p = p * z - V(3.33332819422e-1f);
  const V small = a + a * z * p;  // |x| < 0.625: odd polynomial
  const V ac = at::vec::minimum(a, V(9.1f));  // tanh is 1.0f from 9.1 on
  const V big = V(1.0f) - V(2.0f) / ((ac + ac).exp_u20() + V(1.0f));
  const V y = V::blendv(big, small, a < V(0.625f)).copysign(x);
  return V::blendv(y, x, x.isnan());  // exp_u20 clamps its argument: NaN is put back here
}
"""


def rewrite(src_code: str) -> str:
    """`src_code` (an inductor C++ kernel) with its vector tanh calls on ral_fastmath.h's."""
    if not enabled() or _PREFIX not in src_code or not _TANH.search(src_code):
        return src_code
    src_code = _TANH.sub(r"ral_vtanh(\1)", src_code)
    return src_code.replace(_PREFIX, _PREFIX + prelude(), 1)
