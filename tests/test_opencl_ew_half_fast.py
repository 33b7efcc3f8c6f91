"""Capability: element-wise ops on contiguous float16 / bfloat16 tensors run the OpenCL plugin's
16-lane chunked kernel (`ew_h16c` in plugins/opencl/kernels/ew.cl, queued on a CPU runtime)
with the same bits as the per-element kernel (`ew_anyc`) and CPU's values.

Each op runs queued (inline execution off) on a contiguous operand set, which takes `ew_h16c`,
and on the same values through stride-2 views, which take `ew_anyc`: the two results must be
equal bit for bit (both widen to float, compute the same formula, round once). Both must match
PyTorch CPU running the same dtype within torch's default tolerances for the dtype (the
kernels' float math can differ from CPU's by a float ulp, which can move a 16-bit result one
ulp). NaN positions must agree; their payloads may differ. The operands hold NaN, infinities, signed zeros, values that round up to infinity and
(float16) subnormals, start at a storage offset and end in a partial 16-lane block. A child
process with `TORCH_FL_OPENCL_PROFILE` checks that the fast kernel is the one that ran.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import opencl_kernels_run  # noqa: E402
from test_opencl_latency import _SO, DEV  # noqa: E402

HALF = [torch.float16, torch.bfloat16]
# ops whose CPU float16 kernel rounds intermediate steps (measured: up to 3 ulps from the
# float32 result rounded once, which both ral kernels return)
HALF_STEP_OPS = {"sigmoid_backward", "tanh_backward"}
N = 4099  # 256 full 16-lane blocks and a tail of 3

aten = torch.ops.aten
# name -> (fn over (a, b, c), inputs the op takes: a only for unary ops)
OPS = {
    "add": (lambda a, b, c: torch.add(a, b, alpha=0.5), 2),
    "sub": (lambda a, b, c: torch.sub(a, b), 2),
    "mul": (lambda a, b, c: a * b, 2),
    "div": (lambda a, b, c: a / b, 2),
    "add_scalar": (lambda a, b, c: a + 1.25, 1),
    "mul_scalar": (lambda a, b, c: a * 3.0, 1),
    "div_scalar": (lambda a, b, c: a / 3.0, 1),
    "rsub_scalar": (lambda a, b, c: torch.rsub(a, 2.0), 1),
    "neg": (lambda a, b, c: -a, 1),
    "relu": (lambda a, b, c: torch.relu(a), 1),
    "threshold_backward": (lambda a, b, c: aten.threshold_backward(a, b, 0.0), 2),
    "addcdiv": (lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), 3),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=-2.0), 3),
    "sqrt": (lambda a, b, c: torch.sqrt(a), 1),
    "exp": (lambda a, b, c: torch.exp(a), 1),
    "sigmoid": (lambda a, b, c: torch.sigmoid(a), 1),
    "tanh": (lambda a, b, c: torch.tanh(a), 1),
    "silu": (lambda a, b, c: F.silu(a), 1),
    "gelu": (lambda a, b, c: F.gelu(a), 1),
    "gelu_tanh": (lambda a, b, c: F.gelu(a, approximate="tanh"), 1),
    "tanh_backward": (lambda a, b, c: aten.tanh_backward(a, b), 2),
    "sigmoid_backward": (lambda a, b, c: aten.sigmoid_backward(a, b), 2),
    "gelu_backward": (lambda a, b, c: aten.gelu_backward(a, b), 2),
    # a 0-d float32 operand broadcast over the 16-bit one (stride 0, another dtype)
    "add_0d_float32": (lambda a, b, c: a + torch.tensor(0.3, device=a.device), 1),
}


def _operand(dtype, seed):
    """N values of `dtype` at storage offset 3: normal draws with the special values spread in."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N + 3, generator=g) * 3
    big = torch.finfo(dtype).max
    specials = [math.nan, math.inf, -math.inf, -0.0, 0.0, big, -big, big * 0.999, 1e-6, -1e-7, 0.5, 65519.0]
    for i, v in enumerate(specials):
        x[3 + 37 * i + 5] = v
    return x.to(dtype)[3:]


def _strided(t):
    """The same values through a stride-2 view (the per-element kernel's operand)."""
    s = torch.empty(2 * t.numel(), dtype=t.dtype, device=t.device)[::2]
    s.copy_(t)
    return s


@pytest.fixture
def queued():
    """Inline execution off, so each op is an OpenCL command (restored afterwards)."""
    before = _SO.ral_opencl_inline(0)
    torch.ral.synchronize(DEV)
    yield
    torch.ral.synchronize(DEV)
    if before == 1:
        _SO.ral_opencl_inline(1)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(OPS))
def test_fast_half_kernel_equals_per_element_kernel_and_cpu(name, dtype, queued):
    fn, n_in = OPS[name]
    cpu = [_operand(dtype, seed) for seed in range(3)]
    if name == "sqrt":
        cpu[0] = cpu[0].abs()
    dev = [t.to(DEV) for t in cpu]
    assert dev[0].storage_offset() == 0 or dev[0].is_contiguous()
    fast = fn(*dev)
    slow = fn(*[_strided(t) if i < n_in else t for i, t in enumerate(dev)])
    want = fn(*cpu)
    fast, slow = fast.cpu(), slow.cpu()
    assert fast.dtype == want.dtype == dtype and fast.is_contiguous()
    # bit for bit against the per-element kernel; NaN where it has NaN (the payloads differ:
    # vstore_half16 stores CPU's 0x7E00, PoCL's scalar vstore_half 0x7FFF)
    nan = fast.isnan()
    assert torch.equal(nan, slow.isnan())
    differ = fast.view(torch.int16)[~nan] != slow.view(torch.int16)[~nan]
    assert not differ.any(), (fast[~nan][differ][:5].tolist(), slow[~nan][differ][:5].tolist())
    keep = torch.ones_like(nan)
    if name == "gelu":
        # CPU's erf gelu gives NaN at +inf (CUDA's and ral's: inf), and its bfloat16 kernel
        # overflows to inf at the dtype's max, where its float32 kernel and ral return x
        keep = cpu[0].float().abs() < torch.finfo(dtype).max / 2
    tol = {}
    if name in HALF_STEP_OPS and dtype == torch.float16:
        # CPU's float16 kernel rounds each of its three steps to float16; ral rounds once
        tol = {"rtol": 4 * torch.finfo(dtype).eps, "atol": 1e-5}
    torch.testing.assert_close(fast[keep], want[keep], equal_nan=True, **tol)


_CHILD = """
import torch, torch_fl
dev = {dev!r}
for dt in (torch.float16, torch.bfloat16):
    x = torch.randn(100000).to(dt).to(dev)
    y = torch.relu(x) + x
    torch.ral.synchronize(dev)
print("CHILD-DONE")
"""


def test_contiguous_half_ops_run_the_fast_kernel(tmp_path):
    """TORCH_FL_OPENCL_PROFILE names every kernel that ran: relu and add on contiguous float16
    and bfloat16 ran ew_h16c, never the per-element ew_anyc."""
    names = opencl_kernels_run(_CHILD.format(dev=DEV), tmp_path)
    assert names.count("ew_h16c") >= 4, names[:2000]
    assert "ew_anyc" not in names, names[:2000]
