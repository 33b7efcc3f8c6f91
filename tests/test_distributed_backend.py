"""Capability: the `ralccl` torch.distributed backend on ral devices (2 ranks over 127.0.0.1).

Every collective is checked against its CPU reference inside the ranks (tests/distributed_worker.py).
Each multi-process test launches 2 fresh interpreters with a hard deadline, so a hang fails the
test instead of stalling the suite.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.distributed as dist
from dist_launch import describe, launch

import torch_fl  # noqa: F401

WORKER = "tests/distributed_worker.py"
DEADLINE = 100  # seconds for a whole 2-rank launch; typically 20-30 s on a 2-core machine


def _passed(ranks, scenario):
    assert all(r.returncode == 0 and f"PASS {scenario}" in r.stdout for r in ranks), describe(ranks)


def test_backend_registered_for_ral_devices():
    assert dist.Backend.RALCCL == "ralccl"
    assert dist.Backend.default_device_backend_map["ral"] == "ralccl"
    assert dist.Backend.backend_capability["ralccl"] == ["ral"]
    assert dist.Backend._plugins["RALCCL"].extended_api is True


def test_collectives_match_cpu(dev):
    """all_reduce (5 ops, async), broadcast, all_gather(_into_tensor), reduce_scatter(_tensor),
    all_to_all(_single), send/recv, barrier, a shape mismatch, and plain gloo on ral tensors."""
    _passed(launch([WORKER, "collectives", dev], timeout=DEADLINE), "collectives")


def test_mixed_backend_string_and_device_id(dev):
    _passed(launch([WORKER, "mixed", dev], timeout=DEADLINE), "mixed")


@pytest.mark.parametrize("how", ["dies", "hangs"])
def test_failed_peer_raises_within_timeout(dev, how):
    """A peer that exits (socket closes) or stops answering (only the timeout can tell) makes
    the surviving rank raise CollectiveError within the process group timeout; it never hangs."""
    timeout = 4
    ranks = launch(
        [WORKER, "peer_" + ("death" if how == "dies" else "hang"), dev],
        timeout=DEADLINE,
        env={"DIST_TIMEOUT": str(timeout)},
    )
    survivor = ranks[0]
    assert survivor.returncode == 0 and "PASS" in survivor.stdout, describe(ranks)
    waited = float(re.search(r"ERROR after ([0-9.]+)s", survivor.stdout).group(1))
    assert waited <= timeout + 3, survivor.stdout
    if how == "hangs":
        assert "timed out" in survivor.stdout.lower() or "timeout" in survivor.stdout.lower(), survivor.stdout


def test_collective_without_process_group_raises_clearly(dev):
    with pytest.raises(ValueError, match="init_process_group"):
        dist.all_reduce(torch.ones(2, device=dev))
