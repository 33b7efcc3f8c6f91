"""Capability: lazy conjugate and negative views (`x.conj()`, `x.conj().imag`, `x._neg_view()`).

They alias their base as on CPU: writes through them land in the base's memory, conjugated or
negated, a later change of the base shows in them, and their bits (`is_conj()`, `is_neg()`)
are CPU's. Every program runs on CPU, on device tensors (`.to`) and under `ral_mode` with CPU
tensors, on both devices; results, mutated inputs and bits are compared with CPU's.
"""

import copy
import io

import pytest
import torch
from sweep_support import DEVICES, need_device

import torch_fl

C64 = torch.complex64
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _stale_read(x, y):
    v = x.conj()
    x.add_(y)
    return v, x


def _imag_of_conj_write(x, y):
    im = x.conj().imag
    im.copy_(y.real)
    return im, x


def _float_neg_view(x, y):
    f = x.real.clone()
    n = f._neg_view()
    n.add_(1.0)
    return f, n


def _setitem(x, y):
    x.conj()[1] = y[0]
    x.conj()[[0, 3]] = y[1:3]
    return (x,)


def _chain(x, y):
    v = x.conj().t()[1:].unsqueeze(0).expand(2, -1, -1)
    return v, v.reshape(2, -1), v[0].resolve_conj()


def _set_to_views(x, y):
    # set_ takes the source's memory and geometry but not its bits (CPU: t.is_conj() False)
    t, u = torch.empty(0, dtype=x.dtype, device=x.device), torch.empty(0, dtype=y.dtype, device=y.device)
    t.set_(x.conj())
    u.set_(y._neg_view()[1:])
    t.mul_(2)  # writes x's memory: x doubles
    return t, u, x


# name -> program(x, y) of two complex64 [4, 3] tensors, returning the tensors to compare
PROGRAMS = {
    "copy_into_conj": lambda x, y: (x.conj().copy_(y), x),
    "copy_into_neg": lambda x, y: (x._neg_view().copy_(y), x),
    "copy_into_conj_neg": lambda x, y: (x.conj()._neg_view().copy_(y), x),
    "copy_conj_into_conj": lambda x, y: (x.conj().copy_(y.conj()), x),
    "copy_conj_into_plain": lambda x, y: (x.copy_(y.conj()), x),
    "copy_neg_into_conj": lambda x, y: (x.conj().copy_(y._neg_view()), x),
    "copy_own_conj": lambda x, y: (x.copy_(x.conj()),),
    "copy_into_transposed_conj": lambda x, y: (x.conj().t().copy_(y.t()), x),
    "stale_read": _stale_read,
    "imag_of_conj": lambda x, y: (x.conj().imag, x.conj().real, x.conj().imag.clone()),
    "imag_of_conj_write": _imag_of_conj_write,
    "float_neg_view": _float_neg_view,
    "mul_through_conj": lambda x, y: (x.conj().mul_(y), x),
    "add_through_neg": lambda x, y: (x._neg_view().add_(1 + 2j), x),
    "zero_through_conj_slice": lambda x, y: (x.conj()[1:3].zero_(), x),
    "conj_physical_through_conj": lambda x, y: (x.conj().conj_physical_(), x),
    "neg_through_neg": lambda x, y: (x._neg_view().neg_(), x),
    "setitem_through_conj": _setitem,
    "views_keep_bits": _chain,
    "set_to_conj_and_neg_views": _set_to_views,
    "mm": lambda x, y: (x.conj() @ y.t(), x.mH @ y, x._neg_view() @ y.mT, torch.mm(x.t(), y.conj())),
    "addmm_bmm": lambda x, y: (
        torch.addmm(x[:3, :3].conj(), x.conj().t(), y),
        torch.bmm(x.conj().unsqueeze(0), y.mH.unsqueeze(0)),
        torch.baddbmm(y[:3].mT.conj().unsqueeze(0), x.mT.unsqueeze(0), y.conj().unsqueeze(0)),
    ),
    # CPU's vdot of a conjugate view returns its result as a conjugate view (its kernel
    # conjugates lazily); ral's is resolved. Same values: only they are compared.
    "dot_vdot": lambda x, y: tuple(
        r.resolve_conj()
        for r in (torch.dot(x[0].conj(), y[0]), torch.vdot(x[1], y[1].conj()), torch.vdot(x[2]._neg_view(), y[2]))
    ),
    "addmm_into_conj": lambda x, y: (x[:3].conj().addmm_(x.conj()[:3], y[:3].t()), x),
    "reads": lambda x, y: ((x.conj() * y).sum(), x.conj().abs(), torch.cat([x.conj(), y._neg_view()]), x.conj() + y),
    "clone_and_resolve": lambda x, y: (
        x.conj().clone(),
        x.conj().resolve_conj(),
        x.conj()._neg_view().resolve_conj(),
        x._neg_view().resolve_conj(),
        x.conj().t().contiguous(),
        x.conj().to(torch.complex128),
    ),
}


def _bits(t):
    return t.is_conj(), t.is_neg()


def _compare(got, want, name):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.device.type != "cpu" or isinstance(g, torch.Tensor)
        assert _bits(g) == _bits(w), f"{name} output {i}: bits {_bits(g)} where CPU has {_bits(w)}"
        torch.testing.assert_close(g.cpu().resolve_conj().resolve_neg(), w.resolve_conj().resolve_neg(), **TOL)


def _inputs():
    g = torch.Generator().manual_seed(7)
    return torch.randn(4, 3, dtype=C64, generator=g), torch.randn(4, 3, dtype=C64, generator=g)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_matches_cpu(name, style, device):
    need_device(device)
    program = PROGRAMS[name]
    x, y = _inputs()
    want = program(x.clone(), y.clone())
    if style == "to":
        got = program(x.to(device), y.to(device))
    else:
        with torch_fl.ral_mode(device):
            got = program(x.clone(), y.clone())
    _compare(got, want, name)


@pytest.mark.parametrize("device", DEVICES)
def test_device_results_under_the_mode_take_conjugate_writes(device):
    # A device tensor made under ral_mode, then written through its conjugate view.
    need_device(device)
    x, y = _inputs()
    want = x * 2
    want.conj().copy_(y)
    want.conj()[0].mul_(3)
    with torch_fl.ral_mode(device):
        got = x * 2
        got.conj().copy_(y)
        got.conj()[0].mul_(3)
        torch.testing.assert_close(got.conj().cpu(), want.conj(), **TOL)
    torch.testing.assert_close(got.cpu(), want, **TOL)


@pytest.mark.parametrize("device", DEVICES)
def test_view_checks_refuse_as_cpu_does(device):
    need_device(device)
    x = _inputs()[0].to(device)
    with pytest.raises(RuntimeError, match="view_as_real doesn't work on unresolved conjugated tensors"):
        torch.view_as_real(x.conj())
    with pytest.raises(RuntimeError, match="not supported for conjugate view tensors"):
        x.conj().view(torch.float32)
    with pytest.raises(RuntimeError, match="conjugate bit set"):
        x.conj().numpy()
    with pytest.raises(RuntimeError, match="negative bit set"):
        x.imag._neg_view().numpy()
    # the tensor and its view keep working
    torch.testing.assert_close(
        torch.view_as_real(x.conj().resolve_conj()).cpu(), torch.view_as_real(x.cpu().conj().resolve_conj())
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_gradients_through_conjugate_views_match_cpu(style, device):
    # Under the mode the gradients reaching the uploads are conjugate views themselves
    # (hfft's backward), and travel home as values.
    need_device(device)
    x, y = _inputs()

    def loss(a, b):
        v = a.conj()
        return ((v @ b.mH) * v[:, :1]).abs().sum() + (a._neg_view() * b).real.sum() + torch.fft.hfft(a[0]).sum()

    a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
    loss(a, b).backward()
    if style == "to":
        ad, bd = x.to(device).requires_grad_(), y.to(device).requires_grad_()
        loss(ad, bd).backward()
    else:
        ad, bd = x.clone().requires_grad_(), y.clone().requires_grad_()
        with torch_fl.ral_mode(device):
            loss(ad, bd).backward()
    torch.testing.assert_close(ad.grad.cpu(), a.grad, **TOL)
    torch.testing.assert_close(bd.grad.cpu(), b.grad, **TOL)


@pytest.mark.parametrize("device", DEVICES)
def test_host_copies_show_the_meaning(device):
    # repr, tolist and item read the view's values, not its base's stored ones
    need_device(device)
    x = _inputs()[0]
    v = x.to(device).conj()[1:]
    assert repr(v) == repr(x.conj()[1:])[:-1] + f", device='{device}')"
    assert v.tolist() == x.conj()[1:].tolist()
    assert v[0, 1].item() == x.conj()[1, 1].item()
    n = x.real.to(device)._neg_view()
    assert repr(n) == repr(x.real._neg_view())[:-1] + f", device='{device}')"
    assert n[0, 0].item() == -x[0, 0].real.item()


@pytest.mark.parametrize("device", DEVICES)
def test_copies_and_checkpoints_keep_cpu_semantics(device):
    need_device(device)
    x = _inputs()[0]
    base = x.to(device)
    v = base.conj()
    # copy.copy: a view of the same memory with the bit (as CPU); deepcopy: the values, no bit
    shallow, deep = copy.copy(v), copy.deepcopy(v)
    assert _bits(shallow) == _bits(copy.copy(x.conj())) == (True, False)
    assert _bits(deep) == _bits(copy.deepcopy(x.conj())) == (False, False)
    torch.testing.assert_close(shallow.cpu(), x.conj())
    torch.testing.assert_close(deep.cpu(), x.conj())
    # torch.save keeps the bit and the aliasing, in CUDA's format (loadable to CPU)
    buf = io.BytesIO()
    torch.save([base, v], buf)
    on_cpu = torch.load(io.BytesIO(buf.getvalue()), map_location="cpu")
    assert on_cpu[1].is_conj() and on_cpu[1].untyped_storage().data_ptr() == on_cpu[0].untyped_storage().data_ptr()
    torch.testing.assert_close(on_cpu[1], x.conj())
    back = torch.load(io.BytesIO(buf.getvalue()), map_location=device)
    back[1].copy_(torch.ones(4, 3, dtype=C64))
    torch.testing.assert_close(back[0].cpu(), torch.ones(4, 3, dtype=C64).conj())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("first", ["add", "t", "item", "tolist", "repr", "copy_", "mm", "sum"])
def test_a_cpu_checkpoint_of_a_conjugate_view_loads_with_its_bit(device, first):
    # torch.load sets the bit after the tensor is made (`_rebuild_tensor_v2`): whatever the
    # first op on it, it must honour the bit (fast paths would take it for a plain tensor).
    need_device(device)
    x = _inputs()[0]
    buf = io.BytesIO()
    torch.save(x.conj(), buf)
    t = torch.load(io.BytesIO(buf.getvalue()), map_location=device)
    assert t.is_conj()
    ops = {
        "add": lambda a: a + 1,
        "t": lambda a: a.t(),
        "item": lambda a: a[2, 1].item(),
        "tolist": lambda a: a.tolist(),
        "repr": lambda a: repr(a).split(", device=")[0].removesuffix(")"),
        "copy_": lambda a: a.copy_(torch.ones_like(a)),
        "mm": lambda a: a @ a.mT,
        "sum": lambda a: a.sum(),
    }
    want = ops[first](x.clone().conj())
    got = ops[first](t)
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got.cpu().resolve_conj(), want.resolve_conj(), **TOL)
        assert _bits(got) == _bits(want)
    elif isinstance(want, str):
        assert got == want
    else:
        torch.testing.assert_close(torch.tensor(got), torch.tensor(want), **TOL)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["conj", "neg"])
def test_item_of_a_loaded_one_element_view_reads_its_meaning(device, kind):
    # `.item()` skips the dispatcher (shortcuts.py), so the bit torch.load set is read there
    need_device(device)
    v = torch.tensor([1 + 2j]).conj() if kind == "conj" else torch.tensor([2.0])._neg_view()
    buf = io.BytesIO()
    torch.save(v, buf)
    t = torch.load(io.BytesIO(buf.getvalue()), map_location=device)
    assert t.item() == v.item()


# Device tensors made under ral_mode, viewed lazily, then handed to ops the mode runs on CPU
# (sparse layouts), pins, or mixes with CPU operands.
MODE_CASES = {
    "to_sparse": lambda z, y: (z.conj().to_sparse().to_dense(),),
    "pin_memory": lambda z, y: (z.conj().pin_memory(),),
    "mul_": lambda z, y: (z.conj().mul_(y), z),
    "with_cpu_operand": lambda z, y: (z.conj() + y, torch.stack([z.conj(), y]), torch.where(y.real > 0, z.conj(), y)),
    "fft": lambda z, y: (torch.fft.fft(z.conj()), torch.fft.hfft(z[0].conj())),
    "tolist": lambda z, y: (torch.tensor(z.conj().tolist()),),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODE_CASES))
def test_device_views_under_the_mode_match_cpu(name, device):
    need_device(device)
    x, y = _inputs()
    want = MODE_CASES[name](x * 2, y)
    with torch_fl.ral_mode(device):
        got = MODE_CASES[name](x * 2, y)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu().resolve_conj().resolve_neg(), w.resolve_conj().resolve_neg(), **TOL)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["inductor", "ral"])
def test_compiled_functions_of_conjugate_view_inputs_match_cpu(device, backend):
    # On ral:1 the default backend runs the graph as one extern call whose output metadata
    # inductor computes on bit-free fakes; the graph was traced with the conjugate input.
    need_device(device)
    torch._dynamo.reset()
    x = _inputs()[0]

    def f(a):
        return a.real * 2 + (a * 1j).abs()

    compiled = torch.compile(f, backend=backend)
    torch.testing.assert_close(compiled(x.to(device).conj()).cpu(), f(x.conj()), **TOL)
    torch.testing.assert_close(compiled(x.to(device)).cpu(), f(x), **TOL)
