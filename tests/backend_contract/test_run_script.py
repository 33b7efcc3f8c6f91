"""`python -m torch_fl.run --device ral:N script.py args` runs a script exactly as
`python script.py args` would (sys.path[0], __file__, sys.argv, __name__, exit code), with its
tensors on the device; checked against a plain `python script.py` run of the same script."""

import json
import os
import subprocess
import sys

import pytest
import torch

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

SCRIPT = """
import json, sys
import helper_beside  # a module next to the script: needs sys.path[0] == the script's folder
import torch
print(json.dumps({
    "path0": sys.path[0], "file": __file__, "argv": sys.argv, "name": __name__,
    "helper": helper_beside.VALUE, "device": str(torch.ones(2).device),
    "value": float((torch.arange(4.0) * 2).sum()),
}))
code = sys.argv[1] if len(sys.argv) > 1 else "0"
if code == "raise":
    raise ValueError("boom from the script")
sys.exit(int(code))
"""


@pytest.fixture
def script(tmp_path):
    folder = tmp_path / "proj"
    folder.mkdir()
    (folder / "helper_beside.py").write_text("VALUE = 41\n")
    (folder / "main.py").write_text(SCRIPT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    return folder / "main.py", elsewhere


def _run(cmd, cwd):
    env = dict(os.environ)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _report(r):
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"no report: rc={r.returncode} stderr={r.stderr[-2000:]}"
    return json.loads(lines[-1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("relative", [False, True])
def test_runs_as_python_script_would(script, device, relative):
    path, elsewhere = script
    arg = os.path.relpath(path, elsewhere) if relative else str(path)
    plain = _run([sys.executable, arg, "0", "--flag"], elsewhere)
    ral = _run([sys.executable, "-m", "torch_fl.run", "--device", device, arg, "0", "--flag"], elsewhere)
    assert plain.returncode == 0 and ral.returncode == 0, ral.stderr[-2000:]
    want, got = _report(plain), _report(ral)
    assert want["device"] == "cpu" and got["device"] == device
    for key in ("path0", "file", "argv", "name", "helper", "value"):
        assert got[key] == want[key], key
    assert got["path0"] == os.path.dirname(os.path.realpath(path))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("code", ["0", "3", "raise"])
def test_exit_code_is_the_scripts(script, device, code):
    # the exit codes `python main.py <code>` gives (test_runs_as_python_script_would compares
    # a plain run's report; a plain run here only cost a second process per case)
    path, elsewhere = script
    ral = _run([sys.executable, "-m", "torch_fl.run", "--device", device, str(path), code], elsewhere)
    assert ral.returncode == {"0": 0, "3": 3, "raise": 1}[code], ral.stderr[-2000:]
    if code == "raise":
        assert "ValueError: boom from the script" in ral.stderr


def test_missing_script_fails_as_python_does(tmp_path):
    plain = _run([sys.executable, "nope.py"], tmp_path)
    ral = _run([sys.executable, "-m", "torch_fl.run", "nope.py"], tmp_path)
    assert ral.returncode == plain.returncode == 2
    assert "can't open file" in ral.stderr and "nope.py" in ral.stderr
