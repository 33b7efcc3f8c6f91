"""Per-device Philox RNG state: (seed, offset). Kernels get [seed, offset] and derive counters."""

from __future__ import annotations

import threading

import torch

_lock = threading.Lock()
_DEFAULT_SEED = 67280421310721
_state: dict[int, list[int]] = {}
_seed_all = [_DEFAULT_SEED]  # the seed of every device not seeded on its own since


def _st(dev: int) -> list[int]:
    st = _state.get(dev)
    if st is None:
        st = _state[dev] = [_seed_all[0], 0]
    return st


def manual_seed_all(seed: int) -> None:
    """Seed every device, present or not yet initialised (torch.manual_seed calls this at any
    time, even in CPU-only scripts, so it must not need the device count)."""
    with _lock:
        _seed_all[0] = int(seed) % (1 << 63)
        _state.clear()


def next_philox(dev: int, numel: int) -> list[int]:
    """Reserve `numel` random values on a device; returns [seed, offset] for the kernel."""
    with _lock:
        st = _st(dev)
        seed, offset = st
        # Philox yields 4 values per counter; keep offsets counter-aligned.
        st[1] = offset + ((max(numel, 1) + 3) // 4) * 4
        return [seed, offset]


def manual_seed(dev: int, seed: int) -> None:
    """Seed one device."""
    with _lock:
        _state[dev] = [int(seed) % (1 << 63), 0]


def seed_of(dev: int) -> int:
    """Current seed of a device."""
    return _st(dev)[0]


def get_state(dev: int) -> torch.Tensor:
    """The RNG state of a device as a uint8 CPU tensor (16 bytes: seed, offset)."""
    seed, offset = _st(dev)
    with torch._C.DisableTorchFunction():  # a CPU state even when called inside ral_mode
        return torch.tensor([seed, offset], dtype=torch.int64, device="cpu").view(torch.uint8).clone()


def set_state(dev: int, state: torch.Tensor) -> None:
    """Restore a state from get_state."""
    with torch._C.DisableTorchFunction():
        seed, offset = state.cpu().clone().view(torch.int64).tolist()
    with _lock:
        _state[dev] = [seed, offset]
