"""Contract: torch.ral covers what ported torch.cuda code calls; docs/cuda_api_map.md lists
every public torch.cuda name with its torch.ral counterpart or the reason it has none."""

import re
import warnings
from pathlib import Path

import pytest
import torch

DEVICES = list(range(min(2, torch.ral.device_count())))
MAP = Path(__file__).resolve().parents[2] / "docs" / "cuda_api_map.md"


def _map_rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in MAP.read_text().splitlines():
        m = re.match(r"\|\s*`([A-Za-z_0-9]+)`\s*\|\s*(.*?)\s*\|\s*(.*?)\s*\|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_cuda_api_map_lists_every_public_torch_cuda_name():
    rows = _map_rows()
    missing = sorted(set(torch.cuda.__all__) - set(rows))
    assert not missing, f"docs/cuda_api_map.md lacks rows for: {missing}"
    for name, (counterpart, reason) in rows.items():
        if counterpart == "`torch.ral`":
            assert reason, f"{name}: say which torch.ral functions stand for it"
        elif counterpart.startswith("`torch.ral."):
            attr = counterpart.strip("`").removeprefix("torch.ral.")
            assert hasattr(torch.ral, attr), f"{name}: the map names torch.ral.{attr}, which does not exist"
        else:
            assert counterpart in ("—", "") or counterpart.startswith("`torch."), (name, counterpart)
            assert reason, f"{name}: no counterpart and no reason"


@pytest.mark.parametrize("idx", DEVICES)
def test_memory_reports(idx):
    x = torch.ones(1 << 16, device=f"ral:{idx}")
    flat = torch.ral.memory_stats(idx)
    nested = torch.ral.memory_stats_as_nested_dict(idx)
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] >= x.nbytes
    text = torch.ral.memory_summary(idx)
    assert f"ral:{idx}" in text and "Allocated memory" in text
    snap = torch.ral.memory_snapshot()
    seg = next(s for s in snap if s["device"] == idx)
    assert seg["allocated_size"] >= x.nbytes and seg["total_size"] >= seg["allocated_size"]
    torch.ral.reset_accumulated_memory_stats(idx)
    assert torch.ral.memory_stats(idx)["allocation.all.allocated"] == 0
    y = torch.ones(8, device=f"ral:{idx}") + 1
    assert torch.ral.memory_stats(idx)["allocation.all.allocated"] >= 1
    assert torch.ral.memory_allocated(idx) >= x.nbytes + y.nbytes  # live figures untouched


@pytest.mark.parametrize("idx", DEVICES)
def test_per_process_memory_fraction_is_enforced(idx):
    dev = f"ral:{idx}"
    total = torch.ral.get_device_properties(idx).total_memory
    assert torch.ral.get_per_process_memory_fraction(idx) == 1.0
    torch.ral.empty_cache()
    frac = (torch.ral.memory_reserved(idx) + (64 << 20)) / total  # room for ~64 MiB more
    torch.ral.set_per_process_memory_fraction(frac, idx)
    try:
        assert abs(torch.ral.get_per_process_memory_fraction(idx) - frac) < 1e-6
        small = torch.ones(1 << 20, device=dev)  # 4 MiB fits
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(256 << 20, dtype=torch.uint8, device=dev)  # 256 MiB does not
        assert (small + 1).sum().item() == 2 * (1 << 20)  # the process keeps working
    finally:
        torch.ral.set_per_process_memory_fraction(1.0, idx)
    assert torch.ral.get_per_process_memory_fraction(idx) == 1.0
    with pytest.raises(ValueError, match="Allowed range"):
        torch.ral.set_per_process_memory_fraction(1.5, idx)
    with pytest.raises(TypeError, match="float"):
        torch.ral.set_per_process_memory_fraction(1, idx)


def test_peer_access_and_device_of():
    n = torch.ral.device_count()
    assert torch.ral.can_device_access_peer(0, n - 1) is False
    with pytest.raises(RuntimeError, match="does not exist"):
        torch.ral.can_device_access_peer(0, n)
    for idx in DEVICES:
        t = torch.ones(2, device=f"ral:{idx}")
        torch.ral.set_device(0)
        with torch.ral.device_of(t):
            assert torch.ral.current_device() == idx
            assert torch.zeros(1, device="ral").device == t.device
        assert torch.ral.current_device() == 0
    with torch.ral.device_of(torch.ones(2)):  # a CPU tensor: no change
        assert torch.ral.current_device() == 0


def test_external_stream_says_why_not():
    with pytest.raises(NotImplementedError, match="cannot adopt a native queue"):
        torch.ral.ExternalStream(0)


@pytest.fixture
def _sync_mode_off():
    yield
    torch.ral.set_sync_debug_mode(0)


@pytest.mark.parametrize("idx", DEVICES)
def test_sync_debug_mode(idx, _sync_mode_off):
    dev = f"ral:{idx}"
    x = torch.arange(10.0, device=dev)
    assert torch.ral.get_sync_debug_mode() == 0
    torch.ral.set_sync_debug_mode("warn")
    assert torch.ral.get_sync_debug_mode() == 1
    for implicit in (lambda: x.sum().item(), lambda: x.cpu(), lambda: str(x), lambda: torch.nonzero(x > 3)):
        with pytest.warns(UserWarning, match="called a synchronizing ral operation"):
            implicit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # explicit waits never report
        torch.ral.synchronize(idx)
        torch.ral.current_stream(idx).synchronize()
        torch.accelerator.synchronize(idx)
        y = x * 2  # queued work does not wait
    torch.ral.set_sync_debug_mode(2)
    with pytest.raises(RuntimeError, match="synchronizing ral operation"):
        y.sum().item()
    torch.ral.set_sync_debug_mode("default")
    assert y.sum().item() == 90.0
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.ral.set_sync_debug_mode("loud")
    with pytest.raises(RuntimeError, match="invalid value of debug_mode"):
        torch.ral.set_sync_debug_mode(5)
