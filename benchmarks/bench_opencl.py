"""Issue-5 cases: OpenCL plugin vs host plugin vs eager CPU, ratios in one run.

Run: .venv/bin/python benchmarks/run.py opencl   (or import CASES and call CASES["opencl"](dev)).
"""

from __future__ import annotations

import torch
from common import Result, interleaved
from models import gpt2, gpt2_ids

import torch_fl


def _devices(dev: str | None) -> tuple[str, str | None]:
    """(OpenCL device, host device or None): found by plugin name, never by index."""
    by_name = {p.record.name: f"ral:{p.devices[0]}" for p in torch_fl.plugins() if p.devices}
    return by_name.get("opencl", dev), by_name.get("host")


def _rows(case: str, times: dict, ocl: str, host: str | None) -> list[Result]:
    rows = [Result(case, f"opencl {ocl}", times["opencl"], "eager CPU", times["cpu"])]
    if host:
        rows.append(Result(case, f"opencl {ocl}", times["opencl"], f"host {host}", times["host"]))
        rows.append(Result(case, f"host {host}", times["host"], "eager CPU", times["cpu"]))
    return rows


def _sync(dev):
    torch.ral.synchronize(torch.device(dev))


def large_add(ocl, host) -> list[Result]:
    """4096x4096 float32 add, fresh output, synchronized."""
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    fns = {"cpu": lambda: torch.add(a, b)}
    for name, dev in (("opencl", ocl), ("host", host)):
        if dev:
            ra, rb = a.to(dev), b.to(dev)
            fns[name] = lambda ra=ra, rb=rb, dev=dev: (torch.add(ra, rb), _sync(dev))
    return _rows("4096x4096 add", interleaved(fns, repeats=5, inner=2), ocl, host)


def linear_1024(ocl, host) -> list[Result]:
    """nn.Linear(1024, 1024) on batch 2048, 3 iterations per sample (also gives GFLOP/s)."""
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(1024, 1024), torch.randn(2048, 1024)
    fns = {}
    for name, dev in (("cpu", "cpu"), ("opencl", ocl), ("host", host)):
        if dev:
            m, xd = torch.nn.Linear(1024, 1024).to(dev), x.to(dev)
            m.load_state_dict(lin.state_dict())

            def run(m=m, xd=xd, dev=dev):
                with torch.no_grad():
                    for _ in range(3):
                        m(xd)
                if dev != "cpu":
                    _sync(dev)

            fns[name] = run
    t = {k: v / 3 for k, v in interleaved(fns, repeats=3, warmup=1).items()}
    rows = _rows("Linear(1024,1024) b2048", t, ocl, host)
    rows[
        0
    ].note = f"opencl matmul {2 * 2048 * 1024 * 1024 / t['opencl'] / 1e9:.1f} GFLOP/s, cpu {2 * 2048 * 1024 * 1024 / t['cpu'] / 1e9:.1f}"
    return rows


def gpt2_forward(ocl, host) -> list[Result]:
    """GPT2LMHeadModel (4 layers, 256 wide), random init, forward of batch 4x128."""
    model = gpt2().eval()
    ids = gpt2_ids()
    fns = {}
    for name, dev in (("cpu", "cpu"), ("opencl", ocl), ("host", host)):
        if dev:
            m = gpt2().eval().to(dev)
            m.load_state_dict(model.state_dict())
            i = ids.to(dev)

            def run(m=m, i=i, dev=dev):
                with torch.no_grad():
                    m(input_ids=i)
                if dev != "cpu":
                    _sync(dev)

            fns[name] = run
    return _rows("GPT-2 fwd 4x256 b4x128", interleaved(fns, repeats=3, warmup=1), ocl, host)


def opencl_cases(dev: str) -> list[Result]:
    """Every issue-5 comparison in one run."""
    ocl, host = _devices(dev)
    if ocl is None:
        return []
    return large_add(ocl, host) + linear_1024(ocl, host) + gpt2_forward(ocl, host)


CASES = {"opencl": opencl_cases}
