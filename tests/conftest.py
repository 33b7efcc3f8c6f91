"""Shared fixtures: the device under test, CPU-reference comparison, subprocess runner."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import torch_fl

REPO = Path(__file__).resolve().parent.parent
# The device the capability tests run on. TORCH_FL_TEST_DEVICE=ral:1 reruns them on the
# second plugin (e.g. OpenCL) with only the device string changed.
DEVICE = os.environ.get("TORCH_FL_TEST_DEVICE", "ral:0")


def _extract_test_fn_by_frames():
    """torch.testing's common_utils.extract_test_fn with the same frame walk, without
    inspect.stack(): that reads the source of every frame and scans sys.modules for each
    one, which under pytest's deep stacks cost ~25 ms per sample_inputs/error_inputs call
    (`TrackedInputIter` asks once per call) and most of some OpInfo tests' time."""
    import unittest

    try:
        frame = sys._getframe(1)
        while frame is not None:
            self_val = frame.f_locals.get("self")
            frame = frame.f_back
            if isinstance(self_val, unittest.TestCase):
                *_, cls_name, test_name = self_val.id().rsplit(".", 2)
                if cls_name == type(self_val).__name__ and test_name.startswith("test"):
                    return getattr(self_val, test_name).__func__
    except Exception:  # noqa: BLE001 - as the original: no test function found
        pass
    return None


def _install_cheap_input_tracking() -> None:
    from torch.testing._internal import common_utils

    if callable(getattr(common_utils, "extract_test_fn", None)):
        common_utils.extract_test_fn = _extract_test_fn_by_frames


_install_cheap_input_tracking()


def host_device_present() -> bool:
    return any(p.record.name == "host" and p.devices for p in torch_fl.plugins())


def opencl_device() -> str | None:
    """ "ral:N" of the loaded OpenCL plugin's first device, or None (not built, no platform)."""
    p = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
    if p is None or p.record.status != "LOADED" or not p.devices:
        return None
    return f"ral:{p.devices[0]}"


def plugin_device(which: str) -> str:
    """ "ral:0" for "host", the OpenCL plugin's device for "opencl"; skips when it is absent."""
    if which == "host":
        if not host_device_present():
            pytest.skip("host plugin not built")
        return "ral:0"
    d = opencl_device()
    if d is None:
        pytest.skip("no OpenCL plugin/platform")
    return d


@pytest.fixture(autouse=True)
def _current_device_back_to_0():
    """Each test ends on ral:0, where a fresh process starts: the current device is process
    state (per thread), and xdist runs many test files in one worker."""
    yield
    from torch_fl.core import runtime

    if runtime.is_initialized() and torch.ral.current_device() != 0:
        torch.ral.set_device(0)


@pytest.fixture
def young_gc():
    """gc.collect() inside the test walks only the objects made since it began: the rest are
    frozen (gc.freeze) until it ends. Tests that collect to see a tensor die call it often, and
    after thousands of tests a worker's full collection took ~1 s each (test_memory_release:
    1.9 s a test in CI against 0.3 s alone)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture(scope="session")
def dev() -> str:
    """The ral device string under test; skips everything if no ral device exists."""
    if torch.ral.device_count() == 0:
        pytest.skip("no ral device: the host plugin was not built (run .ci/setup.sh)")
    return DEVICE


def assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    """Compare a ral result with its CPU reference (moved to CPU first)."""
    if isinstance(actual, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol, atol)
        return
    if isinstance(actual, torch.Tensor):
        assert actual.device.type == "ral", f"result left the device: {actual.device}"
        actual = actual.cpu()
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)


def dnnl_loads() -> bool:
    """Whether oneDNN 2.x (Debian's libdnnl.so.2, which the plugins dlopen) loads here."""
    import ctypes

    try:
        ctypes.CDLL("libdnnl.so.2")
    except OSError:
        return False
    return True


def native_bf16() -> bool:
    """Whether this CPU has the bfloat16 arithmetic oneDNN 2.x uses (AVX512-BF16 or AMX-BF16)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


SHARED_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torch_fl"


def private_cache_home(root: Path, share=("guard",)) -> str:
    """A fresh XDG_CACHE_HOME at `root` for a child process whose torch_fl/<name>, for each
    name in `share`, links to this user's own cache: a test of one private cache (jit kernels,
    OpenCL programs, crash markers) need not rebuild the others, the device-guard shim above
    all (~6.5 s of g++ in every child that starts without it)."""
    private = root / "torch_fl"
    private.mkdir(parents=True, exist_ok=True)
    for name in share:
        if (SHARED_CACHE / name).is_dir() and not (private / name).exists():
            (private / name).symlink_to(SHARED_CACHE / name)
    return str(root)


def run_python(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (for settings that are fixed at import time)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(REPO) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def digests_across_budgets(code: str, budgets=("1", "2")) -> set:
    """The last stdout word of code (a digest it prints) run once per TORCH_FL_HOST_THREADS
    budget, each in a fresh interpreter; one element when the bits do not depend on it."""
    digests = set()
    for threads in budgets:
        out = run_python(code, env={"TORCH_FL_HOST_THREADS": threads})
        assert out.returncode == 0, out.stderr[-2000:]
        digests.add(out.stdout.split()[-1])
    return digests


def opencl_kernels_run(code: str, tmp_path) -> str:
    """The OpenCL plugin's kernel profile (`TORCH_FL_OPENCL_PROFILE`, a line per kernel) of
    `code` run in a fresh interpreter, which must print CHILD-DONE."""
    prof = tmp_path / "kernels.txt"
    out = run_python(code, env={"TORCH_FL_OPENCL_PROFILE": str(prof)})
    assert out.returncode == 0 and "CHILD-DONE" in out.stdout, out.stderr[-3000:]
    return prof.read_text()


def launch_count(device_index: int = 0) -> int:
    """How many kernel launches reached the plugin of a device so far."""
    from torch_fl._native import lib

    return lib.rt_launch_count(device_index)


@pytest.fixture
def sources(monkeypatch):
    """The source of every fused kernel compiled while the test runs."""
    from torch_fl.jit import fusion

    seen = []
    real = fusion.compile_kernel

    def spy(target, source, name):
        seen.append(source)
        return real(target, source, name)

    monkeypatch.setattr(fusion, "compile_kernel", spy)
    return seen
