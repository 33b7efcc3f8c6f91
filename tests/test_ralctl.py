"""ralctl: tables and --json for devices and plugins, manifest validation, doctor, exit codes,
a light start (no torch import), and a machine with no plugins or no runtime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from plugins.build import build_test_plugin

from torch_fl.tools import ralctl
from torch_fl.tools.output import NO_RUNTIME, OK, PROBLEM, USAGE

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "manifests" / "template.json"
# A console script as pip writes it: it imports torch_fl before torch, so torch_fl stays torch-free.
CONSOLE_SCRIPT = """\
import sys
from torch_fl.tools.ralctl import main
{before}
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"code": code, "torch_imported": "torch" in sys.modules}}), file=sys.stderr)
"""


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FL_", "RAL_"))}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCH_FL_SYSTEM_PLUGIN_DIR"] = "/nonexistent/torch_fl/plugins"
    # rich sizes tables to the terminal, 80 columns without one (an xdist worker): a fixed
    # width keeps each status word on one line whatever runs the tests
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def run_ralctl(tmp_path: Path, *args: str, before: str = "", **env) -> tuple[int, str, dict]:
    """Run ralctl as its console script would (a file named `ralctl`); (exit code, stdout, status)."""
    script = tmp_path / "ralctl"
    script.write_text("import json\n" + CONSOLE_SCRIPT.format(before=textwrap.dedent(before)))
    res = subprocess.run(
        [sys.executable, str(script), *args], env=_env(**env), capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    status = json.loads(res.stderr.strip().splitlines()[-1])
    assert "Traceback" not in res.stderr, res.stderr
    return status["code"] or 0, res.stdout, status


@pytest.fixture(scope="module")
def problem_root(tmp_path_factory) -> Path:
    """A plugin root with one plugin of each status ralctl reports."""
    root = tmp_path_factory.mktemp("plugins")
    build_test_plugin("good", root, source="named")
    build_test_plugin("newabi", root, source="abi2")
    build_test_plugin("withdep", root, source="linked_dep")
    entry = {
        "op": "aten::add.Tensor",
        "kernel": "no_such_kernel",
        "dtypes": ["float32"],
        "min_rank": 0,
        "max_rank": 8,
        "requires_contiguous": True,
    }
    for name, change in (
        ("degraded", {}),
        ("badmani", {"dtypes": ["float99"]}),
        ("unknownop", {"op": "aten::nope.Tensor"}),
    ):
        plugin = build_test_plugin(name, root, source="named")
        doc = json.loads((plugin / "manifest.json").read_text())
        doc["kernels"] = [{**entry, **change}]
        (plugin / "manifest.json").write_text(json.dumps(doc))
    return root


def test_light_start_does_not_import_torch(tmp_path, problem_root):
    code, out, status = run_ralctl(tmp_path, "list-devices", "--json", TORCH_FL_PLUGIN_PATH=str(problem_root))
    assert status["torch_imported"] is False
    assert code == OK
    ids = [d["id"] for d in json.loads(out)["devices"]]
    assert ids and ids[0] == "ral:0"


def test_plugin_status_reports_every_status_with_reason(tmp_path, problem_root):
    code, out, status = run_ralctl(tmp_path, "plugin-status", "--json", TORCH_FL_PLUGIN_PATH=str(problem_root))
    assert code == PROBLEM and status["torch_imported"] is False
    plugins = {p["name"]: p for p in json.loads(out)["plugins"]}
    assert plugins["good"]["status"] == "LOADED" and plugins["good"]["abi"] == "1.0"
    assert plugins["newabi"]["status"] == "ABI_MISMATCH" and "ABI 2.0" in plugins["newabi"]["reason"]
    assert plugins["withdep"]["status"] == "MISSING_DEPS" and "libfakedep.so" in plugins["withdep"]["reason"]
    assert plugins["degraded"]["status"] == "DEGRADED" and "no_such_kernel" in plugins["degraded"]["reason"]
    assert plugins["badmani"]["status"] == "INVALID_MANIFEST"
    assert "kernels[0]" in plugins["badmani"]["reason"] and "dtypes" in plugins["badmani"]["reason"]
    # Without --deep the op name is not checked against torch: only its symbol is.
    assert plugins["unknownop"]["status"] == "DEGRADED"


def test_plugin_status_table_and_deep_op_check(tmp_path, problem_root):
    code, out, status = run_ralctl(tmp_path, "plugin-status", TORCH_FL_PLUGIN_PATH=str(problem_root))
    assert code == PROBLEM and status["torch_imported"] is False
    header = out.splitlines()[1]
    for col in ("PLUGIN", "VERSION", "ABI", "STATUS", "DEPENDENCIES", "REASON"):
        assert col in header
    assert "ABI_MISMATCH" in out and "MISSING_DEPS" in out and "INVALID_MANIFEST" in out
    code, out, status = run_ralctl(
        tmp_path, "plugin-status", "--deep", "--json", TORCH_FL_PLUGIN_PATH=str(problem_root)
    )
    reason = {p["name"]: p["reason"] for p in json.loads(out)["plugins"]}["unknownop"]
    assert "aten::nope.Tensor" in reason and "unknown operator" in reason


def test_a_dtype_the_device_lacks_is_a_note_not_degraded(tmp_path):
    # PoCL declares no float16: the OpenCL plugin is LOADED, with a note, in both commands
    from torch_fl.core import runtime as rt
    from torch_fl.core.dtype_names import names_in_mask

    rt.ensure_initialized()
    opencl = [p.index for p in rt.plugin_records() if p.name == "opencl" and p.status == "LOADED"]
    masks = [d.dtype_mask for d in rt.device_records() if opencl and d.plugin == opencl[0]]
    if not masks or "float16" in names_in_mask(masks[0]):
        pytest.skip("needs the OpenCL plugin on a device without float16 (PoCL)")
    code, out, _ = run_ralctl(tmp_path, "plugin-status", "--json")
    row = {p["name"]: p for p in json.loads(out)["plugins"]}["opencl"]
    assert code == OK and row["status"] == "LOADED" and row["disabled"] == [], row
    assert row["reason"] == "float16: not supported by this device", row
    code, out, _ = run_ralctl(tmp_path, "doctor", "--json", "--no-smoke")
    finding = [f for f in json.loads(out)["checks"] if f["check"] == "plugin opencl"][0]
    assert finding["level"] == "ok" and "note: float16: not supported by this device" in finding["detail"]


def test_doctor_prints_a_fix_per_problem(tmp_path, problem_root):
    code, out, _ = run_ralctl(tmp_path, "doctor", "--json", "--no-smoke", TORCH_FL_PLUGIN_PATH=str(problem_root))
    assert code == PROBLEM
    report = json.loads(out)
    assert report["ok"] is False
    checks = {c["check"]: c for c in report["checks"]}
    for name in ("newabi", "withdep", "degraded", "badmani", "unknownop"):
        assert checks[f"plugin {name}"]["level"] == "problem"
        assert checks[f"plugin {name}"]["fix"]
    assert checks["plugin good"]["level"] == "ok"
    assert checks["torch"]["level"] == "ok"
    assert "ralctl manifest validate" in checks["plugin badmani"]["fix"]
    assert any(c.startswith("cache ") for c in checks)


def test_no_plugins_prints_empty_table_and_reason(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    # Point the built-in plugin directory at an empty one: the real loader then finds nothing.
    before = f"""
    import torch_fl._native, torch_fl.core.runtime
    torch_fl._native.builtin_plugin_dir = torch_fl.core.runtime.builtin_plugin_dir = lambda: {str(empty)!r}
    """
    code, out, _ = run_ralctl(tmp_path, "list-devices", before=before)
    assert code == PROBLEM
    assert "ID" in out and "VENDOR" in out and "No plugins found" in out and str(empty) in out
    code, out, _ = run_ralctl(tmp_path, "plugin-status", "--json", before=before)
    doc = json.loads(out)
    assert code == PROBLEM and doc["plugins"] == [] and "No plugins found" in doc["reason"]


def test_missing_runtime_is_exit_3_with_the_fix(tmp_path):
    before = "sys.modules['torch_fl._native._ral'] = None  # as if the cffi module was never built"
    code, out, _ = run_ralctl(tmp_path, "list-devices", "--json", before=before)
    assert code == NO_RUNTIME
    assert "setup.py native" in json.loads(out)["reason"]


def test_list_devices_in_process(dev):
    res = CliRunner().invoke(ralctl.cli, ["list-devices"])
    assert res.exit_code == OK, res.output
    for col in ("ID", "TYPE", "NAME", "VENDOR", "MEMORY", "STATUS"):
        assert col in res.output
    assert dev in res.output and "READY" in res.output


def test_manifest_validate(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(ralctl.cli, ["manifest", "validate", str(MANIFEST), "--json"])
    assert ok.exit_code == OK and json.loads(ok.output)["valid"] is True
    doc = json.loads(MANIFEST.read_text())
    doc["kernels"][1]["max_rank"] = "eight"
    bad = tmp_path / "manifest.json"
    bad.write_text(json.dumps(doc))
    res = runner.invoke(ralctl.cli, ["manifest", "validate", str(bad)])
    assert res.exit_code == PROBLEM
    assert "kernels[1]" in res.output and "max_rank" in res.output
    res = runner.invoke(ralctl.cli, ["manifest", "validate", str(bad), "--json"])
    assert res.exit_code == PROBLEM and json.loads(res.output)["valid"] is False
    truncated = tmp_path / "cut.json"
    truncated.write_text(MANIFEST.read_text()[:60])
    res = runner.invoke(ralctl.cli, ["manifest", "validate", str(truncated)])
    assert res.exit_code == PROBLEM and "not valid JSON" in res.output
    assert runner.invoke(ralctl.cli, ["manifest", "validate", str(tmp_path / "absent.json")]).exit_code == USAGE


def test_import_torch_fl_without_torch_stays_torch_free():
    # The console tools import torch_fl before torch: they must get the torch-free core
    # only, and a public name must still work on demand (it loads the torch-facing API).
    code = (
        "import sys, torch_fl, torch_fl.core.runtime, torch_fl.core.registry, torch_fl.tools.ralctl\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
        "mode = torch_fl.ral_mode\n"
        "import torch\n"
        "print(mode.__name__, torch.ones(2, device='ral:0').sum().item())\n"
    )
    res = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["ral_mode", "2.0"]
    # A script that imports torch_fl before torch still gets the device once torch arrives.
    late = "import torch_fl\nimport torch\nprint(torch.ones(3, device='ral:0').sum().item())\n"
    res = subprocess.run([sys.executable, "-c", late], env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and res.stdout.split() == ["3.0"], res.stderr[-3000:]
