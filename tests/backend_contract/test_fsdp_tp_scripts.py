"""Contract: FSDP2 and tensor-parallel training written as pytorch/examples writes it runs under
`torchrun --nproc-per-node 2` on ral (rank r on ral:r, chosen with one line), and its losses
match the same script on CPU with gloo. The tensor-parallel run sets no device and leaves the
choice to DeviceMesh, as pytorch/examples' FSDP2 example does."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dist_launch import free_port

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

pytestmark = pytest.mark.skipif(torch.ral.device_count() < 2, reason="needs two ral devices (one per rank)")


def _torchrun(*args, tag="LOSSES") -> list[float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1"]
    cmd += ["--master-port", str(free_port()), str(HERE / "fsdp_tp_script.py"), *args]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith(("LOSSES ", "REFERENCE "))]
    found = {ln.split(" ", 1)[0]: json.loads(ln.split(" ", 1)[1]) for ln in lines}
    return found if tag is None else found[tag]


@pytest.mark.parametrize(("mode", "pick"), [("fsdp", "set"), ("tp", "mesh")])
def test_losses_match_cpu_gloo(mode, pick):
    ral = _torchrun(mode, "ral", pick)
    cpu = _torchrun(mode, "cpu", pick)
    assert len(ral) == len(cpu) == 4
    assert ral == pytest.approx(cpu, rel=1e-4, abs=1e-5)
    assert ral[-1] != ral[0]  # it trained


def test_tensor_parallel_attention_matches_unsharded_cpu():
    """q/k/v as DTensors sharded on heads (fsdp_tp_example.py's plan) through SDPA's fused backend
    on ral, forward and backward, against the same model unsharded on CPU (DTensor has no CPU
    SDPA strategy, so the reference runs without it)."""
    found = _torchrun("tp_attn", "ral", "set", tag=None)
    ral, cpu = found["LOSSES"], found["REFERENCE"]
    assert len(ral) == len(cpu) == 4
    assert ral == pytest.approx(cpu, rel=1e-4, abs=1e-6)
    assert ral[-1] < ral[0]  # it trained
