"""Timing helpers shared by the benchmark cases: medians of repeats, ratios in one run."""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

ROUNDS = 5  # fresh-process rounds per case (run.py --rounds)


def cpu_model() -> str:
    """The host CPU's model name and the vector extensions eager CPU's kernels use (AVX-512,
    AMX): VMs here move between hosts, and a ratio is only comparable on the same CPU."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    isa = [f for f in ("avx2", "avx512f", "amx_bf16") if f in flags]
    return f"{name} ({os.cpu_count()} CPUs; {' '.join(isa) or 'no AVX2'})"


def thread_times() -> dict:
    """{(tid, name): (CPU s, run-queue wait s)} of this process's threads so far, from
    /proc/self/task/*/schedstat (nanoseconds; the wait is time runnable with no core free),
    or from /proc stat's clock ticks (no wait: 0.0) where the kernel keeps no schedstat."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir("/proc/self/task"):
        task = f"/proc/self/task/{tid}"
        try:
            with open(f"{task}/stat") as f:
                stat = f.read()
        except FileNotFoundError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        try:
            with open(f"{task}/schedstat") as f:
                cpu_ns, queued_ns, _ = map(int, f.read().split())
            out[(tid, name)] = (cpu_ns / 1e9, queued_ns / 1e9)
        except (OSError, ValueError):
            fields = stat[stat.rindex(")") + 2 :].split()
            out[(tid, name)] = ((int(fields[11]) + int(fields[12])) / tick, 0.0)
    return out


def autocast(device_type: str, amp):
    """torch.autocast(device_type) to dtype `amp`, or nothing when `amp` is None."""
    import torch

    return torch.autocast(device_type, dtype=amp) if amp is not None else contextlib.nullcontext()


@dataclass
class Result:
    """One benchmark row: a case, its baseline, and the ratio between them."""

    case: str
    subject: str
    subject_s: float
    baseline: str
    baseline_s: float
    target: float | None = None
    note: str = ""
    rounds_ratio: float | None = None  # median of per-round ratios (separate processes)

    @property
    def ratio(self) -> float:
        if self.rounds_ratio is not None:
            return self.rounds_ratio
        return self.subject_s / self.baseline_s

    @property
    def meets_target(self) -> bool | None:
        return None if self.target is None else self.ratio <= self.target


def median_time(fn, *, repeats: int = 7, warmup: int = 2, inner: int = 1) -> float:
    """Median seconds per call of fn (each sample runs fn `inner` times)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def interleaved(fns: dict, *, repeats: int = 7, warmup: int = 2, inner: int = 1) -> dict:
    """Median time of several functions sampled alternately, so drift hits all alike."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[k].append((time.perf_counter() - t0) / inner)
    return {k: statistics.median(v) for k, v in samples.items()}
