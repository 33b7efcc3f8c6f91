"""Storages of ral tensors: `torch.UntypedStorage.is_ral`/`TypedStorage.is_ral` (registered with
PyTorch's PrivateUse1 storage methods), `t.untyped_storage()` as the device buffer's real torch
storage, `torch.UntypedStorage(n, device="ral:N")` from the MemoryPool, and `t.storage()`
answering the usual questions for the device buffer, against the same questions asked of a CPU
tensor."""

import pytest
import torch

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

pytestmark = pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")


def test_torch_storages_know_is_ral():
    assert isinstance(torch.UntypedStorage.is_ral, property)
    assert isinstance(torch.TypedStorage.is_ral, property)
    x = torch.arange(3.0)
    assert x.untyped_storage().is_ral is False and x.storage().is_ral is False


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_storage_answers_as_cpus(device):
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25
    t = cpu.to(device)
    for c, r in [(cpu, t), (cpu[1:, ::2], t[1:, ::2])]:  # a view reports its base's storage
        cs, rs = c.storage(), r.storage()
        assert rs.device == torch.device(device) and rs.is_ral and not rs.is_cuda
        assert (rs.nbytes(), rs.size(), len(rs), rs.element_size()) == (
            cs.nbytes(),
            cs.size(),
            len(cs),
            cs.element_size(),
        )
        assert rs.tolist() == cs.tolist()
        host = rs.cpu()
        assert isinstance(host, torch.TypedStorage) and host.device.type == "cpu" and host.dtype == c.dtype
        assert host.tolist() == cs.tolist()
        assert rs.type() == "torch.storage.TypedStorage"  # a PrivateUse1 TypedStorage's answer
    assert t[1:].storage().data_ptr() == t.storage().data_ptr()  # views share, as on CPU
    assert t.clone().storage().data_ptr() != t.storage().data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_storage_tolist_sees_device_writes(device):
    t = torch.zeros(4, dtype=torch.int64, device=device)
    t[1:3] = 7
    assert t.storage().tolist() == [0, 7, 7, 0]


@pytest.mark.parametrize("device", DEVICES)
def test_untyped_storage_is_the_device_buffer_as_on_cpu(device):
    cpu = torch.arange(12, dtype=torch.float32).reshape(3, 4) * 0.25
    t = cpu.to(device)
    s = t.untyped_storage()
    assert type(s) is torch.UntypedStorage and s.device == torch.device(device) and s.is_ral
    assert s.nbytes() == cpu.untyped_storage().nbytes()
    assert s.data_ptr() == t.data_ptr() != 0  # the device buffer's address
    view = t[1:, ::2]
    assert view.untyped_storage().data_ptr() == s.data_ptr()  # views share it, as on CPU
    assert view.untyped_storage()._cdata == s._cdata  # one c10 storage per buffer
    assert t.clone().untyped_storage().data_ptr() != s.data_ptr()
    assert t.storage().untyped()._cdata == s._cdata
    # a TypedStorage view of it reads the device values
    typed = torch.TypedStorage(wrap_storage=s, dtype=torch.float32, _internal=True)
    assert typed.device == torch.device(device) and len(typed) == 12
    assert typed.tolist() == cpu.flatten().tolist()
    assert typed.cpu().tolist() == cpu.flatten().tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_untyped_storage_keeps_the_memory_alive(device):
    s = (torch.arange(6, dtype=torch.float32) + 1).to(device).untyped_storage()  # tensor gone
    again = torch.empty(0, device=device).set_(s, 0, (6,), (1,))
    assert again.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


@pytest.mark.parametrize("device", DEVICES)
def test_new_storage_allocates_from_the_pool(device):
    idx = torch.device(device).index
    before = torch.ral.memory_allocated(idx)
    s = torch.UntypedStorage(64, device=device)
    assert s.device == torch.device(device) and s.is_ral and s.nbytes() == 64 and s.data_ptr() != 0
    assert torch.ral.memory_allocated(idx) >= before + 64
    t = torch.empty(0, device=device).set_(s, 0, (4, 4), (4, 1))
    t.copy_(torch.arange(16, dtype=torch.float32).reshape(4, 4))
    assert t.data_ptr() == s.data_ptr()
    assert s.cpu().nbytes() == 64 and torch.empty(0).set_(s.cpu(), 0, (16,), (1,)).tolist() == [
        float(i) for i in range(16)
    ]
    # PyTorch's own storage methods run on it: fill_, copy_, clone, CPU -> ral
    assert s.clone().data_ptr() != s.data_ptr() and s.clone().cpu().tolist() == s.cpu().tolist()
    assert torch.UntypedStorage(3, device=device).fill_(7).cpu().tolist() == [7, 7, 7]
    up = torch.arange(4, dtype=torch.uint8).untyped_storage().ral(idx)
    assert up.device == torch.device(device) and up.cpu().tolist() == [0, 1, 2, 3]
    del s, t
    assert torch.ral.memory_allocated(idx) <= before + 8  # freed to the pool (`up` remains)


@pytest.mark.parametrize("device", DEVICES)
def test_set_to_an_untyped_storage_with_geometry(device):
    cpu = torch.arange(10, dtype=torch.float32)
    t = cpu.to(device)
    for args in [(t.untyped_storage(),), (t.untyped_storage(), 2, (2, 3), (3, 1))]:
        c_args = (cpu.untyped_storage(), *args[1:])
        r, c = torch.empty(0, device=device).set_(*args), torch.empty(0).set_(*c_args)
        assert (r.shape, r.stride(), r.storage_offset()) == (c.shape, c.stride(), c.storage_offset())
        torch.testing.assert_close(r.cpu(), c, rtol=0, atol=0)
    r.mul_(-1.0)
    c.mul_(-1.0)
    torch.testing.assert_close(t.cpu(), cpu, rtol=0, atol=0)  # one buffer, as on CPU
    torch.testing.assert_close((t + 1).cpu(), cpu + 1, rtol=0, atol=0)  # and t keeps working
    if len(DEVICES) > 1:
        other = DEVICES[1] if device == DEVICES[0] else DEVICES[0]
        with pytest.raises(RuntimeError, match="devices must match"):
            torch.empty(0, device=other).set_(t.untyped_storage())


@pytest.mark.parametrize("device", DEVICES)
def test_storage_resize_moves_the_untyped_storage_too(device):
    t = torch.arange(4, dtype=torch.float32).to(device)
    s = t.untyped_storage()
    t.storage().resize_(8)
    assert s.nbytes() == 32 and s.data_ptr() == t.data_ptr()
    assert torch.empty(0, device=device).set_(s, 0, (4,), (1,)).cpu().tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("new_bytes", [64, 12, 32])
def test_untyped_storage_resize_as_on_cpu(device, new_bytes):
    cpu = torch.arange(8, dtype=torch.float32) * 0.5
    t = cpu.to(device)
    view = t[1:3]
    rs, cs = t.untyped_storage(), cpu.untyped_storage()
    assert rs.resize_(new_bytes) is rs
    cs.resize_(new_bytes)
    assert rs.nbytes() == cs.nbytes() == new_bytes
    assert t.untyped_storage()._cdata == rs._cdata and rs.data_ptr() == t.data_ptr() != 0
    kept = min(32, new_bytes)  # the first min(old, new) bytes survive, as on CPU and CUDA
    assert rs.cpu().tolist()[:kept] == cs.tolist()[:kept]
    # every tensor on the storage reads the new block where it lies inside it
    torch.testing.assert_close(t[: kept // 4].cpu(), cpu[: kept // 4], rtol=0, atol=0)
    torch.testing.assert_close(view.cpu(), cpu[1:3], rtol=0, atol=0)
    if new_bytes < 32:  # a tensor reaching past the shrunk block: CPU reads garbage, ral raises
        with pytest.raises(RuntimeError, match="exceeds buffer"):
            t.cpu()
    whole = torch.empty(0, device=device).set_(rs, 0, (new_bytes // 4,), (1,))
    whole.fill_(-2.0)  # writes through the resized storage reach the tensor's view of it
    assert view.cpu().tolist() == [-2.0, -2.0]


@pytest.mark.parametrize("device", DEVICES)
def test_untyped_storage_resize_to_zero_frees_and_back(device):
    idx = torch.device(device).index
    t = torch.arange(4096, dtype=torch.float32).to(device)
    view = t[10:12]
    s = t.untyped_storage()
    allocated = torch.ral.memory_allocated(idx)
    s.resize_(0)
    assert s.nbytes() == 0 and s.data_ptr() == 0
    assert torch.ral.memory_allocated(idx) <= allocated - 4096 * 4  # the block went back to the pool
    with pytest.raises(RuntimeError, match="0x0 not mapped"):  # not a crash: CPU segfaults here
        view + 1
    view.record_stream(torch.ral.current_stream(idx))  # a no-op on a freed storage, as on CUDA
    s.resize_(4096 * 4)  # the FSDP pattern: free, then re-grow and refill before use
    t.copy_(torch.arange(4096, dtype=torch.float32) * 2)
    assert view.cpu().tolist() == [20.0, 22.0] and (t + 1)[4095].item() == 8191.0


@pytest.mark.parametrize("device", DEVICES)
def test_impossible_storage_resize_raises_out_of_memory_and_keeps_the_data(device):
    t = torch.arange(6, dtype=torch.float32).to(device)
    s = t.untyped_storage()
    with pytest.raises(torch.OutOfMemoryError, match=rf"{device} is out of memory resizing a storage"):
        s.resize_(1 << 60)
    with pytest.raises(torch.OutOfMemoryError, match=rf"{device} is out of memory allocating a storage"):
        torch.UntypedStorage(1 << 60, device=device)
    assert s.nbytes() == 24 and t.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert (t * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


@pytest.mark.parametrize("device", DEVICES)
def test_new_storage_resizes_and_host_views_follow(device):
    # a host-mappable device serves reads from a cached host mapping: it must follow the move
    s = torch.UntypedStorage(8, device=device)
    t = torch.empty(0, device=device).set_(s, 0, (2,), (1,))
    t.copy_(torch.tensor([1.5, 2.5]))
    assert torch.cumsum(t, 0).cpu().tolist() == [1.5, 4.0]  # cpu tier: reads a host view on ral:0
    s.resize_(4096)
    torch.empty(0, device=device).set_(s, 0, (1024,), (1,)).fill_(7.0)
    assert torch.cumsum(t, 0).cpu().tolist() == [7.0, 14.0]
    assert t.cpu().tolist() == [7.0, 7.0] and t.numpy().tolist() == [7.0, 7.0]


@pytest.mark.parametrize("device", DEVICES)
def test_storage_resize_under_ral_mode(device):
    import torch_fl

    cpu = torch.arange(4, dtype=torch.float32)
    t = cpu.to(device)
    with torch_fl.ral_mode(device):
        s = t.untyped_storage()
        s.resize_(32)
        w = torch.empty(0, device=device).set_(s, 0, (8,), (1,))
        w[4:] = 9.0
        out = (w * 2).cpu()
        cpu.untyped_storage().resize_(32)  # a CPU tensor's storage stays a CPU one
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 18.0, 18.0, 18.0, 18.0]
    assert cpu.untyped_storage().device.type == "cpu" and cpu.tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("geometry", [(), (1, (2, 2), (1, 2)), (2, (3,))])
def test_set_to_a_tensors_storage_shares_it_as_on_cpu(device, geometry):
    cpu = torch.arange(6, dtype=torch.float32) * 1.5
    t = cpu.to(device)
    c_dst, r_dst = torch.empty(0), torch.empty(0, device=device)
    assert r_dst.set_(t.storage(), *geometry) is r_dst
    c_dst.set_(cpu.storage(), *geometry)
    assert (r_dst.shape, r_dst.stride(), r_dst.storage_offset()) == (
        c_dst.shape,
        c_dst.stride(),
        c_dst.storage_offset(),
    )
    torch.testing.assert_close(r_dst.cpu(), c_dst, rtol=0, atol=0)
    r_dst.add_(100.0)  # one buffer: the write shows in the source, as on CPU
    c_dst.add_(100.0)
    torch.testing.assert_close(t.cpu(), cpu, rtol=0, atol=0)


def test_set_to_another_devices_storage_is_refused():
    if len(DEVICES) < 2:
        pytest.skip("needs ral:0 and ral:1")
    dst = torch.zeros(2, device=DEVICES[0])
    with pytest.raises(RuntimeError, match="devices must match"):
        dst.set_(torch.ones(2, device=DEVICES[1]).storage())
    assert dst.cpu().tolist() == [0.0, 0.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("new_size", [10, 3, 0, 6])
def test_storage_resize_keeps_the_prefix_for_every_view_as_on_cpu(device, new_size):
    cpu = torch.arange(6, dtype=torch.float32) * 0.5
    t = cpu.to(device)
    view = t[1:]
    r_storage, c_storage = t.storage(), cpu.storage()
    assert r_storage.resize_(new_size) is c_storage.resize_(new_size) is None  # TypedStorage's answer
    assert (r_storage.size(), r_storage.nbytes()) == (c_storage.size(), c_storage.nbytes())
    assert view.storage().nbytes() == c_storage.nbytes()  # views see the resized buffer
    kept = min(6, new_size)
    assert r_storage.tolist()[:kept] == c_storage.tolist()[:kept]  # grown bytes: uninitialized
    if new_size:
        whole = torch.empty(0, device=device).set_(t.storage())
        whole.fill_(2.0)
        assert t.storage().tolist() == [2.0] * new_size


@pytest.mark.parametrize("device", DEVICES)
def test_storages_under_ral_mode(device):
    import pickle

    import torch_fl

    cpu = torch.arange(6, dtype=torch.float32) - 2.5
    t = cpu.to(device)
    with torch_fl.ral_mode(device):
        assert cpu.storage().is_ral is False and cpu.untyped_storage().is_ral is False
        assert cpu.storage().tolist() == cpu.tolist()
        rs = t.storage()
        assert rs.is_ral and rs.device == torch.device(device) and rs.tolist() == cpu.tolist()
        u = torch.empty(0, device=device).set_(rs, 2, (3,))
        u.mul_(2.0)
        assert type(rs) is torch.TypedStorage and pickle.loads(pickle.dumps(rs)).device == rs.device
    expected = cpu.clone()
    expected[2:5] *= 2.0
    torch.testing.assert_close(t.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_untyped_storages_under_ral_mode(device):
    import torch_fl

    cpu = torch.arange(6, dtype=torch.float32) + 0.5
    t = cpu.to(device)
    with torch_fl.ral_mode(device):
        assert cpu.untyped_storage().device.type == "cpu"  # CPU tensors keep CPU storages
        s = t.untyped_storage()
        assert s.device == torch.device(device) and s.data_ptr() == t.data_ptr()
        fresh = torch.UntypedStorage(24, device=device)
        u = torch.empty(0, device=device).set_(fresh, 0, (6,), (1,))
        u.copy_(t * 2)
        w = torch.empty(0, device=device).set_(s, 1, (2, 2), (2, 1))
        w.add_(10.0)
    assert fresh.device == torch.device(device)
    torch.testing.assert_close(torch.empty(0, device=device).set_(fresh, 0, (6,), (1,)).cpu(), cpu * 2)
    expected = cpu.clone()
    expected[1:5] += 10.0
    torch.testing.assert_close(t.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_storage_is_a_torch_typed_storage(device):
    cpu = torch.arange(6, dtype=torch.float64) * 0.5
    t = cpu.to(device)
    rs, cs = t[2:].storage(), cpu[2:].storage()
    assert type(rs) is type(cs) is torch.TypedStorage
    assert rs.dtype == torch.float64 and rs.device == torch.device(device) and rs.is_ral
    assert rs._untyped_storage._cdata == t.untyped_storage()._cdata and rs.data_ptr() == t.data_ptr()
    assert (rs.size(), rs.nbytes(), rs[5]) == (cs.size(), cs.nbytes(), cs[5])
    rs[0] = 9.0  # item writes reach the tensor, as on CPU
    cs[0] = 9.0
    torch.testing.assert_close(t.cpu(), cpu, rtol=0, atol=0)
    r = torch.tensor([], dtype=torch.float64, device=device).set_(rs, 1, (2, 2))
    c = torch.tensor([], dtype=torch.float64).set_(cs, 1, (2, 2))
    torch.testing.assert_close(r.cpu(), c, rtol=0, atol=0)
    assert rs.float().dtype == torch.float32 and rs.float().tolist() == cs.float().tolist()


@pytest.mark.parametrize("device", DEVICES)
def test_typed_storage_pickles_and_saves_as_on_cpu(device):
    import io
    import pickle

    cpu = torch.arange(5, dtype=torch.float32) - 1.5
    rs = cpu.to(device).storage()
    back = pickle.loads(pickle.dumps(rs))
    assert type(back) is torch.TypedStorage and back.device == torch.device(device)
    assert back.dtype == torch.float32 and back.tolist() == cpu.tolist() and back.data_ptr() != rs.data_ptr()
    f = io.BytesIO()
    torch.save({"s": rs}, f)
    for kwargs, where in [({}, device), ({"map_location": "cpu", "weights_only": True}, "cpu")]:
        f.seek(0)
        loaded = torch.load(f, **kwargs)["s"]
        assert type(loaded) is torch.TypedStorage and loaded.device == torch.device(where)
        assert loaded.tolist() == cpu.tolist()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("typed", [False, True], ids=["untyped", "typed"])
@pytest.mark.parametrize("geometry", [(), (1, (2,), (1,))], ids=["whole", "offset-size-stride"])
@pytest.mark.parametrize("call", ["method", "unbound"])
def test_set_to_a_cpu_storage_is_refused_as_on_cuda(device, typed, geometry, call):
    # CUDA refuses a CPU storage; an upload would silently drop the sharing set_ promises (a
    # write through the ral tensor never reaching the CPU tensor). torch.load's staged
    # checkpoint storages still upload (test_serialization.py).
    cpu = torch.arange(4.0)
    storage = cpu.storage() if typed else cpu.untyped_storage()
    dst = torch.zeros(2, device=device)
    set_ = dst.set_ if call == "method" else lambda *a: torch.Tensor.set_(dst, *a)
    with pytest.raises(RuntimeError, match=r'to a storage on different device "cpu".*devices must match'):
        set_(storage, *geometry)
    assert dst.shape == (2,) and dst.cpu().tolist() == [0.0, 0.0]  # unchanged, still usable
    assert cpu.tolist() == [0.0, 1.0, 2.0, 3.0]


def _copy_copy_facts(make):
    """What copy.copy of a tensor gives, for tensors `make(values)` builds on one device."""
    import copy

    base = make(torch.arange(4.0))
    base.tag = "kept"
    view = base[1:3]
    got = copy.copy(base)
    vgot = copy.copy(view)
    vgot.add_(10.0)  # a write through the copy of the view lands in base's storage
    graph = copy.copy(make(torch.arange(3.0)).requires_grad_() * 2)
    param = torch.nn.Parameter(make(torch.ones(2)))
    pgot = copy.copy(param)
    return (
        got.device,
        got.data_ptr() == base.data_ptr(),
        getattr(got, "tag", None),
        (vgot.shape, vgot.stride(), vgot.storage_offset()),
        base.cpu().tolist(),
        (graph.requires_grad, graph.is_leaf, graph.grad_fn),
        (isinstance(pgot, torch.nn.Parameter), pgot is param, pgot.data_ptr() == param.data_ptr()),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_copy_copy_shares_the_buffer_as_on_cpu(device):
    # copy.copy of a CPU or CUDA tensor is a new tensor over the same storage; a ral tensor's
    # came back as a CPU copy (copy.copy fell back to the pickling reduce)
    import torch_fl

    expected = _copy_copy_facts(lambda t: t)
    got = _copy_copy_facts(lambda t: t.to(device))
    assert got[0] == torch.device(device) and got[1:] == expected[1:]
    with torch_fl.ral_mode(device):
        in_mode = _copy_copy_facts(lambda t: t.to(device))
    assert in_mode == got


def _slice_facts(device):
    """set_ to storage slices (bytes 8..24 of an 8-float buffer, then a slice of that slice, a
    typed storage's slice, a geometry inside the slice, an untyped storage from the pool), a
    write through each, and what the whole storage then holds; plus CPU's errors."""
    t = torch.arange(8.0, device=device)
    s = t.untyped_storage()
    whole = torch.empty(0, device=device).set_(s[8:24])
    facts = {"whole": whole.to("cpu", copy=True), "shape": tuple(whole.shape)}
    whole.mul_(10)
    inner = torch.empty(0, device=device).set_(s[8:24][4:12])  # a slice of a slice
    facts["inner"] = inner.to("cpu", copy=True)
    inner.add_(1)
    part = torch.empty(0, device=device).set_(s[8:24], 1, (2,), (2,))
    facts["part"] = part.to("cpu", copy=True)
    typed = torch.empty(0, device=device).set_(t.untyped_storage()[24:32])
    facts["typed"] = typed.to("cpu", copy=True)
    facts["base"] = t.to("cpu", copy=True)
    pool = torch.UntypedStorage(16, device=device)
    torch.empty(0, dtype=torch.uint8, device=device).set_(pool).zero_()
    torch.empty(0, dtype=torch.uint8, device=device).set_(pool[4:12]).fill_(7)
    facts["pool"] = torch.empty(0, dtype=torch.uint8, device=device).set_(pool).to("cpu", copy=True)
    with pytest.raises(RuntimeError, match="not resizable"):  # reaching past the slice
        torch.empty(0, device=device).set_(s[8:24], 2, (3,), (1,))
    return facts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("style", ["to", "ral_mode"])
def test_set_to_a_storage_slice_views_its_bytes_as_on_cpu(device, style):
    """`t.set_(s[a:b])` (and with an offset/size/stride, of a slice of a slice) views the
    slice's bytes, and writes through it reach the original storage, as on CPU. Before, it
    raised RuntimeError ("does not start a block torch_fl allocated") on this test's slices."""
    import torch_fl

    want = _slice_facts("cpu")
    if style == "ral_mode":
        with torch_fl.ral_mode(device):
            got = _slice_facts(device)
    else:
        got = _slice_facts(device)
    assert got.keys() == want.keys()
    for k in want:
        if isinstance(want[k], torch.Tensor):
            assert got[k].device.type == "cpu"
            torch.testing.assert_close(got[k], want[k], rtol=0, atol=0, msg=k)
        else:
            assert got[k] == want[k], k


@pytest.mark.parametrize("device", DEVICES)
def test_set_to_a_misaligned_storage_slice_names_the_reason(device):
    """A slice starting inside an element (CPU reinterprets the shifted bytes) cannot be
    addressed in whole elements of the block: RuntimeError saying so; nothing else changes."""
    t = torch.arange(8.0, device=device)
    with pytest.raises(RuntimeError, match="not at a whole torch.float32 element"):
        torch.empty(0, device=device).set_(t.untyped_storage()[2:10])
    ok = torch.empty(0, dtype=torch.uint8, device=device).set_(t.untyped_storage()[2:10])  # bytes are whole
    assert ok.shape == (8,)
    torch.testing.assert_close(t.cpu(), torch.arange(8.0), rtol=0, atol=0)
