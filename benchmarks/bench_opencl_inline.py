"""In-process A/B of the OpenCL plugin's inline path on the latency loop (Linear(64)+sum+.item()).

One process, blocks of steps alternating: eager CPU, ral:1 inline on, ral:1 inline off
(`ral_opencl_inline(0|1)`, the plugin's switch outside the ABI), so load changes hit every side
alike. Prints the median and minimum µs per step of each side, its process CPU time per step, and
the plugin's OpenCL calls per step:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_opencl_inline.py [--device ral:1] [--blocks 9]

The separate-process figure the targets are judged by is `benchmarks/run.py --only latency`.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time

import torch

import torch_fl


def _plugin():
    p = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
    if p is None or p.record.status != "LOADED" or not p.devices:
        raise SystemExit("the OpenCL plugin has no device here")
    so = ctypes.CDLL(p.record.library)
    so.ral_opencl_counter_name.restype = ctypes.c_char_p
    so.ral_opencl_inline.restype = ctypes.c_int
    return so


def main() -> None:
    """Run the alternating blocks and print one line per side."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="ral:1")
    ap.add_argument("--blocks", type=int, default=9)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    so = _plugin()
    if so.ral_opencl_inline(-1) < 0:
        raise SystemExit(f"{args.device} cannot run inline (not a host-memory CPU device, or TORCH_FL_OPENCL_INLINE=0)")
    n = so.ral_opencl_counters(None, 0)
    names = [so.ral_opencl_counter_name(i).decode() for i in range(n)]

    def counters():
        out = (ctypes.c_uint64 * n)()
        so.ral_opencl_counters(out, n)
        return dict(zip(names, out))

    torch.manual_seed(0)
    lin, x = torch.nn.Linear(64, 64), torch.randn(32, 64)
    lin_d, x_d = torch.nn.Linear(64, 64).to(args.device), x.to(args.device)
    lin_d.load_state_dict(lin.state_dict())
    sides = {"cpu": (lin, x, None), "inline": (lin_d, x_d, 1), "queued": (lin_d, x_d, 0)}
    wall = {k: [] for k in sides}
    cpu_t = {k: [] for k in sides}
    calls = {}
    with torch.no_grad():
        for b in range(args.blocks + 1):
            for side, (m, inp, inline) in sides.items():
                if inline is not None:
                    torch.ral.synchronize(args.device)
                    so.ral_opencl_inline(inline)
                m(inp).sum().item()
                c0, t0, p0 = counters(), time.perf_counter(), time.process_time()
                for _ in range(args.steps):
                    m(inp).sum().item()
                t1, p1, c1 = time.perf_counter(), time.process_time(), counters()
                if b == 0:
                    continue  # warm-up block
                wall[side].append((t1 - t0) / args.steps * 1e6)
                cpu_t[side].append((p1 - p0) / args.steps * 1e6)
                calls[side] = {k: (c1[k] - c0[k]) / args.steps for k in names if c1[k] != c0[k]}
    so.ral_opencl_inline(1)
    base = statistics.median(wall["cpu"])
    for side in sides:
        med = statistics.median(wall[side])
        print(
            f"{side:7s} {med:8.1f} us/step median (min {min(wall[side]):7.1f}), {med / base:5.2f}x cpu, "
            f"process CPU {statistics.median(cpu_t[side]):7.1f} us/step, calls/step {calls.get(side, {})}"
        )


if __name__ == "__main__":
    main()
