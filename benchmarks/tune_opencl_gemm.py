"""Tune the OpenCL GEMM tile per shape class and record it beside the program binaries.

Times every register-tile variant (TORCH_FL_OPENCL_GEMM=<variant>, each in a fresh process,
CPU seconds of the process so other load matters less) on one representative shape per
class, and writes the fastest to $XDG_CACHE_HOME/torch_fl/opencl/gemm_tiles.conf (else
~/.cache/...) as "<device name>\\t<class>\\t<variant>" lines, which the plugin reads on its
first GEMM per device. Delete the file to go back to the built-in choice.

Run: PYTHONPATH=. .venv/bin/python benchmarks/tune_opencl_gemm.py [--dry-run]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

VARIANTS = ("r4x8", "r8x8", "r4x16", "r6x16", "r8x16", "r12x16", "r16x16")
# class -> (batch, M, N, K): Linear/QKV-sized, attention-sized, a narrow head.
SHAPES = {"large": (1, 1024, 1024, 1024), "small": (16, 128, 128, 64), "narrow": (1, 2048, 8, 1024)}

_TIME = """
import statistics, sys, time, torch, torch_fl
p = next(p for p in torch_fl.plugins() if p.record.name == "opencl")
dev = "ral:%d" % p.devices[0]
bt, m, n, k = map(int, sys.argv[1:5])
a, b = torch.randn(bt, m, k).to(dev), torch.randn(bt, k, n).to(dev)
sync = lambda: torch.ral.synchronize(torch.device(dev))
torch.bmm(a, b); sync()
ts = []
for _ in range(5):
    t = time.process_time(); torch.bmm(a, b); sync(); ts.append(time.process_time() - t)
print(statistics.median(ts))
"""


def _time(variant: str, shape) -> float:
    env = dict(os.environ, TORCH_FL_OPENCL_GEMM=variant)
    r = subprocess.run(
        [sys.executable, "-c", _TIME, *map(str, shape)], env=env, capture_output=True, text=True, timeout=600
    )
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-1000:])
    return float(r.stdout.strip().splitlines()[-1])


def conf_path() -> Path:
    """Where the plugin looks for tuned tiles (its program cache directory)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg.startswith("/") else Path.home() / ".cache"
    return base / "torch_fl" / "opencl" / "gemm_tiles.conf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--dry-run", action="store_true", help="print the choice, write nothing")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    import torch_fl

    p = next(p for p in torch_fl.plugins() if p.record.name == "opencl" and p.devices)
    name = next(d.name for d in torch_fl.devices() if d.index == p.devices[0])
    lines = []
    for cls, shape in SHAPES.items():
        t = {v: statistics.median(_time(v, shape) for _ in range(a.rounds)) for v in VARIANTS}
        best = min(t, key=t.get)
        bt, m, n, k = shape
        print(
            f"{cls:7s} {shape}: "
            + ", ".join(f"{v} {2 * bt * m * n * k / s / 1e9:.1f}" for v, s in t.items())
            + f" GFLOP/cpu-s -> {best}"
        )
        lines.append(f"{name}\t{cls}\t{best}\n")
    if a.dry_run:
        return
    path = conf_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    keep = [ln for ln in (path.read_text().splitlines(True) if path.exists() else []) if not ln.startswith(name + "\t")]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(keep + lines))
    tmp.replace(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
