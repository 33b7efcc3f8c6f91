"""Capability: `ralctl coverage` and the supported-ops generator."""

import json
import os
import re
import subprocess
import sys

from conftest import REPO

SCRIPT = """
import torch
x = torch.randn(32, 32)
y = torch.linalg.det(x @ x.t() + torch.eye(32)) + x.sum()
print("computed", y.item() > 0)
raise SystemExit(7)
"""


def _ralctl(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=REPO,
    )


def test_workload_report_exit_code_and_todo_list(tmp_path, dev):
    script = tmp_path / "work.py"
    script.write_text(SCRIPT)
    res = _ralctl("coverage", "--device", dev, "--format", "json", "--", "python", str(script))
    assert res.returncode == 7, res.stderr[-2000:]  # the script's own exit code
    report = json.loads(res.stdout[res.stdout.index("{") :])
    rows = report[dev]["ops"]
    tiers = {r["op"]: r["tier"] for r in rows}
    assert tiers["aten::mm"] == "vendor" and tiers["aten::_linalg_det"] == "cpu"
    todo = [r["op"] for r in report[dev]["implement_next"]]
    assert todo[0] == "aten::_linalg_det" or "aten::_linalg_det" in todo
    assert abs(sum(r["share"] for r in rows) - 1.0) < 1e-6


def test_markdown_and_side_by_side(tmp_path):
    script = tmp_path / "work.py"
    script.write_text("import torch\nprint((torch.ones(4) * 2).sum().item())\n")
    res = _ralctl(
        "coverage", "--device", "ral:0", "--device", "ral:0", "--format", "markdown", "--", "python", str(script)
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.count("### ral:0") == 1 and "| `aten::mul.Tensor` | vendor |" in res.stdout


def test_opinfo_matrix():
    # add has a host kernel, atan2 a jit template only, cumsum neither: one op per tier
    ops = ("--op", "add", "--op", "atan2", "--op", "cumsum")
    res = _ralctl("coverage", "--opinfo", "--device", "ral:0", *ops, "--max-samples", "3")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "float32 3/3 (100.0%)" in res.stdout
    for op, tier in (("add", "vendor"), ("atan2", "jit"), ("cumsum", "cpu")):
        assert re.search(rf"^\s*{op}\s+pass/{tier}\b", res.stdout, re.M), (op, tier, res.stdout)


def test_unknown_script_fails_cleanly(tmp_path):
    res = _ralctl("coverage", "--", "python", str(tmp_path / "missing.py"))
    assert res.returncode != 0 and "Traceback" not in res.stdout


def test_supported_ops_doc_is_current():
    res = subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.op_table"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )
    assert res.returncode == 0
    assert res.stdout.strip() == (REPO / "docs" / "supported_ops.md").read_text().strip(), (
        "regenerate: python -m torch_fl.tools.op_table > docs/supported_ops.md"
    )
