"""`ralctl manifest validate PLUGIN_DIR|FILE` and plugin-status's ignored folders: every check
on the CLI and on the Python side (torch_fl.core.discovery), without loading the plugin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import REPO
from plugins.build import INCLUDE, build_test_plugin

from torch_fl.core import discovery
from torch_fl.tools import ralctl

OK, PROBLEM = 0, 1


def _validate(target, *extra):
    res = CliRunner().invoke(ralctl.cli, ["manifest", "validate", str(target), "--json", *extra])
    return res.exit_code, json.loads(res.output)


@pytest.fixture
def good(tmp_path):
    plugin = build_test_plugin("good", tmp_path / "root", source="named")
    doc = json.loads((plugin / "manifest.json").read_text())
    doc["kernels"] = [
        {"op": "aten::add.Tensor", "kernel": "template_add_f32", "dtypes": ["float32"], "min_rank": 0, "max_rank": 8}
        | {"requires_contiguous": True}
    ]
    (plugin / "manifest.json").write_text(json.dumps(doc))
    return plugin


def _edit(plugin_dir, **change):
    doc = json.loads((plugin_dir / "manifest.json").read_text())
    for key, value in change.items():
        if key.startswith("k_"):
            doc["kernels"][0][key[2:]] = value
        else:
            doc[key] = value
    (plugin_dir / "manifest.json").write_text(json.dumps(doc))


def test_builtin_plugin_folders_validate():
    for name in ("host", "opencl"):
        plugin = REPO / "torch_fl" / "_plugins" / name
        if not (plugin / "manifest.json").exists():
            continue
        code, out = _validate(plugin)
        assert code == OK and out["valid"] and out["kind"] == "plugin_dir", out["problems"]


def test_good_plugin_dir_validates_on_cli_and_python(good):
    code, out = _validate(good)
    assert code == OK and out["problems"] == [] and out["warnings"] == [], out
    assert discovery.check_plugin_dir(good).problems == []


def test_unknown_op_names_file_entry_and_field(good, tmp_path):
    _edit(good, k_op="aten::add.Tensr")
    code, out = _validate(good)
    assert code == PROBLEM
    (msg,) = out["problems"]
    assert "manifest.json" in msg and "kernels[0]" in msg and "field 'op'" in msg and "'Tensr'" in msg
    # A bare file: schema and ops only, still the same message.
    code, out = _validate(good / "manifest.json")
    assert code == PROBLEM and out["kind"] == "file" and "kernels[0]" in out["problems"][0]
    # --no-ops skips the torch check (the schema still runs).
    assert _validate(good / "manifest.json", "--no-ops")[0] == OK


def test_library_without_the_entry_symbol(good):
    lib = good / "libgood.so"
    # The entry compiled hidden: RAL_PLUGIN_EXPORT overridden to nothing.
    subprocess.run(
        ["cc", "-O0", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", f"-I{INCLUDE}", "-DRAL_PLUGIN_EXPORT=",
         "-o", str(lib), str(REPO / "plugins" / "template" / "template.c")],
        check=True,
    )  # fmt: skip
    code, out = _validate(good)
    assert code == PROBLEM and any("does not export ral_plugin_entry_v1" in p for p in out["problems"]), out


def test_not_an_elf_library_and_missing_library(good):
    (good / "libgood.so").write_bytes(b"not an ELF file at all\n" * 8)
    code, out = _validate(good)
    assert code == PROBLEM and any("not an ELF file" in p for p in out["problems"])
    _edit(good, library="libother.so")
    code, out = _validate(good)
    assert any("field 'library'" in p and "libother.so is missing" in p for p in out["problems"]), out
    (good / "libgood.so").unlink()
    code, out = _validate(good)
    assert code == PROBLEM and any("no lib*.so" in p for p in out["problems"])


def test_names_inconsistent_with_the_folder_and_kernel_typo(good):
    _edit(good, plugin="other", k_kernel="template_add_f3")
    code, out = _validate(good)
    warnings = " | ".join(out["warnings"])
    assert "field 'plugin'" in warnings and "'other'" in warnings and "folder name 'good'" in warnings
    assert "libgood.so: expected libother.so or libral_other.so" in warnings
    assert "kernels[0]" in warnings and "'template_add_f3' does not occur in libgood.so" in warnings


def test_folder_without_manifest(tmp_path):
    (tmp_path / "libx.so").write_bytes(b"")
    code, out = _validate(tmp_path)
    assert code == PROBLEM and "no manifest.json" in out["problems"][0]


def _plugin_status(**env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FL_")}
    e |= {"PYTHONPATH": str(REPO), "TORCH_FL_SYSTEM_PLUGIN_DIR": "/nonexistent", **env}
    proc = subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.ralctl", "plugin-status", "--json"],
        env=e, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def test_plugin_status_reports_ignored_folders(good, tmp_path):
    root = good.parent
    (root / "nomanifest").mkdir()
    shutil.copy(good / "libgood.so", root / "nomanifest" / "libnomanifest.so")
    code, out = _plugin_status(TORCH_FL_PLUGIN_PATH=f"{root}:{good}")
    assert code == PROBLEM
    lines = out["ignored"]
    assert any("nomanifest" in s and "libnomanifest.so" in s and "no manifest.json" in s for s in lines), lines
    assert any(str(good) in s and f"point TORCH_FL_PLUGIN_PATH at the parent folder ({root})" in s for s in lines)
    # Python side: the same lines from the discovery module.
    assert (
        discovery.ignored_folders([("TORCH_FL_PLUGIN_PATH", str(root)), ("TORCH_FL_PLUGIN_PATH", str(good))]) == lines
    )


def test_plugin_status_reports_unknown_ops_without_deep(good):
    _edit(good, k_op="aten::nope.Tensor")
    code, out = _plugin_status(TORCH_FL_PLUGIN_PATH=str(good.parent))
    row = next(p for p in out["plugins"] if p["name"] == "good")
    assert code == PROBLEM and row["status"] == "DEGRADED"
    assert "aten::nope.Tensor" in row["reason"] and "no operator aten::nope" in row["reason"]
