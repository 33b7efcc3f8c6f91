"""Launch N local ranks of a script over loopback (127.0.0.1) with a hard deadline, for the
multi-process torch.distributed tests. Not a test module itself."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Rank:
    rank: int
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float


def launch(args: list[str], world: int = 2, timeout: float = 60, env: dict | None = None) -> list[Rank]:
    """Run `python *args` once per rank (RANK/WORLD_SIZE/MASTER_* set, loopback only); kill
    every rank still running at the deadline (returncode None then)."""
    port = free_port()
    procs = []
    start = time.monotonic()
    for r in range(world):
        e = dict(os.environ)
        e.update(env or {})
        e.update(
            RANK=str(r),
            LOCAL_RANK=str(r),
            WORLD_SIZE=str(world),
            LOCAL_WORLD_SIZE=str(world),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            GLOO_SOCKET_IFNAME="lo",
            OMP_NUM_THREADS="1",
            PYTHONPATH=str(REPO) + os.pathsep + e.get("PYTHONPATH", ""),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, *args], cwd=REPO, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    out = []
    for r, p in enumerate(procs):
        left = max(0.1, timeout - (time.monotonic() - start))
        try:
            so, se = p.communicate(timeout=left)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            rc = None
        out.append(Rank(r, rc, so, se, time.monotonic() - start))
    return out


def describe(ranks: list[Rank]) -> str:
    """Every rank's exit status and output tail, for assertion messages."""
    return "\n".join(f"--- rank {x.rank} rc={x.returncode}\n{x.stdout[-3000:]}\n{x.stderr[-3000:]}" for x in ranks)
