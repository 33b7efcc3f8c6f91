"""Ops on ral tensors as OpenReg's test_ops.py exercises them, held to CPU's results: an out=
view the op must resize keeps aliasing its base, as CPU's resize_ keeps the storage where the
new size fits; `torch.linalg.matrix_rank(..., out=)` writes its out (PyTorch's composite left it
unwritten for tensors with Python dispatch). On ral:0 and ral:1, with `.to()` and under `ral_mode`."""

import warnings

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

# (base shape, view of the base given as out=, op); the op's result has more elements than the
# view, so CPU resizes the view in place (deprecated, warned, still allowed) and writes its
# storage from the view's offset on.
_CASES = {
    "abs into every third column": ((2, 2, 6), lambda b: b[:, :, ::3], lambda x, out: torch.abs(x, out=out)),
    "neg into an offset slice": ((3, 8), lambda b: b[1:, 2:4], lambda x, out: torch.neg(x, out=out)),
    "add into a flat prefix": ((20,), lambda b: b[2:8], lambda x, out: torch.add(x, 1, out=out)),
}


def _run(case, x, base):
    shape, view, op = _CASES[case]
    out = view(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "An output with one or more elements was resized"
        op(x, out)
    out.mul_(3)  # a write through the resized view must reach the base, as on CPU
    return out


@pytest.mark.parametrize("case", list(_CASES))
@pytest.mark.parametrize("device", DEVICES)
def test_resized_out_view_keeps_aliasing_its_base(device, case):
    torch.manual_seed(0)
    x = torch.randn(2, 2, 3)
    base = torch.randn(_CASES[case][0])
    want_base = base.clone()
    want_out = _run(case, x, want_base)

    dev_base = base.to(device)
    got_out = _run(case, x.to(device), dev_base)
    assert got_out.shape == want_out.shape and got_out.stride() == want_out.stride()
    assert got_out.storage_offset() == want_out.storage_offset()
    torch.testing.assert_close(got_out.cpu(), want_out, rtol=0, atol=0)
    torch.testing.assert_close(dev_base.cpu(), want_base, rtol=0, atol=0)

    mode_base = base.clone()
    with torch_fl.ral_mode(device):
        mode_out = _run(case, x, mode_base)
    torch.testing.assert_close(mode_out.cpu(), want_out, rtol=0, atol=0)
    torch.testing.assert_close(mode_base.cpu(), want_base, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_names_what_ral_lacks_and_the_tensor_keeps_working(device):
    """ral carries no quantized dtypes (nor does this torch keep them for long: it warns they
    are deprecated). Quantizing a ral tensor says so, with PyTorch's exception type for a
    backend that lacks an op, rather than a copy error; the tensor stays usable."""
    x = torch.randn(3, 4)
    xd = x.to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's deprecation of quantized dtypes
        with pytest.raises(NotImplementedError, match=r"quantize_per_tensor: ral devices do not carry quantized"):
            torch.quantize_per_tensor(xd, 0.1, 10, torch.qint8)
    torch.testing.assert_close((xd * 2 + 1).cpu(), x * 2 + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_under_ral_mode_stays_cpu_state_as_without_the_mode(device):
    """Under ral_mode a quantized result is CPU state, as without the mode, even when its
    operands (per-channel scales) were computed on the device; dequantize gives CPU's values."""
    torch.manual_seed(0)
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        want = torch.quantize_per_tensor(x, 0.1, 10, torch.qint8)
        want_c = torch.quantize_per_channel(x, torch.ones(3) * 0.1, torch.zeros(3, dtype=torch.long), 0, torch.quint8)
        with torch_fl.ral_mode(device):
            got = torch.quantize_per_tensor(x, 0.1, 10, torch.qint8)
            got_c = torch.quantize_per_channel(
                x, torch.ones(3) * 0.1, torch.zeros(3, dtype=torch.long), 0, torch.quint8
            )
            back = got.dequantize()
            y = (x * 2).sum()
    assert got.device.type == "cpu" and got.dtype == torch.qint8 and got_c.dtype == torch.quint8
    torch.testing.assert_close(back, want.dequantize(), rtol=0, atol=0)
    torch.testing.assert_close(got_c.dequantize(), want_c.dequantize(), rtol=0, atol=0)
    assert y.device == torch.device(device)
    torch.testing.assert_close(y.cpu(), (x * 2).sum())


def _matrix_rank_outs(dev):
    """matrix_rank into out tensors of several shapes and dtypes, with its tolerance forms."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 5, generator=g)
    x[:, 4] = x[:, 3]  # rank 4
    x = x.to(dev)
    sym = x @ x.mT
    calls = [
        (lambda o: torch.linalg.matrix_rank(x, out=o), (0,), torch.int64),
        (lambda o: torch.linalg.matrix_rank(x[0], out=o), (), torch.int64),
        (lambda o: torch.linalg.matrix_rank(x, out=o), (2,), torch.int64),  # resized, with a warning
        (lambda o: torch.linalg.matrix_rank(x, out=o), (3,), torch.float64),
        (lambda o: torch.linalg.matrix_rank(x, out=o), (3,), torch.int32),
        (lambda o: torch.linalg.matrix_rank(x, atol=0.5, rtol=0.01, out=o), (0,), torch.int64),
        (lambda o: torch.linalg.matrix_rank(x, atol=torch.tensor(0.5, device=dev), out=o), (0,), torch.int64),
        (lambda o: torch.linalg.matrix_rank(sym, hermitian=True, out=o), (0,), torch.int64),
        (lambda o: torch.linalg.matrix_rank(x, 0.5, out=o), (0,), torch.int64),
    ]
    return calls


def _fill_outs(calls, dev):
    got = []
    for call, shape, dtype in calls:
        o = torch.full(shape, 7, dtype=dtype, device=dev)  # a stale value a skipped write would leave
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = call(o)
        assert r is o
        got.append((o.cpu(), [str(x.message)[:60] for x in w if "resized" in str(x.message)]))
    return got


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_matrix_rank_writes_its_out(device, style):
    expected = _fill_outs(_matrix_rank_outs("cpu"), "cpu")
    assert expected[2][1] and not expected[0][1]  # CPU warns when it resizes a non-empty out
    if style == "to":
        got = _fill_outs(_matrix_rank_outs(device), device)
    else:
        with torch_fl.ral_mode(device):
            got = _fill_outs(_matrix_rank_outs("cpu"), "cpu")
    for (g, gw), (e, ew) in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape and torch.equal(g, e)
        assert gw == ew


@pytest.mark.parametrize("device", DEVICES)
def test_matrix_rank_out_refusals_match_cpu(device):
    x = torch.randn(4, 4)
    with pytest.raises(RuntimeError, match="safely castable from Long dtype, but got result with dtype Bool"):
        torch.linalg.matrix_rank(x, out=torch.empty(0, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="safely castable from Long dtype, but got result with dtype Bool"):
        torch.linalg.matrix_rank(x.to(device), out=torch.empty(0, dtype=torch.bool, device=device))
    with pytest.raises(RuntimeError, match=f"same device, but got result on cpu and input on {device}"):
        torch.linalg.matrix_rank(x.to(device), out=torch.empty(0, dtype=torch.int64))
    o = torch.empty(0, dtype=torch.int64, device=device)
    torch.linalg.matrix_rank(x.to(device), out=o)  # the device keeps working after the refusals
    assert o.item() == torch.linalg.matrix_rank(x).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", [torch.ceil, torch.exp, torch.add, torch.sub], ids=lambda f: f.__name__)
def test_out_resize_warns_at_the_callers_line(device, op):
    """An out= that must grow warns as CPU does, at the caller's line (PyTorch's
    test_binary_ufuncs.py::test_out_resize_warning). The jit tier's meta probe of the call,
    which then declines it, warned too, from torch/_prims_common/wrappers.py: under the
    default filter a second warning the user saw. The result is CPU's."""
    a, b = torch.tensor((1.0, 2.0, 3.0)), torch.tensor((4.0, 5.0, 6.0))
    inputs = (a,) if op in (torch.ceil, torch.exp) else (a, b)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = torch.empty(2, device=device)
        op(*(t.to(device) for t in inputs), out=out)
    resize = [w for w in caught if "was resized" in str(w.message)]
    assert resize, "no resize warning"
    assert all(w.filename == __file__ for w in resize), [(w.filename, w.lineno) for w in resize]
    torch.testing.assert_close(out.cpu(), op(*inputs))
