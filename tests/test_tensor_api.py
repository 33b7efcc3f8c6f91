"""Capability: RalTensor behaves like a device tensor (repr, numpy, save/load, deepcopy, .data)."""

import contextlib
import copy
import io

import pytest
import torch
from conftest import assert_close
from sweep_support import need_device

import torch_fl
from torch_fl.tensor.ral_tensor import RalTensor


def test_factories_land_on_device(dev):
    for t in (
        torch.empty(3, 4, device=dev),
        torch.zeros(3, 4, device=dev),
        torch.ones(3, device=dev, dtype=torch.float16),
        torch.full((2, 2), 7.5, device=dev),
        torch.arange(10, device=dev),
        torch.tensor([[1, 2], [3, 4]], device=dev),
        torch.eye(3, device=dev),
    ):
        assert type(t) is RalTensor and t.device == torch.device(dev)
    assert_close(torch.zeros(3, 4, device=dev), torch.zeros(3, 4))
    assert_close(torch.full((2, 2), 7.5, device=dev), torch.full((2, 2), 7.5))
    assert_close(torch.arange(10, device=dev), torch.arange(10))
    assert_close(torch.tensor([[1, 2], [3, 4]], device=dev), torch.tensor([[1, 2], [3, 4]]))
    assert_close(torch.eye(3, device=dev), torch.eye(3))


def test_to_and_back_all_dtypes(dev):
    for dtype in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int8,
        torch.uint8,
        torch.bool,
    ):
        src = (torch.randn(5, 7) * 10).to(dtype)
        r = src.to(dev)
        assert r.dtype == dtype
        torch.testing.assert_close(r.cpu(), src, rtol=0, atol=0)


def test_to_with_cast_on_device(dev):
    src = torch.randn(4, 5)
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.bool):
        out = src.to(dev).to(dtype)
        torch.testing.assert_close(out.cpu(), src.to(dtype), rtol=0, atol=0)


def test_non_blocking_transfers(dev):
    src = torch.randn(64, 64)
    r = src.to(dev, non_blocking=True)
    back = r.to("cpu", non_blocking=True)
    torch.ral.synchronize()
    torch.testing.assert_close(back, src, rtol=0, atol=0)


def test_repr_numpy_tolist_item(dev):
    src = torch.tensor([[1.5, -2.0], [3.25, 4.0]])
    r = src.to(dev)
    text = repr(r)
    assert "device='ral:" in text and "1.5000" in text
    assert (r.numpy() == src.numpy()).all()
    assert r.tolist() == src.tolist()
    assert r[1, 0].item() == 3.25
    assert str(r.sum().item()) == str(src.sum().item())


def test_save_load_roundtrip_and_map_location(dev):
    src = torch.randn(3, 4)
    r = src.to(dev)
    buf = io.BytesIO()
    torch.save({"w": r, "n": 3}, buf)
    buf.seek(0)
    back = torch.load(buf)
    assert type(back["w"]) is RalTensor and back["w"].device == r.device
    torch.testing.assert_close(back["w"].cpu(), src, rtol=0, atol=0)
    buf.seek(0)
    cpu = torch.load(buf, map_location="cpu")["w"]
    assert cpu.device.type == "cpu" and type(cpu) is torch.Tensor
    torch.testing.assert_close(cpu, src, rtol=0, atol=0)


@pytest.mark.parametrize("device", ["ral:0", "ral:1"])
def test_saved_views_of_one_buffer_load_sharing_it(device):
    """Views saved together (a tensor, its transpose, a strided slice) load with CPU's
    strides and offsets and share one buffer again, as CPU's torch.save keeps them sharing a
    storage, on the device and with map_location="cpu". Each view was saved as its own copy."""
    need_device(device)
    base = torch.randn(4, 6)
    x = base.to(device)
    saved = {"x": x, "t": x.t(), "s": x[1:, ::2]}
    buf = io.BytesIO()
    torch.save(saved, buf)
    for where in (None, "cpu"):
        buf.seek(0)
        back = torch.load(buf, map_location=where, weights_only=True)
        for k, v in saved.items():
            assert back[k].stride() == v.stride() and back[k].storage_offset() == v.storage_offset(), k
            torch.testing.assert_close(back[k].cpu(), v.cpu(), rtol=0, atol=0)
        back["x"].add_(1)  # one buffer: every view sees it
        torch.testing.assert_close(back["t"].cpu(), (base + 1).t(), rtol=0, atol=0)
        torch.testing.assert_close(back["s"].cpu(), (base + 1)[1:, ::2], rtol=0, atol=0)
    torch.testing.assert_close(x.cpu(), base, rtol=0, atol=0)  # the saved tensors are untouched


def test_save_load_module_state_dict(dev):
    m = torch.nn.Linear(4, 3).to(dev)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = torch.nn.Linear(4, 3)
    m2.load_state_dict(torch.load(buf, map_location="cpu"))
    torch.testing.assert_close(m2.weight, m.weight.cpu(), rtol=0, atol=0)


def test_deepcopy(dev):
    r = torch.randn(3, 3).to(dev)
    c = copy.deepcopy(r)
    assert type(c) is RalTensor and c._buf is not r._buf
    torch.testing.assert_close(c.cpu(), r.cpu(), rtol=0, atol=0)
    m = torch.nn.Linear(3, 2).to(dev)
    m2 = copy.deepcopy(m)
    assert m2.weight.device == m.weight.device and m2.weight._buf is not m.weight._buf
    torch.testing.assert_close(m2.weight.cpu(), m.weight.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("device", ["ral:0", "ral:1"])
@pytest.mark.parametrize("style", ["device", "mode"])
def test_deepcopied_views_share_one_buffer(device, style):
    """Views deep-copied together (a tensor, its transpose, an offset slice) keep CPU's strides
    and offsets and share one new buffer, as CPU's deepcopy shares one new storage; a non-leaf
    refuses with CPU's error. Each view used to become its own unrelated copy."""
    need_device(device)
    base = torch.randn(4, 6)
    want_t, want_s = (base + 1).t(), (base + 1)[1:, 2:]
    ctx = torch_fl.ral_mode(device) if style == "mode" else contextlib.nullcontext()
    with ctx:
        x = base.to(device) if style == "device" else base.clone()
        assert type(x) is RalTensor
        views = {"x": x, "t": x.t(), "s": x[1:, 2:]}
        back = copy.deepcopy(views)
        for k, v in views.items():
            assert back[k].stride() == v.stride() and back[k].storage_offset() == v.storage_offset(), k
            assert back[k]._buf is not x._buf
        back["x"].add_(1)
        assert_close(back["t"], want_t, rtol=0, atol=0)
        assert_close(back["s"], want_s, rtol=0, atol=0)
        assert_close(x, base, rtol=0, atol=0)
        with pytest.raises(RuntimeError, match="graph leaves"):
            copy.deepcopy(x.requires_grad_() * 2)


def test_data_assignment(dev):
    p = torch.nn.Parameter(torch.zeros(3).to(dev))
    new = torch.arange(3.0).to(dev)
    p.data = new
    torch.testing.assert_close(p.cpu(), torch.arange(3.0), rtol=0, atol=0)
    assert (p.data + 1).cpu().tolist() == [1.0, 2.0, 3.0]


def test_tensor_flatten_and_module_to_dtype(dev):
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    r = torch.randn(2, 2).to(dev)
    assert is_traceable_wrapper_subclass(r)
    names, ctx = r.__tensor_flatten__()
    inner = {n: getattr(r, n) for n in names}
    rebuilt = RalTensor.__tensor_unflatten__(inner, ctx, r.shape, r.stride())
    torch.testing.assert_close(rebuilt.cpu(), r.cpu(), rtol=0, atol=0)
    m = torch.nn.Linear(4, 4).to(dev)
    ref = m.weight.cpu()
    m.to(torch.float64)
    assert m.weight.dtype == torch.float64 and m.weight.device.type == "ral"
    torch.testing.assert_close(m.weight.cpu(), ref.double(), rtol=0, atol=0)
    m.half()
    assert m.weight.dtype == torch.float16 and isinstance(m.weight, torch.nn.Parameter)


def test_cpu_mixing_error_matches_cuda_kind(dev):
    r = torch.ones(3).to(dev)
    try:
        r + torch.ones(3)
    except RuntimeError as exc:
        assert "Expected all tensors to be on the same device" in str(exc)
    else:
        raise AssertionError("mixing a ral tensor with a non-scalar CPU tensor did not raise")
    # 0-dim CPU tensors are scalars and may mix, as with CUDA.
    assert_close(r * torch.tensor(2.0), torch.ones(3) * 2)


def test_is_torch_fl_exported():
    assert issubclass(torch_fl.OutOfMemoryError, torch.OutOfMemoryError)


def test_data_ptr_identifies_memory(dev):
    """data_ptr() as on CUDA: distinct for tensors that do not share memory, offset by the
    view's start for views (libraries find aliasing and tied weights this way)."""
    a, b = torch.ones(4, 4, device=dev), torch.ones(4, 4, device=dev)
    assert a.data_ptr() != b.data_ptr() and a.data_ptr() != 0
    assert a[1].data_ptr() == a.data_ptr() + 4 * a.element_size()
    assert a.t().data_ptr() == a.data_ptr() and a.storage().data_ptr() == a.data_ptr()
    assert len({t.data_ptr() for t in torch.nn.Linear(3, 3).to(dev).parameters()}) == 2
