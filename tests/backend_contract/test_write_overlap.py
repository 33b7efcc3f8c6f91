"""A write whose output overlaps an input raises as on CPU and CUDA (dispatch/overlap.py,
ATen's MemoryOverlap rules and messages): partial overlap of an element-wise op's output with
an input (in place and out=), an expanded (self-overlapping) output, copy_ between
overlapping views, cat into one of its inputs. Full aliasing (`x.mul_(x)`) and disjoint
interleaved views stay allowed and give CPU's values. Overlaps ATen cannot decide (operands
with gaps, `x.view(2, 4)[:, 1:].add_(x.view(2, 4)[:, :-1])`) run there, with values that
depend on the kernel's order, and run here too. ral:0 and ral:1, `.to` and ral_mode.
Before the check these ran silently and ral:0 and ral:1 gave different numbers."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

REFUSED = {
    "mul_ partial": lambda x: x[1:].mul_(x[:-1]),
    "add out= partial": lambda x: torch.add(x[:-1], 1, out=x[1:]),
    "same bytes other strides": lambda x: x.view(2, 4).add_(x.view(4, 2).t()),
    "expanded output": lambda x: x[:1].expand(3).add_(1),
    "copy_ partial": lambda x: x[1:].copy_(x[:-1]),
    "cat into an input": lambda x: torch.cat([x[:2], x[2:4]], out=x[1:5]),
    "cat onto an input": lambda x: torch.cat([x[:2], x[4:6]], out=x[:4]),
    # random fills of an expanded tensor (PyTorch's test_torch.py test_bernoulli_mem_overlap):
    # they ran on ral, drawing several numbers into one location
    "bernoulli_ expanded": lambda x: x[:1].expand(4).bernoulli_(0.5),
    "bernoulli_ of p expanded": lambda x: x[:1].expand(4).bernoulli_(torch.full((4,), 0.5, device=x.device)),
    "uniform_ expanded": lambda x: x[:1].expand(4).uniform_(),
    "normal_ expanded": lambda x: x[:1].expand(4).normal_(),
    "random_ expanded": lambda x: x[:1].expand(4).random_(0, 5),
    "masked_fill_ partial": lambda x: (lambda m: m[1:].masked_fill_(m[:-1], False))(x > 4),
}
ALLOWED = {
    "full alias": lambda x: x.mul_(x),
    "disjoint interleaved": lambda x: x[::2].add_(x[1::2]),
    "disjoint halves": lambda x: x[4:].sub_(x[:4]),
    "copy_ disjoint": lambda x: x[4:].copy_(x[:4]),
    "out= disjoint": lambda x: torch.mul(x[:4], 2, out=x[4:]),
    "cat disjoint": lambda x: torch.cat([x[:2], x[2:4]], out=x[4:]),
}


def _style(style, device):
    return torch_fl.ral_mode(device) if style == "mode" else contextlib.nullcontext()


def _message(fn):
    x = torch.arange(1.0, 9.0)
    with pytest.raises(RuntimeError) as info:
        fn(x)
    return str(info.value)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_overlapping_writes_raise_cpu_error_and_leave_the_tensor(case, device, style):
    want = _message(REFUSED[case])  # CPU raises too
    x = torch.arange(1.0, 9.0)
    if style == "to":
        x = x.to(device)
    with _style(style, device), pytest.raises(RuntimeError) as info:
        REFUSED[case](x)
    assert str(info.value) == want
    assert x.cpu().tolist() == [float(i) for i in range(1, 9)]  # nothing written
    assert (x + 1).cpu().tolist() == [float(i) for i in range(2, 10)]  # and usable


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", sorted(ALLOWED))
def test_allowed_aliasing_writes_give_cpu_values(case, device, style):
    want = torch.arange(1.0, 9.0)
    ALLOWED[case](want)
    x = torch.arange(1.0, 9.0)
    if style == "to":
        x = x.to(device)
    with _style(style, device):
        ALLOWED[case](x)
    torch.testing.assert_close(x.cpu(), want, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_internal_overlap_check_reads_the_strides(device):
    # an expanded input is fine (only outputs must not repeat locations); a non-dense output
    # with no zero stride cannot be decided and runs, as in ATen
    x = torch.zeros(6, device=device)
    x[::2].add_(torch.ones(1, device=device).expand(3))
    assert x.cpu().tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    y = torch.zeros(4, 4, device=device)
    y[:, ::2].add_(1)
    assert y.cpu().sum().item() == 8.0


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_inplace_op_cannot_grow_self_to_the_broadcast_shape(device, style):
    # x[5,1].add_(y[5]) would need a [5,5] self: CPU raises, ral wrote a [5,1] result silently
    x0, y0 = torch.arange(5.0).view(5, 1), torch.arange(5.0)
    with pytest.raises(RuntimeError) as cpu:
        x0.clone().add_(y0)
    x, y = (x0.clone().to(device), y0.to(device)) if style == "to" else (x0.clone(), y0)
    with _style(style, device), pytest.raises(RuntimeError) as ral:
        x.add_(y)
    assert str(ral.value) == str(cpu.value)
    torch.testing.assert_close(x.cpu(), x0, rtol=0, atol=0)  # nothing written
    x.add_(y0.view(5, 1).to(x.device))  # a broadcast that fits still runs
    torch.testing.assert_close(x.cpu(), x0 * 2, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_as_strided_in_place_past_the_storage_raises_as_cpu(device):
    x = torch.arange(10.0, device=device)
    with pytest.raises(RuntimeError, match="out of bounds for storage of size 40"):
        x.as_strided_((2, 2), (1, 2), 10)
    assert tuple(x.shape) == (10,) and x.storage_offset() == 0  # unchanged
    assert x.as_strided_((2, 2), (1, 2), 2).cpu().tolist() == [[2.0, 4.0], [3.0, 5.0]]


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("value", ["scalar", "tensor"])
def test_masked_fill_of_an_expanded_tensor_warns_and_writes_as_cpu(device, style, value):
    """CPU deprecates masked_fill_ into an expanded tensor with a warning and writes it; ral
    refused the Scalar form ("more than one element of the written-to tensor") and ran the
    Tensor form without the warning (PyTorch's test_torch.py test_masked_fill_mem_overlap)."""

    def run(base):
        mask = torch.tensor([True, False, True, False], device=base.device)
        fill = 0.5 if value == "scalar" else torch.tensor(0.5, device=base.device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            base[:1].expand(4).masked_fill_(mask, fill)
        return [str(w.message) for w in caught if "expanded tensors" in str(w.message)]

    want_base = torch.arange(1.0, 9.0)
    want = run(want_base)
    x = torch.arange(1.0, 9.0)
    if style == "to":
        x = x.to(device)
    with _style(style, device):
        got = run(x)
    assert len(got) == 1 and got[0].split(" (Triggered")[0] == want[0].split(" (Triggered")[0]
    torch.testing.assert_close(x.cpu(), want_base, rtol=0, atol=0)


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shapes", [((2, 4, 3), (3,)), ((1, 2, 3, 4), (4,)), ((2, 1, 3), (3,)), ((5, 3), (2, 3, 4)), ((2,), (2, 0, 2, 1))]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_matmul_out_of_batched_and_vector_operands_is_written(shapes, dtype, device, style):
    # ATen's matmul(ND, 1D, out=o) writes through o.reshape(-1), then copies that flat view
    # back into o unless `is_alias_of` says they share storage, which two ral views never do:
    # the no-op copy between differently shaped views of one buffer was refused as a partial
    # overlap (PyTorch's test_linalg.py test_broadcast_batched_matmul).
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(*shapes[0], generator=g, dtype=dtype), torch.randn(*shapes[1], generator=g, dtype=dtype)
    want = torch.matmul(a, b)
    if style == "to":
        a, b = a.to(device), b.to(device)
    with _style(style, device):
        out = torch.zeros_like(torch.matmul(a, b))
        torch.matmul(a, b, out=out)
    torch.testing.assert_close(out.cpu(), want, rtol=1e-5, atol=1e-5)
