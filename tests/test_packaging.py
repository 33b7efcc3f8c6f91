"""Packaging: the "torch.backends" autoload entry point, the late-import guard, and the sdist.

Autoload is tested without installing anything: a throwaway *.dist-info folder on PYTHONPATH
declares the same entry point as pyproject.toml, which is all importlib.metadata looks at.
The wheel itself is built and smoke-tested in a fresh venv by .ci/wheel_smoke.sh.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile

import pytest
import tomllib
from conftest import REPO, run_python


def _entry_point() -> str:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return data["project"]["entry-points"]["torch.backends"]["ral"]


@pytest.fixture(scope="module")
def dist_info_root(tmp_path_factory):
    """A folder holding a dist-info that declares the pyproject's torch.backends entry point."""
    root = tmp_path_factory.mktemp("site")
    info = root / "torch_fl_autoload_probe-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_fl_autoload_probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[torch.backends]\nral = {_entry_point()}\n")
    return root


def test_entry_point_targets_the_autoload_module():
    assert _entry_point() == "torch_fl.autoload:load"


def test_import_torch_alone_loads_ral(dist_info_root):
    proc = run_python(
        """
        import sys, torch
        assert "torch_fl" in sys.modules, "autoload did not import torch_fl"
        x = torch.arange(6.0, device="ral:0").reshape(2, 3)
        torch.testing.assert_close((x * 2).sum(0).cpu(), torch.arange(6.0).reshape(2, 3).mul(2).sum(0))
        print("OK", torch.ral.device_count())
        """,
        env={"PYTHONPATH": str(dist_info_root), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr


def test_autoload_off_leaves_torch_alone(dist_info_root):
    proc = run_python(
        """
        import sys, torch
        print("LOADED" if "torch_fl" in sys.modules else "NOT_LOADED")
        """,
        env={"PYTHONPATH": str(dist_info_root), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "NOT_LOADED"


def test_autoloaded_backward_needs_no_workaround(dist_info_root):
    # Autoloaded before any backward: the engine has ral queues; multithreading stays on.
    proc = run_python(
        """
        import torch
        a = torch.ones(3, requires_grad=True); a.sum().backward()
        x = torch.ones(3, device="ral:0", requires_grad=True)
        (x * 2).sum().backward()
        torch.testing.assert_close(x.grad.cpu(), torch.full((3,), 2.0))
        assert torch._C._is_multithreading_enabled()
        print("OK")
        """,
        env={"PYTHONPATH": str(dist_info_root), "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


LATE_IMPORT = """
import torch
w = torch.randn(4, 3, requires_grad=True)
(w * w).sum().backward()                    # starts the autograd engine before ral exists
import torch_fl
dev = "ral:{index}"
x = torch.randn(5, 4)
xd = x.to(dev).requires_grad_()
xc = x.clone().requires_grad_()
torch.tanh(xd @ w.detach().to(dev)).sum().backward()
torch.tanh(xc @ w.detach()).sum().backward()
torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1.3e-6, atol=1e-5)
print("OK")
"""


@pytest.mark.parametrize("index", [0, 1])
def test_late_import_after_cpu_backward_works(index):
    proc = run_python(LATE_IMPORT.format(index=index), env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    if index == 1 and "ral:1" in proc.stderr and "invalid device" in proc.stderr.lower():
        pytest.skip("no ral:1 on this machine")
    assert "INTERNAL ASSERT" not in proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout
    # The workaround is announced once, with what to do instead.
    assert proc.stderr.count("imported after autograd had already run a backward") == 1
    assert "import torch_fl before the first backward" in proc.stderr


@pytest.mark.parametrize(
    "first, autoload",
    [("torch_fl.mode", "1"), ("torch_fl.tensor.ral_tensor", "0"), ("torch_fl.distributed", "1")],
)
def test_first_import_of_a_submodule_registers_the_device(first, autoload):
    # Its `import torch` runs while the submodule is half-built; the api must load at its end,
    # not fail inside torch's autoload with a partial-import error.
    proc = run_python(
        f"""
        import {first}, torch
        x = torch.ones(2, device="ral:0") * 3
        assert x.cpu().tolist() == [3.0, 3.0]
        print("OK")
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": autoload},
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_normal_import_is_silent_and_keeps_multithreading():
    proc = run_python(
        """
        import warnings
        warnings.simplefilter("error")
        import torch, torch_fl
        x = torch.ones(2, device="ral:0", requires_grad=True)
        (x * 3).sum().backward()
        assert torch._C._is_multithreading_enabled()
        print("OK")
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


@pytest.mark.skipif(not (REPO / "setup.py").exists(), reason="no source tree: running against an installed wheel")
def test_sdist_carries_native_sources(tmp_path):
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (sdist,) = tmp_path.glob("torch_fl-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in (
        "setup.py",
        "pyproject.toml",
        "torch_fl/_native/build_runtime.py",
        "torch_fl/_native/loader.c",
        "torch_fl/_native/include/ral_plugin.h",
        "torch_fl/device/guard/ral_guard.cpp",
        "plugins/host/Makefile",
        "plugins/host/plugin.c",
        "plugins/opencl/kernels/common.cl",
        "plugins/template/template.c",
        "manifests/host.json",
        "manifests/schema.json",
    ):
        assert needed in names, needed
    assert not any(n.endswith((".so", ".o")) for n in names)
