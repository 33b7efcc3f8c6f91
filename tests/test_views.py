"""Capability: views and aliasing share the device buffer; detach runs no kernel."""

import pytest
import torch
from conftest import assert_close, launch_count
from sweep_support import DEVICES, need_device, strided_view

import torch_fl


def test_view_shares_buffer_and_inplace_reaches_base(dev):
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.clone().to(dev)
    v = base[1]
    assert v._buf is base._buf
    v.mul_(10)
    base_cpu[1].mul_(10)
    assert_close(base, base_cpu)
    t = base.t()
    t[0].add_(1)
    base_cpu.t()[0].add_(1)
    assert_close(base, base_cpu)


def test_view_chain_metadata_matches_cpu(dev):
    cpu = torch.arange(24.0).reshape(2, 3, 4)
    r = cpu.to(dev)
    for fn in (
        lambda x: x.transpose(0, 2),
        lambda x: x.permute(2, 0, 1)[1:, :, ::2],
        lambda x: x.view(6, 4)[::2],
        lambda x: x.unsqueeze(1).expand(2, 5, 3, 4),
        lambda x: x.select(1, 2),
        lambda x: x.narrow(2, 1, 2),
        lambda x: x.flatten(),
        lambda x: x.unflatten(2, (2, 2)),
        lambda x: x.diagonal(dim1=1, dim2=2),
        lambda x: x.as_strided((2, 2), (1, 2), 3),
    ):
        out_r, out_c = fn(r), fn(cpu)
        assert out_r.shape == out_c.shape and out_r.stride() == out_c.stride()
        assert out_r.storage_offset() == out_c.storage_offset()
        assert_close(out_r, out_c)


def test_multi_output_views(dev):
    cpu = torch.arange(10.0)
    r = cpu.to(dev)
    for a, b in zip(r.split(3), cpu.split(3)):
        assert_close(a, b)
    for a, b in zip(r.view(2, 5).unbind(1), cpu.view(2, 5).unbind(1)):
        assert_close(a, b)
    for a, b in zip(r.chunk(4), cpu.chunk(4)):
        assert_close(a, b)


def test_detach_and_alias_run_no_kernel(dev):
    r = torch.randn(4, 4).to(dev)
    torch.ral.synchronize()
    idx = torch.device(dev).index
    before = launch_count(idx)
    d = r.detach()
    a = torch.ops.aten.alias(r)
    v = r.view(16).t() if r.dim() == 1 else r.view(16)
    assert launch_count(idx) == before
    assert d._buf is r._buf and a._buf is r._buf and v._buf is r._buf


def test_dtype_view(dev):
    cpu = torch.tensor([1.0, 2.0, -3.5])
    r = cpu.to(dev)
    assert_close(r.view(torch.int32), cpu.view(torch.int32))
    assert_close(r[1:].view(torch.int16), cpu[1:].view(torch.int16))


def test_inplace_on_noncontiguous_view(dev):
    cpu = torch.randn(6, 5)
    r = cpu.clone().to(dev)
    r[:, 1::2].add_(torch.ones(6, 2).to(dev))
    cpu[:, 1::2].add_(torch.ones(6, 2))
    assert_close(r, cpu)
    r.t()[2:4].zero_()
    cpu.t()[2:4].zero_()
    assert_close(r, cpu)


def test_inplace_metadata_ops(dev):
    cpu = torch.arange(6.0).reshape(2, 3)
    r = cpu.clone().to(dev)
    r.t_()
    assert r.shape == (3, 2) and r.stride() == (1, 3)
    assert_close(r, cpu.t())
    r.unsqueeze_(0).squeeze_(0).transpose_(0, 1)
    assert_close(r, cpu)
    r.as_strided_((3,), (2,), 1)
    assert_close(r, cpu.as_strided((3,), (2,), 1))


def test_resize_and_set(dev):
    r = torch.arange(6.0).to(dev)
    r.resize_(2, 2)
    assert_close(r, torch.arange(4.0).reshape(2, 2))
    r.resize_(4, 4)  # grows into a new buffer; the prefix survives
    assert r.shape == (4, 4)
    assert_close(r.reshape(-1)[:6], torch.arange(6.0))
    src = torch.ones(3, 3).to(dev)
    r.set_(src)
    assert r._buf is src._buf and r.shape == (3, 3)
    r.add_(1)
    assert_close(src, torch.full((3, 3), 2.0))


def test_out_with_resize(dev):
    out = torch.empty(0).to(dev)
    a = torch.randn(3, 4)
    torch.add(a.to(dev), 1, out=out)
    assert out.shape == (3, 4)
    assert_close(out, a + 1)


# Ops the sweep cannot compare: sparse ones the device refuses by design (test_opinfo checks the
# error), tensor_split (its index tensor must stay on CPU, which moving every tensor breaks).
_NOT_COMPARED = ("sparse.", "to_sparse", "tensor_split")


@pytest.mark.parametrize("how,style", [("slice", "device"), ("expand", "device"), ("slice", "mode")])
@pytest.mark.parametrize("device", DEVICES)
def test_every_op_on_offset_and_broadcast_views_matches_cpu(device, how, style):
    """Every op_db op (float32, its first 2 samples) on inputs that are non-dense views with a
    storage offset, or broadcast views, gives CPU's values on both devices, whichever tier
    serves it, with the views moved to the device and as CPU tensors under ral_mode. ral:1's cpu tier once copied a view to the host at storage offset 0, so
    as_strided_scatter (which addresses the storage) wrote to the wrong element."""
    need_device(device)
    from torch_fl.observe import conformance as C

    compared, failures = 0, []
    for op, _ in C.select(C.load_op_db()):
        name = C.opinfo_name(op)
        if C._seeded_random(op) or name.startswith(_NOT_COMPARED) or "empty" in name:
            continue  # random or uninitialized results have no values to compare
        for i, sample in enumerate(C.samples_of(op, torch.float32, 2)):
            sample = sample.transform(lambda t: strided_view(t, how))
            try:
                expected = op(sample.input, *sample.args, **sample.kwargs)
            except Exception:
                continue  # CPU refuses it: test_opinfo checks ral raises the same type
            if C._is_random(op, sample):
                continue
            try:
                if style == "mode":
                    with torch_fl.ral_mode(device):
                        actual = op(sample.input, *sample.args, **sample.kwargs)
                else:
                    moved = sample.transform(lambda t: C._to(t, device))
                    actual = op(moved.input, *moved.args, **moved.kwargs)
                C._compare(C._cpu(actual), expected, torch.float32)  # the OpInfo sweep's tolerances
            except Exception as e:
                failures.append(f"{name} sample {i}: {type(e).__name__}: {str(e)[:120]}")
            compared += 1
    assert compared > 1000, f"only {compared} samples compared: the sweep lost its samples"
    assert not failures, f"{len(failures)} of {compared} samples differ from CPU:\n" + "\n".join(failures[:20])
