"""Run the benchmarks: `python benchmarks/run.py [--only NAME ...] [--device ral:0] [--rounds N]`.

Every figure is a ratio against plain PyTorch CPU (or the named baseline) measured in the
same run, because absolute times on shared 2-core machines are noisy. The user-level cases
(bench_user.py) run each side in its own fresh process, alternating over --rounds rounds,
and report the median per-round ratio; a Markdown table of them is printed at the end.
`--device ral:1` runs the same cases on the OpenCL device (targets from bench_user.TARGETS_RAL1).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # run from a source checkout too

import torch  # noqa: E402

import torch_fl  # noqa: E402,F401

# Case files besides bench_user.py. One holding SIDES and SPEC (each side in its own process,
# bench_user.run_case) gets its cases built here; one holding CASES brings its own.
CASE_FILES = ("bench_cnn", "bench_rnn", "bench_opencl", "bench_trace", "bench_jit", "bench_jit_sides")


def _cases():
    import bench_user

    cases = dict(bench_user.CASES)
    for extra in CASE_FILES:
        try:
            mod = __import__(extra)
        except ImportError as e:
            if e.name != extra:
                raise  # the file is there but broken: say so rather than drop its cases
            continue
        if hasattr(mod, "CASES"):
            cases.update(mod.CASES)
        else:
            cases.update(bench_user.cases_of(extra, mod.SIDES, mod.SPEC))
    return cases


def main(argv=None) -> int:
    cases = _cases()
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", nargs="*", choices=sorted(cases), help="cases to run (default: all)")
    ap.add_argument("--device", default="ral:0")
    ap.add_argument("--json", default=str(Path(__file__).parent / "results" / "latest.json"))
    ap.add_argument("--rounds", type=int, default=5, help="fresh-process rounds per user-level case")
    args = ap.parse_args(argv)
    import common

    common.ROUNDS = args.rounds
    torch.set_num_threads(torch.get_num_threads())
    machine = common.cpu_model()
    print(f"machine: {machine}, torch {torch.__version__}, {torch.get_num_threads()} threads")
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
    table = [r for r in results if r.rounds_ratio is not None]
    if table:
        print("\n| case (separate processes, median of rounds) | ratio vs baseline | target | times |")
        print("| --- | --- | --- | --- |")
        for r in table:
            target = "" if r.target is None else f"<= {r.target:.2f}x {'ok' if r.meets_target else 'MISSED'}"
            print(f"| {r.case} | {r.ratio:.2f}x | {target} | {r.note} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "machine": machine,
                "threads": torch.get_num_threads(),
                "results": [dict(vars(r), ratio=r.ratio) for r in results],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
