"""Issue-2 cases: per-op dispatch, a large add, and nn.Linear(1024, 1024) on batch 2048."""

from __future__ import annotations

import torch
from common import Result, interleaved
from torch.utils._python_dispatch import TorchDispatchMode


class _EmptyMode(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def dispatch_overhead(dev: str) -> list[Result]:
    """(a) time per 16-element add: ral vs an empty TorchDispatchMode vs eager CPU."""
    n = 2000
    a, b = torch.randn(16), torch.randn(16)
    ra, rb = a.to(dev), b.to(dev)

    def eager():
        for _ in range(n):
            torch.add(a, b)

    def empty_mode():
        with _EmptyMode():
            for _ in range(n):
                torch.add(a, b)

    def ral():
        for _ in range(n):
            torch.add(ra, rb)
        torch.ral.synchronize()

    t = interleaved({"eager": eager, "mode": empty_mode, "ral": ral}, repeats=7)
    per = {k: v / n for k, v in t.items()}
    return [
        Result(
            "(a) 16-elem add, per op",
            f"{dev}",
            per["ral"],
            "empty TorchDispatchMode",
            per["mode"],
            2.0,
            note=f"ral {per['ral'] * 1e6:.1f} us, empty mode {per['mode'] * 1e6:.1f} us, eager {per['eager'] * 1e6:.1f} us",
        ),
        Result("(a) 16-elem add, per op", f"{dev}", per["ral"], "eager CPU", per["eager"], None),
    ]


def large_add(dev: str) -> list[Result]:
    """(b) 4096x4096 float32 add, synchronized, fresh output each time (as eager code does)."""
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    ra, rb = a.to(dev), b.to(dev)

    def cpu():
        torch.add(a, b)

    def ral():
        torch.add(ra, rb)
        torch.ral.synchronize()

    t = interleaved({"cpu": cpu, "ral": ral}, repeats=9, inner=3)
    return [Result("(b) 4096x4096 add", dev, t["ral"], "eager CPU", t["cpu"], 1.05)]


def linear_1024(dev: str) -> list[Result]:
    """(c) nn.Linear(1024,1024) on batch 2048, 100 iterations (source design: 4.4% overhead)."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 1024)
    x = torch.randn(2048, 1024)
    rlin = torch.nn.Linear(1024, 1024).to(dev)
    rlin.load_state_dict(lin.state_dict())
    rx = x.to(dev)
    iters = 100

    def cpu():
        with torch.no_grad():
            for _ in range(iters):
                lin(x)

    def ral():
        with torch.no_grad():
            for _ in range(iters):
                rlin(rx)
        torch.ral.synchronize()

    t = interleaved({"cpu": cpu, "ral": ral}, repeats=3, warmup=1)
    return [Result("(c) Linear(1024,1024) b=2048 x100", dev, t["ral"], "eager CPU", t["cpu"], 1.05)]


CASES = {"dispatch": dispatch_overhead, "large_add": large_add, "linear": linear_1024}
