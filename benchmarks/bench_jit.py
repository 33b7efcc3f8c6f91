"""Issue-7 cases, in one process (one device, tier against tier): jit first compile and warm
call, jit vs the cpu tier for ops without vendor kernels. The jit-vs-vendor and fused-chain
cases run each side in its own process: bench_jit_sides.py."""

from __future__ import annotations

import os
import tempfile
import time

import torch
from common import Result, interleaved, median_time

from torch_fl.dispatch import router
from torch_fl.jit import kernel_cache

# Ops with no vendor kernel on the host or OpenCL plugins (manifests/*.json).
NO_VENDOR = {"atan2": torch.atan2, "hypot": torch.hypot, "logaddexp": torch.logaddexp, "expm1": torch.expm1}


def _sync():
    torch.ral.synchronize()


def first_compile(dev: str) -> list[Result]:
    """First call of a never-seen kernel with a cold disk cache, then a warm call."""
    old = os.environ.get("XDG_CACHE_HOME")
    tmp = tempfile.mkdtemp(prefix="torch_fl_bench_")
    os.environ["XDG_CACHE_HOME"] = tmp  # the plugins read it at each compile
    kernel_cache.clear()
    router.set_op_override("aten::copysign.Tensor", "jit")
    try:
        a = torch.randn(1024).to(dev)
        b = torch.randn(1024).to(dev)
        _sync()
        c0 = kernel_cache.STATS["compile_s"]
        t0 = time.perf_counter()
        torch.copysign(a, b)
        _sync()
        first = time.perf_counter() - t0
        compile_s = kernel_cache.STATS["compile_s"] - c0
        kernel_cache.clear()  # a new process: in-memory handles gone, disk cache warm
        t0 = time.perf_counter()
        torch.copysign(a, b)
        _sync()
        disk = time.perf_counter() - t0
        warm = interleaved({"w": lambda: (torch.copysign(a, b), _sync())}, repeats=9, inner=50)["w"]
    finally:
        router.set_op_override("aten::copysign.Tensor", None)
        if old is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = old
    return [
        Result(
            "jit first compile (cold disk cache)",
            dev,
            compile_s,
            "source design 800 ms",
            0.8,
            1.0,
            note=f"compile {compile_s * 1e3:.0f} ms; whole first call {first * 1e3:.0f} ms (incl. torch's one-time "
            f"meta/dynamo import); from disk cache {disk * 1e3:.1f} ms; warm {warm * 1e6:.0f} us",
        ),
        Result("jit warm call, 1K copysign", dev, warm, "first call", first, None, note=f"{warm * 1e6:.0f} us"),
    ]


def _time_per_tier(op: str, call, tiers) -> dict:
    """Seconds per synchronized call of `call` with `op` forced to each tier in turn (the
    override is set for a whole sample, so switching costs nothing per call)."""
    times = {}
    for tier in tiers:
        router.set_op_override(op, tier)
        try:
            times[tier] = median_time(lambda: (call(), _sync()), repeats=7, inner=5)
        finally:
            router.set_op_override(op, None)
    return times


def jit_vs_cpu(dev: str) -> list[Result]:
    """Ops without vendor kernels on 1M floats: jit tier vs the cpu tier (both forced)."""
    x = torch.rand(1 << 20) + 0.5
    y = torch.rand(1 << 20) + 0.5
    rx, ry = x.to(dev), y.to(dev)
    rows = []
    for name, fn in NO_VENDOR.items():
        args = (rx,) if name == "expm1" else (rx, ry)
        op = "aten::" + name
        times = _time_per_tier(op, lambda fn=fn, args=args: fn(*args), ("jit", "cpu"))
        rows.append(
            Result(
                f"1M {name}: jit vs cpu tier",
                dev,
                times["jit"],
                "cpu tier",
                times["cpu"],
                1.0,
                note=f"jit {times['jit'] * 1e3:.2f} ms, cpu tier {times['cpu'] * 1e3:.2f} ms",
            )
        )
    return rows


def jit(dev: str) -> list[Result]:
    """Every issue-7 row."""
    return first_compile(dev) + jit_vs_cpu(dev)


CASES = {"jit": jit}
