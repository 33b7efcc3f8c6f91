"""Conformance against PyTorch's OpInfo database: run each sample on a ral device, compare
with CPU, and record which tier served it. Used by tests/test_opinfo.py and
`ralctl coverage --opinfo`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .op_coverage import Coverage
from .tensor import RalTensor

# Tolerances per dtype (rtol, atol). Half types accumulate in float32 on plugins, like
# PyTorch's CPU kernels, but may round at different points.
TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1.3e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-5, 1e-5),
}
DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "bool": torch.bool, "uint8": torch.uint8,
}


@dataclass
class CaseResult:
    """Outcome of one (OpInfo, dtype) pair over all its samples."""

    op: str
    dtype: str
    style: str
    passed: bool
    n_samples: int
    tiers: dict = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.op}:{self.dtype}"


def opinfo_name(op) -> str:
    """`name` or `name.variant` of an OpInfo entry."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def load_op_db():
    """PyTorch's OpInfo list (imported lazily: it takes seconds)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def _to(v, dev):
    if isinstance(v, torch.Tensor):
        return v.detach().to(dev).requires_grad_(v.requires_grad) if v.is_floating_point() or v.is_complex() else v.to(dev)
    if isinstance(v, (list, tuple)):
        return type(v)(_to(x, dev) for x in v)
    if isinstance(v, dict):
        return {k: _to(x, dev) for k, x in v.items()}
    return v


def _cpu(v):
    if isinstance(v, RalTensor):
        return v.cpu()
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (list, tuple)):
        return type(v)(_cpu(x) for x in v)
    return v


def _compare(actual, expected, dtype, exact_shape_only=False):
    if exact_shape_only:
        exp_t = [x for x in torch.utils._pytree.tree_leaves(expected) if isinstance(x, torch.Tensor)]
        act_t = [x for x in torch.utils._pytree.tree_leaves(actual) if isinstance(x, torch.Tensor)]
        assert [(t.shape, t.dtype) for t in act_t] == [(t.shape, t.dtype) for t in exp_t], "random op: shape/dtype differ"
        return
    rtol, atol = TOLERANCES.get(dtype, (0, 0))
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_device=False,
                               check_stride=False, check_layout=False)


# Ops whose values are unspecified (uninitialized memory): only shapes and dtypes compare.
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided", "empty_permuted"}


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _is_random(op, sample) -> bool:
    torch.manual_seed(0)
    a = _call(op, sample)
    torch.manual_seed(0)
    b = _call(op, sample)
    try:
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
        return False
    except AssertionError:
        return True


def run_case(op, dtype: torch.dtype, dev: str, style: str = "device", max_samples: int | None = None) -> CaseResult:
    """Run every sample of one OpInfo entry in one dtype on `dev` ("device") or under
    ral_mode ("mode"); passed iff every sample matches CPU (or raises the same error type)."""
    from .mode import ral_mode

    name = opinfo_name(op)
    dname = str(dtype).replace("torch.", "")
    t0 = time.perf_counter()
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    if max_samples is not None:
        samples = samples[:max_samples]
    cov = Coverage()
    error = ""
    for i, sample in enumerate(samples):
        try:
            torch.manual_seed(0)
            expected = _call(op, sample)
            expected_exc = None
        except Exception as exc:  # the reference raises: the device must raise the same type
            expected, expected_exc = None, exc
        random = expected_exc is None and (op.name in UNINITIALIZED or _is_random(op, sample))
        try:
            torch.manual_seed(0)
            with cov:
                if style == "mode":
                    with ral_mode(dev):
                        actual = _cpu(_call(op, sample))
                else:
                    actual = _cpu(_call(op, sample.transform(lambda t: _to(t, dev)) if hasattr(sample, "transform") else sample))
            if expected_exc is not None:
                error = f"sample {i}: CPU raised {type(expected_exc).__name__} but ral did not"
                break
            _compare(actual, expected, dtype, exact_shape_only=random)
        except Exception as exc:
            if expected_exc is not None and isinstance(exc, type(expected_exc)):
                continue
            error = f"sample {i}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
            break
    tiers: dict = {}
    for (_, tier), n in cov.counts.items():
        tiers[tier] = tiers.get(tier, 0) + n
    return CaseResult(name, dname, style, not error, len(samples), tiers, error, time.perf_counter() - t0)


def select(op_db, names=None, dtypes=("float32",)):
    """(op, dtype) pairs of op_db whose CPU support includes the dtype."""
    out = []
    for op in op_db:
        if names is not None and opinfo_name(op) not in names:
            continue
        supported = op.supported_dtypes("cpu")
        for dname in dtypes:
            dt = DTYPES[dname]
            if dt in supported:
                out.append((op, dt))
    return out
