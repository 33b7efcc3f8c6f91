"""Philox RNG state (seed, offset) per generator. Kernels get [seed, offset] and derive counters.

A device's default state is its default C++ generator's (guard shim: the one PyTorch's hooks
return), read and advanced here in place, so torch.ral.manual_seed and PyTorch agree; without
the shim it is a buffer of our own. A `torch.Generator(device="ral:N")` holds its own pair,
reached through its public initial_seed/get_offset/set_offset.
"""

from __future__ import annotations

import threading

import torch

from torch_fl._native import ffi
from torch_fl.device import guard

_lock = threading.Lock()
_DEFAULT_SEED = 67280421310721
_state: dict[int, object] = {}  # device -> uint64_t[2] (seed, offset)
_seed_all = [_DEFAULT_SEED]  # the seed of every device not seeded on its own since


def _st(dev: int):
    st = _state.get(dev)
    if st is None:
        addr = guard.default_rng_state(dev)  # creates a generator object; loads no plugin
        st = ffi.cast("uint64_t *", addr) if addr else ffi.new("uint64_t[2]")
        st[0], st[1] = _seed_all[0], 0
        st = _state.setdefault(dev, st)
    return st


def manual_seed_all(seed: int) -> None:
    """Seed every device, present or not yet initialised (torch.manual_seed calls this at any
    time, even in CPU-only scripts, so it must not need the device count)."""
    with _lock:
        _seed_all[0] = int(seed) & ((1 << 64) - 1)
        for st in _state.values():
            st[0], st[1] = _seed_all[0], 0


def _reserve(numel: int) -> int:
    # Philox yields 4 values per counter; keep offsets counter-aligned.
    return ((max(numel, 1) + 3) // 4) * 4


def next_philox(dev: int, numel: int, gen=None) -> list[int]:
    """Reserve `numel` random values of `gen` (None: the device's default generator);
    returns [seed, offset] for the kernel. A generator of another device type raises."""
    if gen is None:
        with _lock:
            st = _st(dev)
            seed, offset = st[0], st[1]
            st[1] = offset + _reserve(numel)
        return [_signed(seed), offset]
    if gen.device.type != "ral":
        raise RuntimeError(f"Expected a 'ral' device type for generator but found '{gen.device.type}'")
    with _lock:
        seed, offset = gen.initial_seed(), gen.get_offset()
        gen.set_offset(offset + _reserve(numel))
    return [_signed(seed), offset]


def _signed(v: int) -> int:
    # the kernel ABI passes int64 scalars; a full 64-bit seed wraps (its bits are kept)
    return v - (1 << 64) if v >= 1 << 63 else v


def manual_seed(dev: int, seed: int) -> None:
    """Seed one device."""
    with _lock:
        st = _st(dev)
        st[0], st[1] = int(seed) & ((1 << 64) - 1), 0


def seed_of(dev: int) -> int:
    """Current seed of a device."""
    return int(_st(dev)[0])


def get_state(dev: int) -> torch.Tensor:
    """The RNG state of a device as a uint8 CPU tensor (16 bytes: seed, offset)."""
    st = _st(dev)
    with torch._C.DisableTorchFunction():  # a CPU state even when called inside ral_mode
        return torch.tensor([_signed(st[0]), st[1]], dtype=torch.int64, device="cpu").view(torch.uint8).clone()


def set_state(dev: int, state: torch.Tensor) -> None:
    """Restore a state from get_state."""
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor")
    if state.numel() != 16:
        raise ValueError(f"ral RNG state must hold 16 bytes (seed, offset), got {state.numel()}")
    with torch._C.DisableTorchFunction():
        seed, offset = state.cpu().clone().view(torch.int64).tolist()
    with _lock:
        st = _st(dev)
        st[0], st[1] = seed & ((1 << 64) - 1), offset


# Values a CPU-kernel random op reserves: it draws from a CPU generator seeded from the ral
# generator's (seed, offset), so any advance gives the next call a fresh, reproducible stream.
_CPU_DRAW = 4


def cpu_generator(dev: int, gen=None) -> torch.Generator:
    """A CPU generator for a random op that runs on PyTorch's CPU kernel, seeded from `gen`
    (None: the device's default generator) and advancing it, so ral seeding (torch.ral.
    manual_seed, torch.Generator(device="ral:N"), fork_rng) reproduces those ops too."""
    seed, offset = next_philox(dev, _CPU_DRAW, gen)
    g = torch.Generator()
    g.manual_seed(((seed & ((1 << 64) - 1)) ^ (offset * 0x9E3779B97F4A7C15)) & ((1 << 63) - 1))
    return g
