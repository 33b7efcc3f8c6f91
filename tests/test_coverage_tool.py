"""Capability: `torch_fl.coverage()` (print, summary, to_dict/to_json, per device), `ralctl
coverage` and the supported-ops generator."""

import contextlib
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from conftest import REPO

import torch_fl

DEVICES = ["ral:0", "ral:1"]
# One op per tier on both built-in plugins: add has a vendor kernel, atan2 a jit template
# only, cumsum neither (the cpu tier).
TIER_OF = {"aten::add.Tensor": "vendor", "aten::atan2": "jit", "aten::cumsum": "cpu"}


def _need(dev: str) -> None:
    if torch.ral.device_count() <= int(dev.split(":")[1]):
        pytest.skip(f"{dev} is not present (needs the host and OpenCL plugins)")


def _three_tiers(dev: str, style: str):
    """Run add, atan2 and cumsum on dev in a style under coverage; check the numbers against CPU."""
    x = torch.rand(16, 16) + 0.5
    mode = torch_fl.ral_mode(dev) if style == "mode" else contextlib.nullcontext()
    with mode:
        xx = x if style == "mode" else x.to(dev)
        with torch_fl.coverage() as cov:
            got = torch.cumsum(torch.atan2(xx + xx, xx), 0)
        got = got.cpu()
    torch.testing.assert_close(got, torch.cumsum(torch.atan2(x + x, x), 0), rtol=1e-5, atol=1e-5)
    return cov


@pytest.mark.parametrize("style", ["device", "mode"])
@pytest.mark.parametrize("dev", DEVICES)
def test_print_shows_tier_shares_and_top_fallbacks_by_time(dev, style):
    _need(dev)
    cov = _three_tiers(dev, style)
    text = str(cov)
    assert text == cov.summary() and "object at 0x" not in text and "object at 0x" not in repr(cov)
    data = cov.to_dict()
    assert list(data["devices"]) == [dev], data
    d = data["devices"][dev]
    tiers = {r["op"]: r["tier"] for r in d["ops"]}
    assert {op: tiers.get(op) for op in TIER_OF} == TIER_OF, d["ops"]
    assert d["calls"] == sum(r["calls"] for r in d["ops"]) == data["calls"]
    assert abs(sum(d["tier_shares"].values()) - 1.0) < 1e-9
    by_tier = {}
    for r in d["ops"]:
        by_tier[r["tier"]] = by_tier.get(r["tier"], 0) + r["calls"]
    assert d["tier_shares"] == {t: n / d["calls"] for t, n in by_tier.items()}
    # the shares as printed, on the device's line
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{dev}:"))
    for tier, share in d["tier_shares"].items():
        assert f"{tier} {share * 100:.1f}%" in line, (tier, line)
    # fallbacks: the non-vendor ops, slowest first, printed in that order
    falls = [r["op"] for r in d["fallbacks"]]
    assert set(falls) >= {"aten::atan2", "aten::cumsum"} and "aten::add.Tensor" not in falls
    secs = [r["seconds"] for r in d["fallbacks"]]
    assert secs == sorted(secs, reverse=True)
    printed = [ln.split()[0] for ln in text.splitlines() if ln.startswith("    aten::")]
    assert printed == falls[: len(printed)] and len(printed) == min(10, len(falls))
    assert [f[0] for f in cov.fallbacks(int(dev[-1]))] == falls
    assert json.loads(cov.to_json()) == data
    one = cov.summary(top=1)
    assert sum(ln.startswith("    aten::") for ln in one.splitlines()) == 1 and falls[0] in one


def test_results_are_split_by_device():
    for dev in DEVICES:
        _need(dev)
    a = torch.rand(8, 8) + 0.5
    with torch_fl.coverage() as cov:
        r0 = (a.to("ral:0") * 2).cpu()
        r1 = torch.cumsum(a.to("ral:1"), 0).cpu()
    torch.testing.assert_close(r0, a * 2)
    torch.testing.assert_close(r1, torch.cumsum(a, 0))
    data = cov.to_dict()
    assert list(data["devices"]) == ["ral:0", "ral:1"]
    ops0 = {r["op"] for r in data["devices"]["ral:0"]["ops"]}
    ops1 = {r["op"] for r in data["devices"]["ral:1"]["ops"]}
    assert "aten::mul.Tensor" in ops0 and "aten::mul.Tensor" not in ops1
    assert "aten::cumsum" in ops1 and "aten::cumsum" not in ops0
    assert data["devices"]["ral:0"]["fallbacks"] == []
    text = str(cov)
    assert text.index("ral:0:") < text.index("ral:1:") and "every op ran in the vendor tier" in text
    assert cov.ops_in_tier("cpu", 1) == ["aten::cumsum"] and cov.ops_in_tier("cpu", 0) == []
    assert cov.tier_shares(0) == {"vendor": 1.0}


def test_empty_coverage_says_so():
    with torch_fl.coverage() as cov:
        torch.ones(3) + 1  # a CPU op: nothing reaches a ral device
    assert str(cov) == "torch_fl coverage: no op ran on a ral device"
    assert cov.to_dict() == {"calls": 0, "devices": {}} and "nothing ran" in repr(cov)


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


def test_workload_without_device_reports_each_device_the_script_used(tmp_path):
    for dev in DEVICES:
        _need(dev)
    script = tmp_path / "two.py"
    script.write_text(
        "import torch\na = torch.rand(8, 8)\n"
        "print((a.to('ral:0') * 2).sum().item(), torch.cumsum(a.to('ral:1'), 0).sum().item())\n"
    )
    res = _ralctl("coverage", "--format", "json", "--", "python", str(script))
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(res.stdout[res.stdout.index("{") :])
    assert list(report) == ["ral:0", "ral:1"], report
    assert {r["op"]: r["tier"] for r in report["ral:1"]["ops"]}["aten::cumsum"] == "cpu"
    assert "aten::cumsum" not in {r["op"] for r in report["ral:0"]["ops"]}


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
