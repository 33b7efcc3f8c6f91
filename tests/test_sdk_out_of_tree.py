"""A vendor's plugin built outside the source tree against the installed SDK: the template
copied to an empty folder, built with the headers `ralctl sdk --include` names (any CFLAGS,
an overridden RAL_PLUGIN_EXPORT), installed with `make install`, validated and certified."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from plugins.build import ensure_runtime

import torch_fl
from torch_fl.core.discovery import check_plugin_dir

pytestmark = pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None, reason="needs make and cc")


def _env(tmp_path: Path) -> dict:
    """PATH with a `ralctl` that runs this torch_fl (as the wheel's console script does)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "ralctl"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m torch_fl.tools.ralctl "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FL_", "CFLAGS", "RAL_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(REPO)
    return env


def _vendor_folder(tmp_path: Path) -> Path:
    """An empty folder outside the tree with the template's two files and its manifest."""
    src = tmp_path / "acme"
    src.mkdir()
    shutil.copy(REPO / "plugins" / "template" / "Makefile", src)
    shutil.copy(REPO / "plugins" / "template" / "template.c", src)
    shutil.copy(REPO / "manifests" / "template.json", src / "manifest.json")
    return src


def _make(src: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(["make", "-C", str(src), *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_sdk_include_names_the_installed_headers(tmp_path):
    env = _env(tmp_path)
    out = subprocess.run(["ralctl", "sdk", "--include"], env=env, capture_output=True, text=True, check=True).stdout
    assert Path(out.strip()) == Path(torch_fl.get_include())
    assert (Path(out.strip()) / "ral_plugin.h").is_file() and (Path(out.strip()) / "ral_plugin_sdk.h").is_file()


def test_template_builds_out_of_tree_with_any_cflags_and_installs(tmp_path):
    ensure_runtime()
    env = _env(tmp_path)
    src = _vendor_folder(tmp_path)
    # CFLAGS replaced wholesale: the flags the ABI needs are still added (hidden symbols, PIC).
    proc = _make(src, env, "CFLAGS=-O0 -g")
    assert torch_fl.get_include() in proc.stdout and "-O0 -g" in proc.stdout and "-fvisibility=hidden" in proc.stdout
    _make(src, env, "install", f"PREFIX={tmp_path / 'plugins'}")
    installed = tmp_path / "plugins" / "template"
    assert sorted(p.name for p in installed.iterdir()) == ["libral_template.so", "manifest.json"]
    report = check_plugin_dir(installed)
    assert report.problems == [] and report.warnings == [], report
    # DESTDIR stages an install (packaging); RAL_PLUGIN_EXPORT can be overridden.
    _make(src, env, "clean")
    _make(src, env, "install", "RAL_PLUGIN_EXPORT=__attribute__((visibility(\"default\"),used))",
          f"DESTDIR={tmp_path / 'stage'}", "PREFIX=/opt/torch_fl/plugins")  # fmt: skip
    staged = tmp_path / "stage" / "opt" / "torch_fl" / "plugins" / "template"
    assert check_plugin_dir(staged).problems == []


def test_template_with_hidden_entry_is_caught(tmp_path):
    """RAL_PLUGIN_EXPORT really reaches the entry: overridden to nothing, it is not exported."""
    env = _env(tmp_path)
    src = _vendor_folder(tmp_path)
    _make(src, env, "RAL_PLUGIN_EXPORT=static")
    (src / "manifest.json").rename(src / "build" / "manifest.json")
    problems = check_plugin_dir(src / "build").problems
    assert any("does not export ral_plugin_entry_v1" in p for p in problems), problems


def test_empty_folder_to_certified(tmp_path):
    """The plugin guide's walk: copy, build with the installed SDK, install, certify."""
    ensure_runtime()
    env = _env(tmp_path)
    src = _vendor_folder(tmp_path)
    _make(src, env, "install", f"PREFIX={tmp_path / 'plugins'}")
    out = tmp_path / "cert"
    proc = subprocess.run(
        ["ralctl", "certify", str(tmp_path / "plugins" / "template"), "--out", str(out), "--samples", "1"],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    cert = json.loads((out / "certificate.json").read_text())
    assert proc.returncode == 0, [f["name"] + ": " + f["detail"] for f in cert["summary"]["failures"]]
    assert cert["summary"]["verdict"] == "CERTIFIED" and proc.stdout.strip().endswith("CERTIFIED")
