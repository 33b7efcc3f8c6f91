"""Capability: DDP and FSDP2 train a GPT-2-shaped model on ral with 2 ranks (loopback), and the
results equal single-process CPU training on the concatenated batch.

The ranks run examples/ddp_gpt2.py unchanged (launched by torchrun, or under torch_fl.run for
ral_mode); the reference is computed here, on CPU, in one process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
from dist_launch import REPO, describe, free_port, launch

STEPS, ACCUM, PER_RANK, WORLD = 2, 2, 2, 2
ARGS = ["--steps", str(STEPS), "--accum", str(ACCUM), "--per-rank", str(PER_RANK)]
# float32 with a different summation order (bucketed, sharded, two ranks): a few ulps of drift
RTOL, ATOL = 2e-4, 2e-5


def _example():
    spec = importlib.util.spec_from_file_location("ddp_gpt2", REPO / "examples" / "ddp_gpt2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def reference():
    """Single-process CPU training on the concatenated global batch (same seed, data, optimizer)."""
    ex = _example()
    model = ex.build_model()
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, grads = [], None
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(ACCUM):
            ids = ex.global_batch(step, micro, WORLD, PER_RANK)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            losses.append(float(loss.detach()))
        if step == 0:
            grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
        opt.step()
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"losses": losses, "grads": grads, "weights": weights, "init": init}


def _compare(dump, reference):
    got = torch.load(dump)
    for kind in ("grads", "weights"):
        assert all(t.device.type == "cpu" for t in got[kind].values()), f"{kind} were saved off the CPU"
    assert got["losses"] == pytest.approx(reference["losses"], rel=RTOL, abs=ATOL)
    assert got["grads"].keys() == reference["grads"].keys()
    for name, g in reference["grads"].items():
        torch.testing.assert_close(got["grads"][name], g, rtol=RTOL, atol=ATOL, msg=f"first-step grad {name}")
    for name, w in reference["weights"].items():
        torch.testing.assert_close(got["weights"][name], w, rtol=RTOL, atol=ATOL, msg=f"final weight {name}")


def _torchrun(script_args, timeout=100):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(WORLD)]
    cmd += ["--master-addr", "127.0.0.1", "--master-port", str(free_port()), *script_args]
    env = {"GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(REPO)}
    import os

    full = dict(os.environ, **env)
    res = subprocess.run(cmd, cwd=REPO, env=full, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-5000:]
    return res.stdout


def test_ddp_torchrun_matches_single_process(dev, reference, tmp_path):
    """torchrun unchanged; small buckets (several after the rebuild) and no_sync accumulation."""
    dump = tmp_path / "ddp.pt"
    out = _torchrun(["examples/ddp_gpt2.py", "--device", dev, *ARGS, "--bucket-cap-mb", "0.02", "--dump", str(dump)])
    rebuilt = out.split("rebuilt", 1)[1].split("\n", 1)[0]
    assert len(rebuilt.split(",")) > 1, out  # gradient bucketing really split the grads
    _compare(dump, reference)


def test_fsdp2_matches_single_process(dev, reference, tmp_path):
    dump = tmp_path / "fsdp.pt"
    ranks = launch(["examples/ddp_gpt2.py", "--device", dev, "--fsdp", *ARGS, "--dump", str(dump)], timeout=100)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    _compare(dump, reference)


def test_unmodified_cpu_ddp_script_under_ral_mode(dev, reference, tmp_path):
    """A CPU DDP script (gloo, CPU model) run under `python -m torch_fl.run` gives CPU's results.

    It starts from saved weights (--init): transformers' random initialisation under ral_mode
    does not yet reproduce CPU's random stream (a ral_mode matter, not a distributed one)."""
    dump, init = tmp_path / "mode.pt", tmp_path / "init.pt"
    torch.save(reference["init"], init)
    args = ["-m", "torch_fl.run", "--device", dev, "examples/ddp_gpt2.py", *ARGS, "--init", str(init)]
    args += ["--dump", str(dump)]
    ranks = launch(args, timeout=100)
    assert all(r.returncode == 0 for r in ranks), describe(ranks)
    _compare(dump, reference)
