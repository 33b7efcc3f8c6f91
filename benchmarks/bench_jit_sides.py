"""Issue 13 item 5, the jit tier against what a user has, every side in its own fresh process:

- each op with a host vendor kernel (add, mul, exp, tanh, sigmoid, gelu) on 4M floats, forced
  to the jit tier vs left to the vendor kernel, on ral:0: both paths of the same device, so
  they alternate in blocks inside each fresh process (procs.paired), with an A/A control;
- the 6-op pointwise chain on 16M floats fused by `torch_fl.fuse()` on ral:0 vs eager CPU and
  vs `torch.compile` (Inductor) on CPU.

Sides "eager" and "inductor" are plain PyTorch processes (procs.PLAIN_SIDES: torch_fl is not
loaded); this module imports torch_fl only inside the ral sides.
"""

from __future__ import annotations

import os

import torch
from common import Result
from procs import alternate, median_ratio, paired

DEV = os.environ.get("BENCH_DEVICE", "ral:0")

OPS = {
    "add": ("aten::add.Tensor", lambda a, b: torch.add(a, b)),
    "mul": ("aten::mul.Tensor", lambda a, b: torch.mul(a, b)),
    "exp": ("aten::exp", lambda a, b: torch.exp(a)),
    "tanh": ("aten::tanh", lambda a, b: torch.tanh(a)),
    "sigmoid": ("aten::sigmoid", lambda a, b: torch.sigmoid(a)),
    "gelu": ("aten::gelu", lambda a, b: torch.nn.functional.gelu(a)),
}


_INPUTS: list = []


def _shared_inputs():
    """One pair of 4M-float inputs per process: paired sides must read the same buffers, or
    their placement (huge pages or not) differs by up to 10% between sides."""
    if not _INPUTS:
        torch.manual_seed(0)
        _INPUTS.extend((torch.randn(1 << 22).to(DEV), torch.randn(1 << 22).to(DEV)))
    return _INPUTS


def _op_side(name: str, tier: str):
    import torch_fl  # noqa: F401  (registers the ral device in this ral-side process)
    from torch_fl.dispatch import router

    op, fn = OPS[name]
    x, y = _shared_inputs()
    n = 5

    def run():
        for _ in range(n):
            fn(x, y)
        torch.ral.synchronize(DEV)

    def enter():  # route this side's op (the paired child runs both sides in one process)
        router.set_op_override(op, "jit" if tier == "jit" else None)

    return run, n, enter


def _small_side(tier: str):
    """A 16-float add, 2000 ops per sample: the per-op host cost of each tier's launch."""
    import torch_fl  # noqa: F401
    from torch_fl.dispatch import router

    x, y = torch.randn(16).to(DEV), torch.randn(16).to(DEV)
    n = 2000

    def run():
        for _ in range(n):
            torch.add(x, y)
        torch.ral.synchronize(DEV)

    def enter():
        router.set_op_override("aten::add.Tensor", "jit" if tier == "jit" else None)

    return run, n, enter


def chain(x, b):
    """Six pointwise ops: scale, bias, tanh-approximated gelu, scale, residual, sigmoid."""
    y = x * 0.5 + b
    y = torch.nn.functional.gelu(y, approximate="tanh")
    return torch.sigmoid(y * 2.0 - x)


def _chain_side(side: str):
    torch.manual_seed(0)
    x, b = torch.randn(4096, 4096), torch.randn(4096)
    if side == "eager":
        return (lambda: chain(x, b)), 1
    if side == "inductor":
        compiled = torch.compile(chain, backend="inductor")
        return (lambda: compiled(x, b)), 1
    import torch_fl

    rx, rb = x.to(DEV), b.to(DEV)

    def fused():
        with torch_fl.fuse():
            y = chain(rx, rb)  # kept alive: only live results are written
        torch.ral.synchronize(DEV)
        return y

    return fused, 1


SIDES = {
    f"jit_{name}": {t: (lambda name=name, t=t: _op_side(name, t)) for t in ("vendor", "jit", "vendor_twin")}
    for name in OPS
}
SIDES["small_add"] = {t: (lambda t=t: _small_side(t)) for t in ("vendor", "jit")}
SIDES["chain"] = {s: (lambda s=s: _chain_side(s)) for s in ("eager", "inductor", "fused")}


def _rounds() -> int:
    import common

    return common.ROUNDS


def jit_vs_vendor(dev: str) -> list[Result]:
    """4M floats per op: the forced jit tier vs the vendor kernel, paired in fresh processes
    (procs.paired), and an A/A control (the vendor kernel against itself) for the bias."""
    os.environ["BENCH_DEVICE"] = dev
    rows = []
    for name in [*OPS, "add (A/A control)"]:
        case, sides = (f"jit_{name}", ["vendor", "jit"]) if name in OPS else ("jit_add", ["vendor", "vendor_twin"])
        times = paired("bench_jit_sides", case, sides, _rounds())
        med = {s: sorted(v)[len(v) // 2] for s, v in times.items()}
        subject, base = sides[1], sides[0]
        label = f"4M {name}: jit vs vendor kernel" if name in OPS else f"4M {name}: vendor vs vendor"
        row = Result(label, dev, med[subject], "vendor kernel (same processes)", med[base])
        row.target = 1.05
        row.rounds_ratio = median_ratio(times, subject, base)
        row.note = f"{subject} {med[subject] * 1e3:.2f} ms, vendor {med[base] * 1e3:.2f} ms"
        rows.append(row)
    times = paired("bench_jit_sides", "small_add", ["vendor", "jit"], _rounds(), repeats=7)
    med = {s: sorted(v)[len(v) // 2] for s, v in times.items()}
    row = Result(
        "16-float add per op: jit vs vendor kernel", dev, med["jit"], "vendor kernel (same processes)", med["vendor"]
    )
    row.rounds_ratio = median_ratio(times, "jit", "vendor")
    row.note = f"jit {med['jit'] * 1e6:.1f} us, vendor {med['vendor'] * 1e6:.1f} us per op (host cost; no target)"
    rows.append(row)
    return rows


def fused_chain(dev: str) -> list[Result]:
    """The fused 6-op chain vs eager CPU and vs Inductor on CPU, each side in its own processes."""
    os.environ["BENCH_DEVICE"] = dev
    times = alternate("bench_jit_sides", "chain", ["eager", "inductor", "fused"], _rounds(), repeats=5)
    med = {s: sorted(v)[len(v) // 2] for s, v in times.items()}
    rows = []
    for base, target in (("eager", 0.5), ("inductor", 1.0)):
        row = Result("16M 6-op chain, fused", dev, med["fused"], f"{base} CPU (own process)", med[base], target)
        row.rounds_ratio = median_ratio(times, "fused", base)
        row.note = f"fused {med['fused'] * 1e3:.1f} ms, {base} {med[base] * 1e3:.1f} ms"
        rows.append(row)
    return rows


CASES = {"jit_vs_vendor": jit_vs_vendor, "jit_chain": fused_chain}
