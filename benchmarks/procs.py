"""Separate-process timing: each side of a case runs in its own fresh interpreter.

Why: CPU and ral:0 timed alternately in one process share OpenMP teams, BLAS threads and the
stream worker, so one side's spinning threads slow the other (issue 13). A user runs one or
the other, so each side gets a fresh process, as a user's script would. Rounds alternate the
sides (cpu, ral, cpu, ral, ...) so machine drift hits both alike; the reported ratio is the
median of the per-round ratios.

A side is `SIDES[case][side]()` in a module named by the case: it builds its inputs and
returns (fn, inner) where fn() is one timed sample running `inner` iterations (already
synchronized). The child prints one JSON line with the median seconds per iteration.

`paired` is for micro-cases whose sides are two paths of the same device (the jit tier
against a vendor kernel): both sides run in each fresh process, in alternating blocks, so
the per-process ratio does not carry the process-to-process spread of a memory-bound
kernel (page placement, huge pages: +-20% between processes here). A third element of a
side's tuple, `enter`, runs untimed before each of its blocks (switch the routing there).
The driver's A/A control (a side against its own twin) shows the remaining bias.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Sides that stand for a plain PyTorch user: their processes must not load torch_fl, which the
# installed `torch.backends` entry point would otherwise do at `import torch`.
PLAIN_SIDES = {"cpu", "cpu_fp32", "eager", "empty_mode", "empty_subclass", "inductor"}


def _cases(module: str):
    """The benchmark module holding SIDES, imported in a child process."""
    sys.path.insert(0, str(HERE))
    sys.path.insert(1, str(HERE.parent))
    return __import__(module)


def _run_child(args: list[str], what: str, plain: bool = False) -> dict:
    """Runs procs.py with `args` in a fresh interpreter; its last stdout line, parsed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])
    if plain:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    out = subprocess.run(
        [sys.executable, str(HERE / "procs.py"), *args], capture_output=True, text=True, env=env, timeout=600
    )
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_main(module: str, case: str, side: str, repeats: int, warmup: int) -> int:
    """Runs one side in this (fresh) process and prints its median time per iteration."""
    fn, inner, *enter = _cases(module).SIDES[case][side]()
    if enter:
        enter[0]()
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) / inner)
    print(json.dumps({"s": statistics.median(samples), "min": min(samples)}))
    return 0


def run_side(module: str, case: str, side: str, repeats: int, warmup: int) -> float:
    """Seconds per iteration of one side, measured in a fresh interpreter."""
    args = [module, case, side, str(repeats), str(warmup)]
    return _run_child(args, f"{module}.{case}.{side}", plain=side in PLAIN_SIDES)["s"]


def alternate(module: str, case: str, sides: list[str], rounds: int, repeats: int = 7, warmup: int = 2) -> dict:
    """Per side, the list of per-round times, sides run in alternating fresh processes."""
    times: dict[str, list[float]] = {s: [] for s in sides}
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for s in order:
            times[s].append(run_side(module, case, s, repeats, warmup))
    return times


def median_ratio(times: dict, subject: str, baseline: str) -> float:
    """Median over rounds of subject/baseline (each round pairs one process of each)."""
    return statistics.median(a / b for a, b in zip(times[subject], times[baseline]))


def child_paired(module: str, case: str, sides: list[str], repeats: int, blocks: int) -> int:
    """Runs every side in this (fresh) process in alternating blocks; prints each side's
    median seconds per iteration."""
    mod = _cases(module)
    built = {s: mod.SIDES[case][s]() for s in sides}
    samples: dict[str, list[float]] = {s: [] for s in sides}
    for b in range(blocks):
        for s in sides if b % 2 == 0 else sides[::-1]:
            fn, inner, *enter = built[s]
            if enter:
                enter[0]()
            fn()  # warm after the switch
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                samples[s].append((time.perf_counter() - t0) / inner)
    print(json.dumps({s: statistics.median(v) for s, v in samples.items()}))
    return 0


def paired(module: str, case: str, sides: list[str], rounds: int, repeats: int = 5, blocks: int = 8) -> dict:
    """Per side, the list of per-process medians; each process runs all sides (child_paired),
    starting with sides[0] in even rounds and sides[-1] in odd ones."""
    times: dict[str, list[float]] = {s: [] for s in sides}
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        args = ["--paired", module, case, ",".join(order), str(repeats), str(blocks)]
        got = _run_child(args, f"{module}.{case} (paired)")
        for s in sides:
            times[s].append(got[s])
    return times


if __name__ == "__main__":
    if sys.argv[1] == "--paired":
        a = sys.argv[2:]
        raise SystemExit(child_paired(a[0], a[1], a[2].split(","), int(a[3]), int(a[4])))
    raise SystemExit(child_main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])))
