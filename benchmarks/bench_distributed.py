"""2-process all_reduce: ralccl on ral devices against torch's own gloo on CPU tensors.

    python benchmarks/bench_distributed.py [--mb 64] [--rounds 5] [--iters 5] [--devices ral:0 ral:1]

Each side runs in its own pair of fresh processes (loopback, 127.0.0.1), sides alternate, and
every round yields one ratio (side median / CPU gloo median of the same round); the report is
the median ratio over rounds. Inside a run: 2 warm-up calls, then `--iters` timed calls, each
started after a barrier, timed on rank 0 from issue to completed wait().
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def worker(device: str, mb: float, iters: int) -> None:
    """One rank: time all_reduce of an `mb`-megabyte float32 tensor; rank 0 prints the median."""
    import torch
    import torch.distributed as dist

    if device.startswith("ral"):
        import torch_fl  # noqa: F401

        dist.init_process_group("ralccl")
    else:
        dist.init_process_group("gloo")
    n = int(mb * 1024 * 1024) // 4
    t = torch.ones(n).to(device) if device != "cpu" else torch.ones(n)
    samples = []
    for i in range(2 + iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if i >= 2:
            samples.append(time.perf_counter() - t0)
    expect = float(2 ** (2 + iters))  # every call doubles every element
    assert float(t[0].cpu()) == expect, (float(t[0].cpu()), expect)
    if dist.get_rank() == 0:
        print(f"MEDIAN {statistics.median(samples):.6f}", flush=True)
    dist.destroy_process_group()


def run_side(device: str, mb: float, iters: int, timeout: float = 300) -> float:
    """Launch 2 fresh ranks for one side and return rank 0's median seconds per all_reduce."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.update(GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        cmd = [sys.executable, __file__, "--worker", device, "--mb", str(mb), "--iters", str(iters)]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (so, se) in zip(procs, outs):
        if p.returncode:
            raise RuntimeError(f"{device} rank failed:\n{so}\n{se[-3000:]}")
    return float(outs[0][0].split("MEDIAN")[1].split()[0])


def main() -> None:
    """Alternate the sides over rounds and print each side's median time and ratio to CPU gloo."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--mb", type=float, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--devices", nargs="+", default=["ral:0"])
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.mb, args.iters)
        return
    times = {d: [] for d in ["cpu", *args.devices]}
    ratios = {d: [] for d in args.devices}
    for r in range(args.rounds):
        order = ["cpu", *args.devices] if r % 2 == 0 else [*args.devices, "cpu"]
        got = {d: run_side(d, args.mb, args.iters) for d in order}
        for d, s in got.items():
            times[d].append(s)
        for d in args.devices:
            ratios[d].append(got[d] / got["cpu"])
        print(f"round {r}: " + ", ".join(f"{d} {got[d] * 1e3:.1f} ms" for d in order), flush=True)
    print(f"\nall_reduce of {args.mb:g} MB, 2 processes, {args.rounds} rounds x {args.iters} calls")
    print(f"  cpu (torch gloo)   median {statistics.median(times['cpu']) * 1e3:8.1f} ms")
    for d in args.devices:
        rs = ratios[d]
        print(
            f"  {d:<6} (ralccl)    median {statistics.median(times[d]) * 1e3:8.1f} ms   "
            f"ratio median {statistics.median(rs):.3f} (min {min(rs):.3f}, max {max(rs):.3f})"
        )


if __name__ == "__main__":
    main()
