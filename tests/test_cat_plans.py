"""`cat`'s output spec in the vendor tier (tiers/output_specs.py `_cat`): computed without
PyTorch's meta kernel in the common case (one dtype and rank, sizes agreeing off `dim`), as
decoding plans a new KV-cache length every token, and the meta kernel's answer, error or
result, in every other case. Checked against the meta kernel on drawn calls, and against
CPU's values on both devices in both styles."""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import plugin_device
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_fl
from torch_fl.tiers import output_specs
from torch_fl.tiers.output_specs import OUTPUT_SPECS, to_meta

DEVICES = ["host", "opencl"]
DTYPES = [torch.float32, torch.int64, torch.bool, torch.bfloat16]


def _meta_answer(tensors, dim):
    """(shape, dtype) or (exception type, message) from PyTorch's meta kernel."""
    try:
        out = torch.ops.aten.cat.default(to_meta(list(tensors)), dim)
    except Exception as exc:  # noqa: BLE001 (the comparison is of whatever it raises)
        return type(exc), str(exc)
    return tuple(out.shape), out.dtype


def _spec_answer(tensors, dim):
    try:
        out = OUTPUT_SPECS["aten::cat"]([tensors, dim])
    except Exception as exc:  # noqa: BLE001
        return type(exc), str(exc)
    return tuple(out.shape), out.dtype


@st.composite
def cat_calls(draw):
    """A list of 1-4 tensors of rank 1-4 that mostly agree off one dim, sometimes not: other
    dtypes (promotion), other ranks (legacy empty tensors), other sizes, an empty list."""
    rank = draw(st.integers(1, 4))
    dim = draw(st.integers(-rank - 1, rank))  # one past either end: the meta kernel's error
    base = draw(st.lists(st.integers(0, 3), min_size=rank, max_size=rank))
    n = draw(st.integers(0, 4))
    dtype = draw(st.sampled_from(DTYPES))
    items = []
    for _ in range(n):
        shape = list(base)
        shape[dim % rank] = draw(st.integers(0, 3))
        kind = draw(st.sampled_from(["same"] * 6 + ["dtype", "size", "rank", "legacy"]))
        t_dtype = dtype
        if kind == "dtype":
            t_dtype = draw(st.sampled_from(DTYPES))
        elif kind == "size":
            k = draw(st.integers(0, rank - 1))
            shape[k] += 1
        elif kind == "rank":
            shape = shape + [1]
        elif kind == "legacy":
            shape = [0]
        items.append((tuple(shape), t_dtype))
    return items, dim


@pytest.mark.parametrize("which", DEVICES)
@settings(max_examples=150, deadline=None)
@given(call=cat_calls())
def test_spec_answers_as_the_meta_kernel(which, call):
    dev = plugin_device(which)
    items, dim = call
    tensors = [torch.zeros(shape, dtype=dt, device=dev) for shape, dt in items]
    assert _spec_answer(tensors, dim) == _meta_answer(tensors, dim)


def test_common_case_skips_the_meta_kernel(monkeypatch):
    """The decoding call (a KV cache and one new position) is answered without to_meta, the
    meta kernel's stand-ins; a call that promotes still asks the meta kernel."""
    dev = plugin_device("host")
    past, new = torch.zeros(1, 12, 7, 64, device=dev), torch.zeros(1, 12, 1, 64, device=dev)

    def refuse(v):
        raise AssertionError("the meta kernel was asked")

    monkeypatch.setattr(output_specs, "to_meta", refuse)
    out = OUTPUT_SPECS["aten::cat"]([[past, new], -2])
    assert (tuple(out.shape), out.dtype) == ((1, 12, 8, 64), torch.float32)
    with pytest.raises(AssertionError, match="meta kernel was asked"):
        OUTPUT_SPECS["aten::cat"]([[past, new.double()], -2])


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", DEVICES)
def test_growing_cache_matches_cpu(which, style):
    """A KV cache grown one position at a time (a new plan every step), and calls that take
    the meta kernel's path (promotion, a legacy empty tensor), equal CPU's values exactly."""
    dev = plugin_device(which)
    torch.manual_seed(0)
    steps = [torch.randn(1, 2, 1, 4) for _ in range(6)]
    cpu_cache = torch.randn(1, 2, 3, 4)
    expected = [cpu_cache]
    for s in steps:
        expected.append(torch.cat([expected[-1], s], dim=-2))
    extra = [
        torch.cat([cpu_cache, steps[0].double()], dim=2),
        torch.cat([torch.empty(0), cpu_cache.flatten()]),
        torch.cat([cpu_cache.to(torch.int32), steps[0].to(torch.int64)], dim=-2),
    ]
    ctx = torch_fl.ral_mode(dev) if style == "mode" else contextlib.nullcontext()
    move = (lambda t: t) if style == "mode" else (lambda t: t.to(dev))
    with ctx:
        cache = move(cpu_cache)
        got = [cache]
        for s in steps:
            got.append(torch.cat([got[-1], move(s)], dim=-2))
        got_extra = [
            torch.cat([cache, move(steps[0]).double()], dim=2),
            torch.cat([move(torch.empty(0)), cache.flatten()]),
            torch.cat([cache.to(torch.int32), move(steps[0]).to(torch.int64)], dim=-2),
        ]
    for g, e in zip(got[1:] + got_extra, expected[1:] + extra):  # got[0]: the mode's CPU cache
        assert g.device.type == "ral"
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)
