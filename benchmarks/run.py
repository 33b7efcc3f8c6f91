"""Run the benchmarks: `python benchmarks/run.py [--only NAME ...] [--device ral:0]`.

Every figure is a ratio against plain PyTorch CPU (or the named baseline) measured in the
same run, because absolute times on shared 2-core machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # run from a source checkout too

import torch  # noqa: E402

import torch_fl  # noqa: E402,F401


def _cases():
    import bench_core

    cases = dict(bench_core.CASES)
    for extra in ("bench_models", "bench_opencl", "bench_trace", "bench_jit"):
        try:
            mod = __import__(extra)
        except ImportError:
            continue
        cases.update(mod.CASES)
    return cases


def main(argv=None) -> int:
    cases = _cases()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", choices=sorted(cases), help="cases to run (default: all)")
    ap.add_argument("--device", default="ral:0")
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "latest.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(torch.get_num_threads())
    results = []
    for name in args.only or list(cases):
        t0 = time.time()
        rows = cases[name](args.device)
        results.extend(rows)
        for r in rows:
            verdict = (
                "" if r.meets_target is None else f"  [{'meets' if r.meets_target else 'MISSES'} <= {r.target:.2f}x]"
            )
            print(f"{r.case:<42} {r.subject:<14} vs {r.baseline:<26} {r.ratio:6.3f}x{verdict}  {r.note}")
        print(f"  ({name}: {time.time() - t0:.1f}s)", file=sys.stderr)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "machine": platform.processor() or platform.machine(),
                "threads": torch.get_num_threads(),
                "results": [dict(vars(r), ratio=r.ratio) for r in results],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
