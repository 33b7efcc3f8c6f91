"""Issue-6 cases: the cost of the unified trace, off (a branch per hook) and on (GPT-2-shaped forward)."""

from __future__ import annotations

import tempfile
import timeit
from pathlib import Path

import torch
from common import Result, interleaved
from models import gpt2, gpt2_ids

import torch_fl
from torch_fl.device import memory, sync
from torch_fl.dispatch import entry as dispatch


def _hooks_empty() -> bool:
    return not (dispatch.OBSERVERS or memory.ALLOC_OBSERVERS or sync.SYNC_OBSERVERS)


def trace_off_branch(dev: str) -> list[Result]:
    """Tracing off: per op, the three hook checks (empty lists) against the op they guard."""
    a, b = torch.randn(16, device=dev), torch.randn(16, device=dev)
    n = 2000

    def ops():
        for _ in range(n):
            torch.add(a, b)
        torch.ral.synchronize()

    assert _hooks_empty()
    per_op = interleaved({"ops": ops}, repeats=7)["ops"] / n
    # The exact checks dispatch.route, memory.allocate and sync.synchronize run when off.
    checks = "if not O: pass\nif A: pass\nif S: pass"
    env = {"O": dispatch.OBSERVERS, "A": memory.ALLOC_OBSERVERS, "S": sync.SYNC_OBSERVERS}
    per_check = min(timeit.repeat(checks, globals=env, number=200_000, repeat=5)) / 200_000
    return [
        Result(
            "(trace) off: hook checks per op",
            "3 empty-list tests",
            per_check,
            "16-elem add, tracing off",
            per_op,
            0.01,
            note=f"{per_check * 1e9:.0f} ns of {per_op * 1e6:.1f} us per op",
        )
    ]


def trace_per_op(dev: str) -> list[Result]:
    """Tracing on: per-op cost on a tiny op, where the recorder's share is largest."""
    a, b = torch.randn(16, device=dev), torch.randn(16, device=dev)
    n = 2000
    tmp = Path(tempfile.mkdtemp())

    def run():
        for _ in range(n):
            torch.add(a, b)
        torch.ral.synchronize()

    def traced():
        with torch_fl.trace(tmp / "ops.json"):
            run()

    t = interleaved({"off": run, "on": traced}, repeats=5)
    assert _hooks_empty()
    return [
        Result(
            "(trace) 16-elem add, per op",
            "tracing on",
            t["on"] / n,
            "tracing off",
            t["off"] / n,
            None,
            note=f"+{(t['on'] - t['off']) / n * 1e6:.1f} us per op (op event + alloc/free + counters)",
        )
    ]


def trace_gpt2(dev: str) -> list[Result]:
    """Tracing on: GPT-2-shaped forward (4 layers, 256 wide, batch 4x128); target <= 1.15x."""
    model = gpt2(head=False).eval().to(dev)
    ids = gpt2_ids().to(dev)
    tmp = Path(tempfile.mkdtemp())

    def forward():
        with torch.no_grad():
            model(ids)
        torch.ral.synchronize()

    def traced():
        with torch_fl.trace(tmp / "gpt2.json"):
            forward()

    t = interleaved({"off": forward, "on": traced}, repeats=7, warmup=2)
    assert _hooks_empty()
    with torch_fl.trace(tmp / "gpt2.json") as tr:
        forward()
    events = tr.recorder.events_written
    return [
        Result(
            "(trace) GPT-2 fwd 4x256, batch 4x128",
            "tracing on",
            t["on"],
            "tracing off",
            t["off"],
            1.15,
            note=f"{t['off'] * 1e3:.1f} ms off, {t['on'] * 1e3:.1f} ms on, {events} events per forward",
        )
    ]


def trace_cases(dev: str) -> list[Result]:
    """All trace rows."""
    return trace_off_branch(dev) + trace_per_op(dev) + trace_gpt2(dev)


CASES = {"trace": trace_cases}
