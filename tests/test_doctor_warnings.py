"""`ralctl doctor` explains every warning it prints: each becomes a finding with a fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

from conftest import REPO
from plugins.build import build_template_plugin, ensure_runtime

from torch_fl.tools.doctor_warnings import EXPLANATIONS, collected, explain, warning_lines


def test_known_warnings_get_their_own_explanation():
    catch_all = EXPLANATIONS[-1][1:]
    for message in (
        "UserWarning: torch_fl: cannot build the ral device-guard shim: g++ not found",
        "UserWarning: torch_fl: plugin 'x' ignored its kernels: manifest ...",
        "RuntimeWarning: torch_fl.jit: compile failed on ral:1; the op falls back to the next tier.",
        "RuntimeWarning: torch_fl was imported after autograd had already run a backward pass, ...",
    ):
        assert explain(message) != catch_all, message
    assert explain("DeprecationWarning: something else") == catch_all


def test_warning_lines_and_collected():
    err = (
        "noise\n/a/b.py:3: UserWarning: first\n[W1201 00:06:45 ReduceOps.cpp:1861] Warning: var()\nUserWarning: first\n"
    )
    assert warning_lines(err) == ["UserWarning: first", "[W1201 00:06:45 ReduceOps.cpp:1861] Warning: var()"]
    with collected() as got:
        warnings.warn("twice", stacklevel=1)
        warnings.warn("twice", stacklevel=1)
    assert got == ["UserWarning: twice"]


def test_doctor_turns_a_plugin_warning_into_an_explained_finding(tmp_path):
    ensure_runtime()
    plugin = build_template_plugin(tmp_path / "root", "badtpl")
    manifest = json.loads((plugin / "manifest.json").read_text())
    manifest["kernels"][0]["dtypes"] = ["float99"]  # schema-invalid: torch_fl warns and ignores its kernels
    (plugin / "manifest.json").write_text(json.dumps(manifest))
    # TORCH_FL_LIGHT_IMPORT=1: as the `ralctl` console script runs (no full import before doctor).
    env = dict(os.environ, PYTHONPATH=str(REPO), TORCH_FL_PLUGIN_PATH=str(tmp_path / "root"), TORCH_FL_LIGHT_IMPORT="1")
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", "doctor", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    checks = json.loads(proc.stdout)["checks"]
    warned = [c for c in checks if c["check"] == "warning"]
    assert any("ignored its kernels" in c["detail"] and "manifest validate" in c["fix"] for c in warned), warned
    assert all(c["fix"] for c in checks if c["level"] == "warning"), checks
    assert "Warning" not in proc.stderr, proc.stderr  # nothing printed unexplained
