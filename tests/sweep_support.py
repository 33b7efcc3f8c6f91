"""Shared by the database sweeps (test_opinfo, test_module_db, test_optim_db): which devices
they run on, the stable CI sample, and the strict-xfail check."""

from __future__ import annotations

import zlib

import pytest
import torch

DEVICES = ("ral:0", "ral:1")


def sampled(key: str, one_in: int) -> bool:
    """A stable 1/one_in of the keys (a hash, so the CI sample never changes between runs)."""
    return zlib.crc32(key.encode()) % one_in == 0


def need_device(dev: str) -> None:
    """Skip (saying why) when the device is not present on this machine."""
    idx = int(dev.split(":")[1])
    if torch.ral.device_count() <= idx:
        pytest.skip(f"{dev} is not present: its plugin was not built or found no device (run .ci/setup.sh)")


def xfail_reason(xfails: dict, dev: str, style: str, key: str) -> str | None:
    """The reason a case is expected to fail: keys are "[<dev>/]<style or *>:<key>", an entry
    without a device applying to both devices."""
    for k in (f"{dev}/{style}:{key}", f"{dev}/*:{key}", f"{style}:{key}", f"*:{key}"):
        if k in xfails:
            return xfails[k]
    return None


def check(result, xfails: dict, dev: str, xfail_file: str, capped: bool = False) -> None:
    """Pass iff the case passed, or failed as a listed strict xfail (a fixed one must be removed;
    a "flaky:" one may pass).
    `capped`: the run checked only the first samples, so an xfail may fail beyond them."""
    reason = xfail_reason(xfails, dev, result.style, result.key)
    if reason is not None and reason.startswith("flaky:") and result.passed:
        return  # a wrong result some runs do not show (see the reason): passing is allowed
    if reason is not None and capped and result.passed:
        pytest.skip(f"its expected failure lies beyond the samples CI runs (the full sweep checks it): {reason}")
    if reason is not None:
        assert not result.passed, (
            f"{dev} {result.key} ({result.style}) now passes: remove it from tests/{xfail_file} ({reason})"
        )
        pytest.xfail(f"{reason} [{result.error}]")
    assert result.passed, f"{dev} {result.key} ({result.style}): {result.error}"


def column_major(t):
    """t with the same shape and values, its last two dimensions stored column-major (dense,
    not contiguous); other values unchanged."""
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.layout != torch.strided:
        return t
    return t.detach().transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_(t.requires_grad)


def strided_view(t, how: str = "slice"):
    """t's values in a non-dense view: every other element of a longer last dim past a
    storage offset ("slice"), or one row of a broadcast (stride-0) tensor ("expand")."""
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or t.layout != torch.strided or t.numel() == 0:
        return t
    if how == "slice":
        big = torch.zeros(*t.shape[:-1], 2 * t.shape[-1] + 1, dtype=t.dtype)
        v = big[..., 1::2]
        v.copy_(t.detach())
    else:
        v = t.detach().unsqueeze(0).expand(2, *t.shape)[1]
    return v.requires_grad_(t.requires_grad) if t.is_floating_point() or t.is_complex() else v


# Where a device's result layout differs from CPU's because PyTorch itself takes another path
# off CPU (CUDA gives the same as ral), or because PyTorch's own decomposition, which the
# decomp tier runs, orders dims otherwise than its CPU kernel.
LAYOUT_AS_OFF_CPU = {
    "nn.functional.one_hot": "one_hot's non-CPU branch compares against an arange (as on CUDA)",
    "nn.functional.max_pool1d": "CPU has a max_pool1d fast path; off CPU it is max_pool2d of an unsqueezed input",
    "ldexp": "torch._decomp's ldexp (self * pow(2, other)) orders broadcast dims unlike CPU's kernel",
    "nn.functional.conv*": "a convolution's layout is its backend's: row-major for a PrivateUse1 device "
    "(ConvBackend::Overrideable), which torch.compile's fake tensors expect; CPU's mkldnn keeps the input's",
}


def layout_off_cpu(name: str) -> bool:
    """Whether op_db op `name` is laid out as PyTorch lays it out off CPU (LAYOUT_AS_OFF_CPU)."""
    return name in LAYOUT_AS_OFF_CPU or any(k.endswith("*") and name.startswith(k[:-1]) for k in LAYOUT_AS_OFF_CPU)
