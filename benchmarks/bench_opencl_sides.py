"""Issue-17 measurements: each case on one side (eager CPU or the OpenCL device) in its own
fresh process, sides alternating over several rounds; prints per-round ratios and medians.

Run: PYTHONPATH=. .venv/bin/python benchmarks/bench_opencl_sides.py --rounds 3
One side alone: ... bench_opencl_sides.py --side opencl --case mm1024   (prints seconds)
Also reports kernel launches per GPT-2 forward on the OpenCL and host devices.
Where the time goes, kernel by kernel (OpenCL profiling events, one run after warm-up):
  ... bench_opencl_sides.py --profile --case gpt2_fwd   (--fuse for torch_fl.fuse() regions)"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = ("mm1024", "linear1024", "gpt2_fwd", "gpt2_train")
FLOPS = {"mm1024": 2 * 1024**3, "linear1024": 2 * 2048 * 1024 * 1024}


def _device(side: str) -> str:
    if side == "cpu":
        return "cpu"
    import torch_fl

    by_name = {p.record.name: f"ral:{p.devices[0]}" for p in torch_fl.plugins() if p.devices}
    return by_name[side]


def _timed(fn, sync, repeats: int, after_warmup=None) -> float:
    fn()
    sync()
    fn()
    sync()
    if after_warmup:
        after_warmup()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def run_side(side: str, case: str, repeats: int = 5, fuse: bool = False, after_warmup=None) -> float:
    """Median seconds of one case on one side, in this process (`fuse`: GPT-2 cases inside
    `torch_fl.fuse()` regions)."""
    import contextlib

    import torch

    import torch_fl

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    dev = _device(side)

    def sync():
        if dev != "cpu":
            torch.ral.synchronize(torch.device(dev))

    torch.manual_seed(0)
    if case == "mm1024":
        a, b = torch.randn(1024, 1024).to(dev), torch.randn(1024, 1024).to(dev)
        return _timed(lambda: a @ b, sync, repeats, after_warmup)
    if case == "linear1024":
        lin, x = torch.nn.Linear(1024, 1024).to(dev), torch.randn(2048, 1024).to(dev)

        def fwd():
            with torch.no_grad():
                lin(x)

        return _timed(fwd, sync, repeats, after_warmup)
    from bench_user import _ids, gpt2

    model = gpt2().to(dev)
    ids = _ids().to(dev)
    region = torch_fl.fuse if fuse and dev != "cpu" else contextlib.nullcontext
    if case == "gpt2_fwd":
        model.eval()

        def fwd():
            with torch.no_grad(), region():
                model(input_ids=ids)

        return _timed(fwd, sync, repeats, after_warmup)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad(set_to_none=True)
        with region():
            model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    return _timed(step, sync, repeats, after_warmup)


def launches_per_forward(side: str, fuse: bool = False) -> int:
    """Kernel launches that reach the device's plugin during one GPT-2 forward (after warm-up);
    `fuse`: inside a `torch_fl.fuse()` region (the jit tier fuses element-wise chains)."""
    import contextlib

    import torch

    import torch_fl
    from torch_fl._native import lib

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_user import _ids, gpt2

    dev = _device(side)
    idx = torch.device(dev).index
    model, ids = gpt2().eval().to(dev), _ids().to(dev)
    region = torch_fl.fuse if fuse else contextlib.nullcontext
    with torch.no_grad():
        with region():
            model(input_ids=ids)
        torch.ral.synchronize(torch.device(dev))
        before = lib.rt_launch_count(idx)
        with region():
            model(input_ids=ids)
        torch.ral.synchronize(torch.device(dev))
    return lib.rt_launch_count(idx) - before


def profile_case(case: str, fuse: bool = False, top: int = 30) -> str:
    """Per-kernel table of one run of `case` on the OpenCL device (after two warm-up runs),
    from TORCH_FL_OPENCL_PROFILE; call before anything has launched an OpenCL kernel."""
    import collections
    import tempfile

    path = os.path.join(tempfile.mkdtemp(prefix="ocl_prof_"), "kernels.tsv")
    os.environ["TORCH_FL_OPENCL_PROFILE"] = path  # read by the plugin at its first launch
    done = [0]

    def mark():  # kernels of the two warm-up runs are in the file by now (each synchronized)
        done[0] = sum(1 for _ in open(path)) if os.path.exists(path) else 0

    t = run_side("opencl", case, repeats=1, fuse=fuse, after_warmup=mark)
    rows = [line.rstrip("\n").split("\t") for line in open(path)][done[0] :]
    agg: dict[tuple[str, str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for name, glob, loc, _queued, run, _start in rows:
        agg[(name, glob, loc)][0] += 1
        agg[(name, glob, loc)][1] += float(run)
    total = sum(v[1] for v in agg.values())
    out = [f"{case}: {t * 1e3:.1f} ms wall, {len(rows)} kernels, {total / 1e3:.1f} ms in kernels"]
    for (name, glob, loc), (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
        out.append(f"{us / 1e3:9.2f} ms {n:4d}x {us / n:9.1f} us  {name:24s} global {glob} local {loc}")
    return "\n".join(out)


def _spawn(args: list[str]) -> str:
    env = dict(os.environ)
    if args[:2] == ["--side", "cpu"]:
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # a plain PyTorch process: torch_fl not loaded
    r = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, timeout=1200, env=env)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return r.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--side", choices=("cpu", "opencl", "host"))
    ap.add_argument("--case", choices=CASES)
    ap.add_argument("--launches", action="store_true")
    ap.add_argument("--profile", action="store_true", help="per-kernel OpenCL timings of one run of --case")
    ap.add_argument("--fuse", action="store_true", help="GPT-2 inside torch_fl.fuse() (with --launches, or --side)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    a = ap.parse_args()
    if a.profile:
        print(profile_case(a.case or "gpt2_fwd", a.fuse))
        return
    if a.launches and a.side:
        print(launches_per_forward(a.side, a.fuse))
        return
    if a.side:
        print(json.dumps(run_side(a.side, a.case, fuse=a.fuse)))
        return
    for case in a.cases.split(","):
        ratios, t_ocl, t_cpu = [], [], []
        for _ in range(a.rounds):
            c = float(_spawn(["--side", "cpu", "--case", case]))
            o = float(_spawn(["--side", "opencl", "--case", case]))
            t_cpu.append(c)
            t_ocl.append(o)
            ratios.append(o / c)
        line = (
            f"{case:11s} opencl {statistics.median(t_ocl) * 1e3:8.1f} ms  cpu {statistics.median(t_cpu) * 1e3:8.1f} ms"
            f"  ratio median {statistics.median(ratios):5.2f}x  rounds {', '.join(f'{r:.2f}' for r in ratios)}"
        )
        if case in FLOPS:
            line += f"  opencl {FLOPS[case] / statistics.median(t_ocl) / 1e9:.1f} GFLOP/s"
            line += f" cpu {FLOPS[case] / statistics.median(t_cpu) / 1e9:.1f}"
        print(line, flush=True)
    for side in ("opencl", "host"):
        for extra in ([], ["--fuse"]):
            what = f"launches per GPT-2 forward on {side}{' in fuse()' if extra else ''}"
            try:
                print(f"{what}: {_spawn(['--side', side, '--launches', *extra])}", flush=True)
            except (RuntimeError, KeyError) as exc:
                print(f"{what}: unavailable ({exc})", flush=True)


if __name__ == "__main__":
    main()
