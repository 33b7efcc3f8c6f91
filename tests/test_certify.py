"""`ralctl certify`: the template and both built-in plugins certify; a faulty one does not.

Each certification runs the full programme (ABI/manifest, every manifest entry against CPU,
OpInfo sample, modules, optimizers, a small model, bad pointers, OOM) with --samples 1 (one
OpInfo sample per op and one rank per manifest entry) to keep the time modest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO
from plugins.build import build_template_plugin, build_test_plugin, ensure_runtime
from plugins.planted import BUGS, build_planted_plugin

import torch_fl

SECTIONS = {"abi", "entries", "opinfo", "modules", "model", "bad_input", "oom"}


def _certify(plugin_dir, out_dir, *extra) -> tuple[subprocess.CompletedProcess, dict, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", "certify", str(plugin_dir), "--out", str(out_dir)]
        + ["--samples", "1", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    cert_json = out_dir / "certificate.json"
    assert cert_json.exists(), proc.stdout + proc.stderr
    return proc, json.loads(cert_json.read_text()), (out_dir / "certificate.md").read_text()


def _builtin(name: str):
    for st in torch_fl.plugins():
        if st.record.name == name and st.record.source == "builtin":
            if st.record.status != "LOADED" or not st.devices:
                pytest.skip(f"built-in plugin {name} is {st.record.status} here: {st.record.reason}")
            return st.record.dir
    pytest.skip(f"built-in plugin {name} not built (needs its SDK; see setup.py)")


def _assert_certified(proc, cert, md):
    s = cert["summary"]
    assert proc.returncode == 0, [f["name"] + ": " + f["detail"] for f in s["failures"]]
    assert s["verdict"] == "CERTIFIED"
    assert {r["section"] for r in s["sections"]} == SECTIONS
    assert all(r["run"] > 0 and r["pass_rate"] == 1.0 for r in s["sections"]), s["sections"]
    # The manifest entries were forced to the vendor tier, so vendor calls must be counted.
    assert s["tier_calls"].get("vendor", 0) > 0 and 0 < s["vendor_share"] <= 1
    assert "**Verdict: CERTIFIED**" in md and "| Manifest entries" in md
    assert proc.stdout.strip().endswith("CERTIFIED")


def test_template_plugin_is_certified_from_outside_the_package(tmp_path):
    ensure_runtime()
    plugin_dir = build_template_plugin(tmp_path / "vendor")
    proc, cert, md = _certify(plugin_dir, tmp_path / "cert")
    _assert_certified(proc, cert, md)
    assert "TORCH_FL_PLUGIN_PATH" in cert["plugin"]  # loaded through the path, not the package
    entries = next(r for r in cert["summary"]["sections"] if r["section"] == "entries")
    # add and mul, float32, contiguous at ranks 0, 1, 2 and 4; at rank 2 offset and special
    # values, and alpha/beta for add. No strided or broadcast operands: the entries require
    # contiguous inputs, which the router guarantees.
    assert entries["run"] == 13
    names = [c["name"] for s in cert["sections"] if s["section"] == "entries" for c in s["checks"]]
    assert "aten::add.Tensor float32 rank 2 alpha/beta (template_add_f32)" in names
    assert not any("strided" in n or "broadcast" in n for n in names)


# The built-in plugins certify in CI in a quick run (--samples 1: every entry contiguous at a
# spread of ranks and every dtype, each input variant at one rank for one dtype per kind, all
# copy_ casts), so a manifest that promises more than its kernel cannot land; -m slow runs the
# full programme (every declared rank, every variant for every dtype, 4 OpInfo samples).
@pytest.mark.parametrize("name", ["host", "opencl"])
def test_builtin_plugin_is_certified(tmp_path, name):
    proc, cert, md = _certify(_builtin(name), tmp_path / "cert")
    _assert_certified(proc, cert, md)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["host", "opencl"])
def test_builtin_plugin_is_certified_full_run(tmp_path, name):
    proc, cert, md = _certify(_builtin(name), tmp_path / "cert", "--samples", "4")
    _assert_certified(proc, cert, md)


def test_faulty_plugin_is_not_certified_and_says_how_to_reproduce(tmp_path):
    ensure_runtime()
    plugin_dir = build_test_plugin("faulty", tmp_path / "vendor")
    # Only the sections that exercise kernels: the verdict of a partial run is never CERTIFIED.
    proc, cert, md = _certify(plugin_dir, tmp_path / "cert", "--section", "abi", "--section", "entries")
    s = cert["summary"]
    assert proc.returncode == 1
    assert {r["section"] for r in s["sections"]} == {"abi", "entries"}
    assert s["verdict"] == "NOT CERTIFIED" and "**Verdict: NOT CERTIFIED**" in md
    failed = [f for f in s["failures"] if f["section"] == "entries"]
    assert failed, s["failures"]
    assert all("injected failure" in f["detail"] or "KernelError" in f["detail"] for f in failed), failed
    assert all("repro_entry(" in f["repro"] for f in failed)
    assert "reproduce: `" in md


def test_not_a_plugin_dir_is_a_usage_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", "certify", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "no manifest.json" in proc.stderr


# ---- planted kernel bugs: each must fail certification, naming its kernel ------------------


def _entries_only(tmp_path, plugin_dir):
    return _certify(plugin_dir, tmp_path / "cert", "--section", "abi", "--section", "entries")


def test_planted_plugin_without_bugs_passes_every_entry_check(tmp_path):
    """The control: the same general kernels, correct, pass every variant (so the planted
    failures below come from the bugs, not from certify)."""
    ensure_runtime()
    proc, cert, _ = _entries_only(tmp_path, build_planted_plugin(tmp_path / "vendor", None))
    s = cert["summary"]
    assert not s["failures"], [f["name"] + ": " + f["detail"] for f in s["failures"]]
    names = [c["name"] for sec in cert["sections"] for c in sec["checks"]]
    for needle in ("strided", "offset", "broadcast", "0-d operand", "alpha/beta", "special values"):
        assert any(needle in n and "planted_add_f32" in n for n in names), needle
    assert any("aten::addmm float32 rank 1 " in n for n in names)  # the rank-1 bias
    assert any("float32 -> int64 cast values" in n for n in names)


@pytest.mark.parametrize("bug", sorted(BUGS))
def test_planted_kernel_bug_fails_certification_naming_the_kernel(tmp_path, bug):
    ensure_runtime()
    proc, cert, md = _entries_only(tmp_path, build_planted_plugin(tmp_path / "vendor", bug))
    s = cert["summary"]
    assert proc.returncode == 1 and s["verdict"] == "NOT CERTIFIED"
    failed = [f for f in s["failures"] if f["section"] == "entries"]
    assert failed, f"{bug} was not caught"
    # The macro plants the bug in every kernel it applies to; the named one must be caught
    # by the check made for it, and every failure names its kernel.
    kernel, variant = BUGS[bug]
    assert any(f"({kernel})" in f["name"] and variant in f["name"] for f in failed), [f["name"] for f in failed]
    assert all("(planted_" in f["name"] and f["repro"] for f in failed)
    # Only the variant aimed at the bug fails: the contiguous default-scalar checks pass.
    assert not any("contiguous" in f["name"] for f in failed) or bug == "RANK1_BIAS"


def test_reproducer_runs_as_printed_in_a_fresh_shell(tmp_path):
    """The printed command of a failed check re-runs it with nothing from this process's
    environment (env -i), after certify has returned."""
    ensure_runtime()
    _, cert, _ = _entries_only(tmp_path, build_planted_plugin(tmp_path / "vendor", "ROUND_CAST"))
    failed = next(f for f in cert["summary"]["failures"] if "cast values" in f["name"])
    proc = subprocess.run(
        ["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", failed["repro"]],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rerun = json.loads(proc.stdout)
    assert rerun["state"] == "failed" and rerun["name"] in failed["name"], rerun
    assert "Tensor-likes are not equal" in rerun["detail"]


def test_skipped_checks_are_not_passed():
    """A check certify could not run is "skipped", never "passed", in certificate.json."""
    from torch_fl.tools.certify import summarize
    from torch_fl.tools.certify_child import _check

    skipped = _check("aten::dot float32 rank 0 contiguous", True, "dot takes no rank-0 first operand", skipped=True)
    ran = _check("aten::dot float32 rank 1 contiguous", True)
    assert skipped["state"] == "skipped" and skipped["passed"] is False
    s = summarize([{"section": "entries", "checks": [skipped, ran]}])
    assert s["sections"][0]["run"] == 1 and s["sections"][0]["skipped"] == 1 and not s["failures"]


def test_module_failure_names_the_vendor_kernels_that_ran(tmp_path):
    """A later section's failure (nn.Linear with a rank-1 bias bug) names the kernel that ran
    during it, and its reproducer runs as printed in a fresh shell."""
    ensure_runtime()
    plugin = build_planted_plugin(tmp_path / "vendor", "RANK1_BIAS")
    proc, cert, md = _certify(plugin, tmp_path / "cert", "--section", "modules")
    linear = next(f for f in cert["summary"]["failures"] if f["name"] == "Linear")
    assert linear["kernels"] == ["aten::addmm (planted_addmm_f32)"]
    assert "vendor kernels that ran: aten::addmm (planted_addmm_f32)" in md
    rerun = subprocess.run(
        ["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c", linear["repro"]],
        capture_output=True, text=True, timeout=300, cwd="/",
    )  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    (again,) = json.loads(rerun.stdout)
    assert again["name"] == "Linear" and again["state"] == "failed" and again["kernels"] == linear["kernels"]
