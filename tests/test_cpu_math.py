"""The VML warm-up (torch_fl/tiers/cpu_math.py): PyTorch's MKL-backed CPU math gives its
accurate results in a process that uses a ral device, the first call included.

pytorch/pytorch#188792: a fresh process's first VML call, run by two intra-op threads at
once, can return one thread's chunk from the low-accuracy AVX2 EP kernel. Measured here
(`TORCH_FL_VML_WARMUP=0` against 1, alternating fresh processes beside a process looping
ral:0 GEMMs, `torch.tanh` of 10^6 floats as the first VML call): see the storm test below.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from conftest import run_python

from torch_fl.core.discovery import elf_dynamic_symbols
from torch_fl.tiers import cpu_math

needs_mkl = pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch has no MKL: no VML")


def _child(code: str, **env) -> str:
    out = run_python(code, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@needs_mkl
def test_every_vml_function_torch_exports_is_warmed():
    """The list is checked against the library: a torch that links another vms*/vmd* function
    (a new VML-routed op) fails here until VML_FUNCTIONS names it."""
    lib = cpu_math.torch_cpu_library()
    if not lib.exists():
        pytest.skip(f"{lib} is not where this torch keeps libtorch_cpu")
    names, problem = elf_dynamic_symbols(lib)
    assert problem is None, problem
    exported = {n for n in names if n[:3] in ("vms", "vmd") and n[3:4].isupper() and n.isalnum()}
    assert exported, "no VML symbols found in an MKL build of torch"
    warmed = {p + f for p in ("vms", "vmd") for f in cpu_math.VML_FUNCTIONS}
    assert exported <= warmed, sorted(exported - warmed)


@needs_mkl
def test_warm_up_runs_once_at_the_first_device_use():
    out = _child(
        """
        import torch, torch_fl
        from torch_fl.tiers import cpu_math
        print("before", cpu_math._warmed)
        torch.ral.device_count()
        print("after", len(cpu_math._warmed))
        print("again", cpu_math.warm_vml())
        """
    )
    expected = 2 * len(cpu_math.VML_FUNCTIONS)
    assert out.split("\n")[:3] == ["before None", f"after {expected}", "again []"], out


@needs_mkl
def test_warm_up_calls_the_library_even_inside_modes():
    """Initialisation inside ral_mode or a FakeTensorMode (tracing) still calls the real VML
    functions: the warm-up goes to the symbols, not through torch ops a mode could redirect."""
    out = _child(
        """
        import torch, torch_fl
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch_fl.tiers import cpu_math
        with FakeTensorMode():
            with torch_fl.ral_mode("ral:0"):
                y = torch.ones(3) * 2
        print(len(cpu_math._warmed), type(y).__name__)
        """
    )
    assert out.split() == [str(2 * len(cpu_math.VML_FUNCTIONS)), "FakeTensor"], out


@needs_mkl
def test_switched_off_by_the_environment():
    out = _child(
        """
        import torch, torch_fl
        from torch_fl.tiers import cpu_math
        torch.ral.device_count()
        print(cpu_math._warmed, cpu_math.warm_vml())
        """,
        TORCH_FL_VML_WARMUP="0",
    )
    assert out.strip() == "None []", out


@needs_mkl
@pytest.mark.slow
def test_first_vml_call_is_accurate_beside_a_busy_neighbour():
    """The race needs the two intra-op threads to start VML's first call together, which a
    neighbour taking the cores makes likely: 40 fresh processes, each comparing its first
    float32 tanh of 10^6 values with its second, bit for bit."""
    busy = subprocess.Popen(
        [sys.executable, "-c", "import torch\nx=torch.randn(512,512)\nwhile True: x @ x"],
        env=dict(os.environ, OMP_NUM_THREADS="2"),
    )
    try:
        code = """
            import torch, torch_fl
            torch.ral.device_count()
            big = torch.randn(1_000_003, generator=torch.Generator().manual_seed(0))
            first, second = torch.tanh(big), torch.tanh(big)
            print(int(torch.equal(first, second)))
            """
        same = [_child(code).strip() for _ in range(40)]
    finally:
        busy.kill()
    assert same.count("1") == len(same), f"{same.count('0')} of {len(same)} first calls differed"
