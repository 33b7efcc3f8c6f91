"""Capability: the MemoryPool as seen from torch (stats, caching, limits, OOM)."""

import gc

import pytest
import torch
from conftest import run_python

import torch_fl


@pytest.fixture
def settled_pool():
    """Exact counter checks: free earlier tests' cyclic garbage and drain the streams first, and
    keep the collector off meanwhile, so no unrelated tensor is freed between two readings."""
    gc.collect()
    torch.ral.synchronize()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_stats_track_allocations(dev, settled_pool):
    base = torch.ral.memory_allocated(dev)
    t = torch.empty(1024, 1024, device=dev)
    assert torch.ral.memory_allocated(dev) - base >= 4 * 1024 * 1024
    assert torch.ral.max_memory_allocated(dev) >= torch.ral.memory_allocated(dev)
    assert torch.ral.memory_reserved(dev) >= torch.ral.memory_allocated(dev)
    del t
    assert torch.ral.memory_allocated(dev) == base
    stats = torch.ral.memory_stats(dev)
    assert stats["allocation.all.allocated"] >= 1


def test_freed_blocks_are_reused(dev):
    a = torch.empty(3000, device=dev)
    del a
    hits = torch.ral.memory_stats(dev)["cache_hits"]
    b = torch.empty(3000, device=dev)
    assert torch.ral.memory_stats(dev)["cache_hits"] == hits + 1
    del b
    torch.ral.empty_cache()
    assert torch.ral.memory_stats(dev)["cached_blocks"] == 0


def test_buffer_reallocate_is_shared_by_views_and_accounted(dev, settled_pool):
    # FSDP2 resizes storages to 0 and back in place; every view must see the new block.
    torch.ral.synchronize()
    base = torch.ral.memory_allocated(dev)
    t = torch.zeros(1024, device=dev)
    view = t[512:]
    buf = t._buf
    assert view._buf is buf
    buf.reallocate(0, 0)
    assert buf.nbytes == 0 and torch.ral.memory_allocated(dev) == base
    buf.reallocate(4096, 0)
    assert buf.nbytes == 4096 and torch.ral.memory_allocated(dev) - base >= 4096
    t.fill_(3.0)
    torch.testing.assert_close(view.cpu(), torch.full((512,), 3.0), rtol=0, atol=0)
    del t, view, buf
    torch.ral.synchronize()
    assert torch.ral.memory_allocated(dev) == base


def test_out_of_memory_is_specific_and_recoverable():
    res = run_python(
        """
        import torch, torch_fl
        keep = torch.arange(1000.0, device="ral:0")
        chunks = [torch.empty(16 * 2**20, dtype=torch.uint8, device="ral:0") for _ in range(3)]
        try:
            more = torch.empty(64 * 2**20, dtype=torch.uint8, device="ral:0")
        except torch_fl.OutOfMemoryError as exc:
            assert isinstance(exc, torch.OutOfMemoryError)
            msg = str(exc)
            assert "RAL_ERROR_OUT_OF_MEMORY" in msg, msg
        else:
            raise SystemExit("no OOM")
        assert keep.sum().item() == sum(range(1000)), "other tensors must survive"
        del chunks
        ok = torch.empty(40 * 2**20, dtype=torch.uint8, device="ral:0")  # works again once freed
        print("OK", torch.ral.memory_stats()["num_ooms"])
        """,
        env={"TORCH_FL_MEMORY_LIMIT": "100MB"},
    )
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert "OK" in res.stdout


def test_set_memory_limit_api(dev):
    try:
        torch.ral.empty_cache()
        limit = torch.ral.memory_reserved(dev) + 8 * 2**20
        torch.ral.set_memory_limit(limit, dev)
        try:
            torch.empty(16 * 2**20, dtype=torch.uint8, device=dev)
        except torch_fl.OutOfMemoryError:
            pass
        else:
            raise AssertionError("limit not enforced")
        small = torch.ones(10, device=dev)
        assert small.sum().item() == 10
    finally:
        torch.ral.set_memory_limit(0, dev)


def test_mem_get_info(dev):
    """(free, total) as torch.cuda.mem_get_info: total is the device's memory or the pool
    limit, free shrinks by what the pool reserves."""
    index = torch.device(dev).index
    total = torch.ral.get_device_properties(index).total_memory
    free, reported = torch.ral.mem_get_info(dev)
    assert reported == total and 0 <= free <= total
    assert free == total - torch.ral.memory_reserved(dev)
    try:
        torch.ral.set_memory_limit(64 << 20, dev)
        keep = torch.empty(4 << 20, device=dev)  # 16 MiB
        free, reported = torch.ral.mem_get_info(dev)
        assert reported == 64 << 20
        assert free == reported - torch.ral.memory_reserved(dev) and free <= (64 << 20) - keep.numel() * 4
    finally:
        torch.ral.set_memory_limit(0, dev)


@pytest.mark.parametrize("device", [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))])
def test_torch_accelerator_memory_functions(device, settled_pool):
    """torch.accelerator's memory functions read the MemoryPool (guard/ral_allocator.cpp)."""
    from torch_fl.device import guard

    if guard._allocator is None:
        pytest.skip("the DeviceAllocator shim could not be built against this torch (see load_allocator)")
    index = torch.device(device).index
    torch.accelerator.empty_cache()
    before = torch.accelerator.memory_allocated(index)
    assert before == torch.ral.memory_allocated(device)
    keep = torch.empty(1 << 18, device=device)  # 1 MiB
    assert torch.accelerator.memory_allocated(index) == before + keep.numel() * 4
    assert torch.accelerator.memory_reserved(index) == torch.ral.memory_reserved(device)
    stats = torch.accelerator.memory_stats(index)
    assert stats["allocated_bytes.all.current"] == torch.ral.memory_stats(device)["allocated_bytes.all.current"]
    assert stats["allocation.all.current"] >= 1 and stats["num_device_alloc"] >= 1
    del keep
    assert torch.accelerator.max_memory_allocated(index) >= before + (1 << 20)
    torch.accelerator.reset_peak_memory_stats(index)
    assert torch.accelerator.max_memory_allocated(index) == torch.accelerator.memory_allocated(index) == before
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved(index) == torch.ral.memory_reserved(device)
    assert torch.accelerator.get_memory_info(index) == torch.ral.mem_get_info(device)
    with pytest.raises(NotImplementedError, match="keeps its allocation counters"):
        torch.accelerator.reset_accumulated_memory_stats(index)
    now = torch.accelerator.memory_allocated(index)
    storage = torch.UntypedStorage(1024, device=device)  # c10 storages come from the pool too
    assert torch.accelerator.memory_allocated(index) == now + 1024
    del storage
    assert torch.accelerator.memory_allocated(index) == now
    after = torch.ones(4, device=device) * 2  # the device still works
    assert after.cpu().tolist() == [2.0, 2.0, 2.0, 2.0]


def test_allocator_shim_build_failure_costs_only_the_statistics(tmp_path):
    """A torch whose DeviceAllocator interface the shim does not match: the build fails, the
    failure is remembered (no compiler run in the next process), and everything else works."""
    cxx = tmp_path / "cxx"
    cxx.write_text(
        '#!/bin/sh\ncase "$*" in *ral_allocator.cpp*) echo "simulated mismatch" >&2; exit 1;; esac\nexec g++ "$@"\n'
    )
    cxx.chmod(0o755)
    code = """
import torch, torch_fl
from torch_fl.device import guard
failed = guard._shim_path(guard._ALLOCATOR_SOURCE).with_suffix(".failed")
print("installed", guard._allocator is not None, "marker", failed.exists())
print("simulated mismatch" in failed.read_text())
x = torch.ones(3, device="ral:0") + 1
print("works", x.cpu().tolist())
try:
    torch.accelerator.memory_allocated(0)
except RuntimeError as e:
    print("torch error", "not a DeviceAllocator" in str(e))
"""
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "CXX": str(cxx)}
    first = run_python(code, env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == "installed False marker True True works [2.0, 2.0, 2.0] torch error True".split()
    cxx.write_text("#!/bin/sh\necho compiler-ran >> " + str(tmp_path / "log") + '\nexec g++ "$@"\n')
    second = run_python(code, env=env)
    assert second.returncode == 0, second.stderr
    assert "installed False marker True" in second.stdout
    assert not (tmp_path / "log").exists()  # the guard was cached and the failure remembered
