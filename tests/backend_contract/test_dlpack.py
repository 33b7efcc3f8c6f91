"""DLPack for ral tensors (tensor/dlpack.py): the device is PyTorch's PrivateUse1 mapping
(kDLExtDev, index); device capsules that torch.from_dlpack imports as a tensor sharing the
buffer, whose ops torch_fl runs (tensor/dlpack_import.py); host capsules on request (zero-copy
on host-mappable ral:0, a copy on ral:1)."""

import gc

import numpy as np
import pytest
import torch
from conftest import run_python
from torch.utils.dlpack import DLDeviceType

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
CPU = (DLDeviceType.kDLCPU, 0)


def _host_mappable(device):
    from torch_fl.tensor.host_copy import host_mappable

    return host_mappable(torch.device(device).index)


def _view(device):
    """A CPU reference and the same view (offset and strides) of a ral tensor."""
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) * 0.5 - 3
    return base[1:, ::2], base.to(device)[1:, ::2]


@pytest.fixture(autouse=True, scope="module")
def _fallback_removed_afterwards():
    """Device-capsule exports register a PrivateUse1 fallback for the process (see
    tensor/dlpack.py BEFORE_FIRST_EXPORT); later test files in this worker get a process
    without it, as a program that never exports one."""
    yield
    from torch_fl.tensor import dlpack_import

    dlpack_import.unregister()


def test_fallback_is_registered_by_the_first_export_only():
    res = run_python(
        """
        import torch, torch_fl
        from torch_fl.tensor import dlpack_import
        x = torch.arange(4.0, device="ral:0") * 2
        # before any export: a legacy to_dlpack import errors on use, with no fallback either
        for d in ["ral:0", "ral:1"][: torch.ral.device_count()]:
            for src in (x.to(d), x.to(d)[1:]):
                bad = torch.from_dlpack(torch.utils.dlpack.to_dlpack(src))
                for use in (bad.cpu, lambda: bad + 1, lambda: repr(bad), lambda: bad.sum()):
                    try:
                        use()
                        print("no error", d)
                    except (RuntimeError, NotImplementedError):
                        pass
        before = dlpack_import._lib is None
        y = torch.from_dlpack(x)
        print(before, dlpack_import._lib is not None, (y + 1).cpu().tolist())
        """
    )
    assert res.returncode == 0, res.stderr
    assert "no error" not in res.stdout, res.stdout
    assert res.stdout.strip().splitlines()[-1] == "True True [1.0, 3.0, 5.0, 7.0]", res.stdout


@pytest.mark.parametrize("device", DEVICES)
def test_dlpack_device_is_privateuse1s_ext_dev(device):
    t = torch.ones(3, device=device)
    assert t.__dlpack_device__() == (DLDeviceType.kDLExtDev, torch.device(device).index)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("versioned", [False, True])
def test_host_capsule_round_trips_views_against_cpu(device, versioned):
    ref, t = _view(device)
    capsule = t.__dlpack__(dl_device=CPU, max_version=(1, 0) if versioned else None)
    back = torch.from_dlpack(capsule)
    assert back.device.type == "cpu"
    torch.testing.assert_close(back, ref, rtol=0, atol=0)
    torch.testing.assert_close(torch.from_dlpack(np.from_dlpack(t, device="cpu")), ref, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_numpy_host_capsule_shares_memory_only_where_host_mappable(device):
    ref, t = _view(device)
    a = np.from_dlpack(t, device="cpu")
    a[0, 1] = 99.0
    expected = ref.clone()
    if _host_mappable(device):  # zero-copy: the write lands in the device tensor (and its base)
        expected[0, 1] = 99.0
    torch.testing.assert_close(t.cpu(), expected, rtol=0, atol=0)
    if not _host_mappable(device):
        with pytest.raises(BufferError, match="not host-mappable.*copy=False"):
            np.from_dlpack(t, device="cpu", copy=False)
    else:
        assert np.from_dlpack(t, device="cpu", copy=False)[0, 1] == 99.0
    c = np.from_dlpack(t, device="cpu", copy=True)  # an explicit copy is never shared
    c[0, 0] = -1.0
    assert t[0, 0].item() == ref[0, 0].item()


@pytest.mark.parametrize("device", DEVICES)
def test_host_capsule_keeps_device_memory_alive(device, young_gc):
    t = torch.arange(1000, dtype=torch.float64).to(device)
    a = np.from_dlpack(t[10:], device="cpu")
    a[0] = -1.0
    expected = np.arange(10, 1000, dtype=np.float64)
    expected[0] = -1.0
    assert t[10].item() == (-1.0 if _host_mappable(device) else 10.0)  # zero-copy where mappable
    del t
    gc.collect()
    filler = [torch.full((1000,), -7.0, dtype=torch.float64, device=device) for _ in range(4)]
    np.testing.assert_array_equal(a, expected)
    assert len(filler) == 4


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("how", ["protocol", "capsule", "versioned"])
def test_device_capsule_round_trip_shares_the_buffer(device, how):
    ref, t = _view(device)
    if how == "protocol":
        x = torch.from_dlpack(t)
    else:
        x = torch.from_dlpack(t.__dlpack__(max_version=(1, 0) if how == "versioned" else None))
    assert x.device == t.device and x.data_ptr() == t.data_ptr()
    assert (x.shape, x.stride()) == (t.shape, t.stride())
    torch.testing.assert_close(x.cpu(), ref, rtol=0, atol=0)
    # ops on the imported tensor run on the device, against CPU
    torch.testing.assert_close((x * 2 + 1).cpu(), ref * 2 + 1, rtol=0, atol=0)
    torch.testing.assert_close((x @ x).cpu(), ref @ ref, rtol=1e-6, atol=1e-5)
    assert x.sum().item() == pytest.approx(ref.sum().item(), rel=1e-6)
    # writes through it land in the exporter's buffer, as between CUDA tensors
    assert x.mul_(-1.0) is x
    x[0, 1] = 42.0
    x.copy_(x + 0.5)
    expected = ref.clone()
    expected.mul_(-1.0)
    expected[0, 1] = 42.0
    expected += 0.5
    torch.testing.assert_close(t.cpu(), expected, rtol=0, atol=0)
    torch.testing.assert_close(x.cpu(), expected, rtol=0, atol=0)
    # and the other way
    t.fill_(3.0)
    assert x.cpu().eq(3.0).all()
    torch.testing.assert_close(torch.from_dlpack(t, device="cpu"), torch.full((3, 3), 3.0), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_imported_tensor_keeps_the_buffer_alive(device, young_gc):
    x = torch.from_dlpack(torch.arange(6, dtype=torch.float32).to(device)[1:])  # exporter gone
    gc.collect()
    junk = [torch.full((6,), -1.0, device=device) for _ in range(4)]  # reuse freed blocks, if any
    assert x.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0] and len(junk) == 4


@pytest.mark.parametrize("device", DEVICES)
def test_device_capsule_refusals_and_copies(device):
    ref, t = _view(device)
    index = torch.device(device).index
    with pytest.raises(BufferError, match="require gradient"):
        torch.ones(2, device=device, requires_grad=True).__dlpack__()
    with pytest.raises(BufferError, match="needs a device copy"):
        t.__dlpack__(dl_device=(DLDeviceType.kDLExtDev, index + 1))
    with pytest.raises(RuntimeError, match="not resizable"):  # an import's storage, as on CUDA
        torch.from_dlpack(t).untyped_storage().resize_(1024)
    copied = torch.from_dlpack(t.__dlpack__(dl_device=t.__dlpack_device__(), copy=True))
    assert copied.data_ptr() != t.data_ptr()
    torch.testing.assert_close(copied.cpu(), ref, rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="Unsupported device"):
        np.from_dlpack(t)  # numpy refuses a device capsule itself: ask it for device="cpu"
    torch.testing.assert_close((t + 1).cpu(), ref + 1)  # the tensor still works


@pytest.mark.parametrize("device", DEVICES)
def test_an_import_refuses_to_grow_and_stays_intact(device):
    # an import's storage belongs to the exporter: a resize_ needing more bytes raises CPU's
    # error before anything changes (growing the RalTensor over the same memory would move the
    # exporter's buffer to a new block under the import); the exporter itself grows, as on CPU
    cpu_import = torch.from_dlpack(torch.arange(4.0))
    with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
        cpu_import.resize_(1000)
    t = torch.arange(4.0, device=device)
    x = torch.from_dlpack(t)
    with pytest.raises(RuntimeError, match="Trying to resize storage that is not resizable"):
        x.resize_(1000)
    assert x.shape == (4,) and x.cpu().tolist() == t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    x.add_(1)  # still shares the exporter's memory
    assert t.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    t.resize_(10)
    t[9] = 5.0
    assert t.cpu().tolist()[:4] == [1.0, 2.0, 3.0, 4.0] and t[9].item() == 5.0


@pytest.mark.parametrize("device", DEVICES)
def test_cpu_tensors_under_ral_mode_keep_cpu_dlpack(device):
    x = torch.arange(5.0)
    with torch_fl.ral_mode(device):
        y = torch.from_dlpack(x)
        a = np.from_dlpack(x)
        y[0] = 42.0
    assert y.device.type == "cpu" and x[0].item() == 42.0 and a[0] == 42.0


@pytest.mark.parametrize("device", DEVICES)
def test_legacy_to_dlpack_import_fails_clearly_on_copy(device):
    # torch.utils.dlpack.to_dlpack is torch's C function (it never asks __dlpack__): its capsule
    # of a wrapper tensor carries no data, and the imported tensor must say so, not return values
    ref, t = _view(device)
    whole = t.contiguous()  # offset 0: the capsule's data pointer is null
    torch.from_dlpack(whole)  # an export registers the fallback (before it: test above)
    for src in (t, whole):
        x = torch.from_dlpack(torch.utils.dlpack.to_dlpack(src))
        assert x.device == t.device and x.shape == src.shape
        for use in (torch.Tensor.cpu, lambda y: y + 1, torch.Tensor.sum, repr):
            with pytest.raises(RuntimeError, match="holds no torch_fl device buffer"):
                use(x)
    torch.testing.assert_close(t.cpu(), ref, rtol=0, atol=0)
    torch.testing.assert_close((whole * 2).cpu(), ref * 2, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_ral_tensors_export_the_same_under_ral_mode(device):
    ref, t = _view(device)
    with torch_fl.ral_mode(device):
        assert t.__dlpack_device__() == (DLDeviceType.kDLExtDev, torch.device(device).index)
        a = np.from_dlpack(t, device="cpu")
        x = torch.from_dlpack(t)
        y = (x * 2).cpu()
    torch.testing.assert_close(torch.from_numpy(a), ref, rtol=0, atol=0)
    assert x.data_ptr() == t.data_ptr()
    torch.testing.assert_close(y, ref * 2, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_writes_through_a_dlpack_consumer_are_seen_under_ral_mode(device):
    x = torch.arange(5.0)
    with torch_fl.ral_mode(device):
        a = np.from_dlpack(x)
        first = (x * 2).cpu()
        a[0] = 100.0  # numpy's write bumps no version counter
        second = (x * 2).cpu()
    torch.testing.assert_close(first, torch.arange(5.0) * 2, rtol=0, atol=0)
    torch.testing.assert_close(second, torch.tensor([200.0, 2.0, 4.0, 6.0, 8.0]), rtol=0, atol=0)
