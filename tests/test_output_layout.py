"""Capability: a fresh output of a vendor kernel is laid out as PyTorch's meta kernel lays it
out (a pointwise op on transposed inputs gives a transposed result, as on CPU), and every
kernel writes through those strides: values match CPU on both devices, with tensors moved to
the device and with CPU tensors under ral_mode (whose results come back to CPU).

The inputs: every float32 OpInfo sample of each op that a plugin manifest serves, with each
tensor of two or more dimensions re-laid out column-major in its last two dimensions (same
shape and values, dense, not contiguous). A kernel that wrote a permuted output as if it
were contiguous gives wrong numbers here, so the values are compared with CPU's (float32
tolerances of the OpInfo sweep, conformance.TOLERANCES); where the vendor tier served the op, the strides must be
CPU's too.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from sweep_support import DEVICES, need_device

from torch_fl.core.registry import REGISTRY
from torch_fl.device.index import parse_device
from torch_fl.mode import ral_mode
from torch_fl.observe import conformance as C
from torch_fl.observe.coverage import Coverage

MAX_SAMPLES = 6  # per op: the first samples already vary rank, broadcasting and dims


def _base(op: str) -> str:
    """'aten::add_.Tensor' -> 'add'."""
    return op.split("::")[1].split(".")[0].rstrip("_")


def _manifest_names(dev: int) -> set[str]:
    """Base names (add, sum, mm, ...) of every op the device's plugin manifest declares."""
    st = REGISTRY.plugin_of(dev)
    return {_base(op) for op in st.by_op} if st is not None else set()


def _ops():
    names = set().union(*(_manifest_names(r.index) for r in torch.ral.device_records()))
    return [
        op
        for op, _ in C.select(C.load_op_db())
        if op.name in names and not op.variant_test_name and not C._seeded_random(op)  # random: no values to compare
    ]


def _column_major(t):
    """t with the same shape and values, its last two dimensions stored column-major."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.layout != torch.strided:
        return t
    return t.transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_(t.requires_grad)


def _tensors(v):
    return [x for x in torch.utils._pytree.tree_leaves(v) if isinstance(x, torch.Tensor)]


def _close(actual, expected):
    C._compare(actual, expected, torch.float32)  # the OpInfo sweep's float32 tolerances


OPS = _ops()


def _run(op, sample, dev, style):
    """op on the sample's tensors moved to dev ("device"), or on the CPU sample under ral_mode."""
    if style == "mode":
        with ral_mode(dev):
            return op(sample.input, *sample.args, **sample.kwargs)
    moved = sample.transform(lambda t: C._to(t, dev))
    return op(moved.input, *moved.args, **moved.kwargs)


@pytest.mark.parametrize("style", ["device", "mode"])
@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_permuted_inputs_match_cpu_values_and_layout(dev, op, style):
    need_device(dev)
    if op.name not in _manifest_names(parse_device(dev)):
        pytest.skip(f"{dev}'s manifest has no kernel for {op.name}")
    samples = C.samples_of(op, torch.float32, MAX_SAMPLES)
    checked = 0
    for i, sample in enumerate(samples):
        sample = sample.transform(_column_major)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # CPU refuses this sample: test_opinfo checks the error type
        if C._is_random(op, sample):
            continue  # no values to compare (test_opinfo checks shapes and dtypes)
        for _ in range(2):  # the second call takes the cached plans and signatures
            cov = Coverage()
            with cov:
                actual = _run(op, sample, dev, style)
            _close(C._cpu(actual), expected)
            vendor_only = {tier for _, tier in cov.counts} == {"vendor"}
            for a, e in zip(_tensors(actual), _tensors(expected)):
                if style == "device" and vendor_only and e.numel() > 1:
                    assert a.stride() == e.stride(), f"sample {i}: {a.stride()} vs CPU's {e.stride()}"
                if e.dim() >= 2 and e.is_floating_point():
                    # A view and a kernel on the result: they read its strides through the
                    # signature the fast caches keep for it, which must say the same.
                    with ral_mode(dev) if style == "mode" else contextlib.nullcontext():
                        twice = a.mT * 2
                    _close(C._cpu(twice), e.mT * 2)
        checked += 1
    assert checked, f"no sample of {op.name} ran on CPU"
