"""Capability: the shipped examples run, and an unmodified script gives CPU's numbers on ral."""

import re
import subprocess
import sys

from conftest import REPO


def _run(*args, timeout=600):
    res = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    # A first run is quiet: no warnings from the examples' own configuration.
    noisy = [ln for ln in res.stderr.splitlines() if "warn" in ln.lower() or ln.startswith("[transformers]")]
    assert not noisy, res.stderr[-4000:]
    return res.stdout


def _metrics(text):
    return [(float(a), float(b)) for a, b in re.findall(r"loss ([0-9.]+) test_acc ([0-9.]+)", text)]


def test_training_script_unmodified_cpu_vs_ral_mode(dev):
    cpu = _run("examples/train_small.py", "--epochs", "2")
    ral = _run("-m", "torch_fl.run", "--device", dev, "examples/train_small.py", "--epochs", "2")
    m_cpu, m_ral = _metrics(cpu), _metrics(ral)
    assert len(m_cpu) == len(m_ral) == 2
    for (lc, ac), (lr, ar) in zip(m_cpu, m_ral):
        assert abs(lc - lr) <= 1e-4 * max(1.0, abs(lc)), (cpu, ral)
        assert abs(ac - ar) <= 1 / 256 + 1e-9, (cpu, ral)  # at most one test sample flips


def test_quickstart_runs(dev):
    out = _run("examples/quickstart.py")
    assert "ral:0" in out and "eager CPU" in out and "vendor" in out
    # a healthy machine: no plugin reads DEGRADED (PoCL lacking float16 is a note, not a fault)
    assert "DEGRADED" not in out and "LOADED" in out, out
