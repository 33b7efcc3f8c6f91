"""native_batch_norm and its backward as vendor kernels (plugins/host/bn.c, plugins/opencl/bn.c),
against CPU.

BatchNorm1d/2d/3d in training (batch statistics, running statistics updated in place with
momentum) and eval (running statistics), with and without affine parameters, forward values,
all gradients and the running statistics, on ral:0 and ral:1, in both styles. On both
devices the calls must run in the vendor tier (ral:1 in float32: PoCL's dtype_mask has no half
types), float16 and bfloat16 included on ral:0 (test_half_types: for half inputs CPU returns
save_mean/save_invstd in the input dtype unless a float32 parameter makes the call mixed,
where the meta kernel always says float32; the vendor tier follows CPU).
Calls missing the statistics PyTorch's CPU kernel dereferences raise instead of crashing, and
certify's synthesized batch-norm calls are ones CPU accepts (both in child processes).
Tolerances: float32 rtol/atol 1e-4 (per-channel sums in double, then float); float16 /
bfloat16 2e-2 / 5e-2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import plugin_device

import torch_fl

REPO = Path(__file__).resolve().parent.parent
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-2), torch.bfloat16: (5e-2, 5e-2)}


def _step(mod, x, grad):
    """One forward + backward; returns output, input grad, param grads, running stats."""
    x = x.detach().requires_grad_()
    y = mod(x)
    (y * grad).sum().backward()
    params = [p.grad for p in mod.parameters()]
    stats = [mod.running_mean, mod.running_var] if mod.track_running_stats else []
    return [y, x.grad, *params, *stats]


SHAPES = {1: (8, 5), 2: (4, 5, 6, 7), 3: (2, 5, 3, 4, 5)}
MODULES = {1: torch.nn.BatchNorm1d, 2: torch.nn.BatchNorm2d, 3: torch.nn.BatchNorm3d}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_batch_norm_matches_cpu(nd, training, affine, which, style):
    dev = plugin_device(which)
    torch.manual_seed(0)
    ref = MODULES[nd](5, affine=affine, momentum=0.3)
    with torch.no_grad():
        ref.running_mean.uniform_(-1, 1)
        ref.running_var.uniform_(0.5, 2)
        if affine:
            ref.weight.uniform_(0.5, 1.5)
            ref.bias.uniform_(-1, 1)
    ref.train(training)
    mod = type(ref)(5, affine=affine, momentum=0.3)
    mod.load_state_dict(ref.state_dict())
    mod.train(training)
    x, grad = torch.randn(SHAPES[nd]) * 2 + 0.5, torch.randn(SHAPES[nd])
    want = _step(ref, x, grad)
    with torch_fl.coverage() as cov:
        if style == "to":
            mod = mod.to(dev)
            got = _step(mod, x.to(dev), grad.to(dev))
        else:
            with torch_fl.ral_mode(dev):
                got = _step(mod, x, grad)
    for k, (a, e) in enumerate(zip(got, want)):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4, msg=f"result {k}")
    ran = cov.ops_in_tier("vendor")
    assert "aten::native_batch_norm" in ran and "aten::native_batch_norm_backward" in ran, cov.counts


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_half_types(which, dtype):
    """A half BatchNorm2d training step (values, gradients, running statistics) against the
    same module on CPU; on ral:0 both ops run in the vendor tier."""
    dev = plugin_device(which)
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm2d(5, momentum=0.3).to(dtype)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    mod = torch.nn.BatchNorm2d(5, momentum=0.3).to(dtype)
    mod.load_state_dict(ref.state_dict())
    x, grad = (torch.randn(4, 5, 6, 6) * 2 + 0.5).to(dtype), torch.randn(4, 5, 6, 6).to(dtype)
    want = _step(ref, x, grad)
    with torch_fl.coverage() as cov:
        got = _step(mod.to(dev), x.to(dev), grad.to(dev))
    rtol, atol = TOL[dtype]
    for k, (a, e) in enumerate(zip(got, want)):
        assert a.dtype == e.dtype, k
        torch.testing.assert_close(a.cpu().float(), e.float(), rtol=rtol, atol=atol, msg=f"result {k}")
    if which == "host":
        ran = cov.ops_in_tier("vendor")
        assert "aten::native_batch_norm" in ran and "aten::native_batch_norm_backward" in ran, cov.counts


@pytest.mark.parametrize("params", ["half", "float32", "none"])
@pytest.mark.parametrize("which", ["host", "opencl"])
def test_half_saved_statistics_are_typed_as_on_cpu(which, params):
    """save_mean/save_invstd of a half input: the input's dtype, float32 when a float32
    parameter makes the call mixed; values within half precision of CPU's."""
    dev = plugin_device(which)
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5).half()
    pdt = {"half": torch.float16, "float32": torch.float32, "none": None}[params]
    ps = [None] * 4 if pdt is None else [torch.rand(3, dtype=pdt) + 0.5, torch.randn(3, dtype=pdt)]
    if pdt is not None:
        ps += [torch.zeros(3, dtype=pdt), torch.ones(3, dtype=pdt)]
    want = torch.ops.aten.native_batch_norm(x, *ps, True, 0.1, 1e-5)
    dps = [None if t is None else t.to(dev) for t in ps]
    got = torch.ops.aten.native_batch_norm(x.to(dev), *dps, True, 0.1, 1e-5)
    for a, e in zip(got, want):
        assert a.dtype == e.dtype and a.shape == e.shape
        torch.testing.assert_close(a.cpu().float(), e.float(), rtol=2e-2, atol=2e-2)


# Calls the schema allows but PyTorch's CPU kernel crashes the process on (torch 2.13:
# SIGSEGV): eval mode without running statistics, a training backward without the saved
# ones. The router refuses them (dispatch/argument_checks.py) before any tier runs: the cpu
# tier would hand them to that kernel. name -> (op, arguments over x, g, rm, rv, sm, si, why)
MISSING_STATS = {
    "forward eval, no running stats": (
        "native_batch_norm",
        "x, None, None, None, None, False, 0.1, 1e-5",
        "running_mean and running_var must not be None in eval mode",
    ),
    "forward eval, no running_var": (
        "native_batch_norm",
        "x, None, None, rm, None, False, 0.1, 1e-5",
        "running_mean and running_var must not be None in eval mode",
    ),
    "backward eval, no running stats": (
        "native_batch_norm_backward",
        "g, x, None, None, None, sm, si, False, 1e-5, [True] * 3",
        "running_mean and running_var must not be None in eval mode",
    ),
    "backward training, no saved stats": (
        "native_batch_norm_backward",
        "g, x, None, rm, rv, None, None, True, 1e-5, [True] * 3",
        "save_mean and save_invstd must not be None in training",
    ),
}


@pytest.mark.parametrize("which", ["host", "opencl"])
def test_missing_statistics_raise_and_device_keeps_working(which):
    """Each call would kill the process on CPU; on ral it raises RuntimeError naming the op
    and the missing argument, and the device keeps computing, in both styles. All cases run in
    one child process, each reporting before it starts, so a regression shows as a failure
    naming the case that killed the child, not as a dead test run."""
    dev = plugin_device(which)
    cases = [(style, case, *MISSING_STATS[case]) for style in ("to", "mode") for case in sorted(MISSING_STATS)]
    code = f"""
import contextlib, torch, torch_fl
dev = {dev!r}
for style, case, op, call_args, why in {cases!r}:
    print("START", style, case, flush=True)
    x, g = torch.randn(4, 3, 5), torch.randn(4, 3, 5)
    rm, rv, sm, si = torch.zeros(3), torch.ones(3), torch.zeros(3), torch.ones(3)
    if style == "to":
        x, g, rm, rv, sm, si = (t.to(dev) for t in (x, g, rm, rv, sm, si))
        ctx = contextlib.nullcontext()
    else:
        ctx = torch_fl.ral_mode(dev)
    with ctx:
        try:
            eval(f"torch.ops.aten.{{op}}({{call_args}})")
            outcome = "NO ERROR"
        except RuntimeError as exc:
            outcome = "RAISED" if f"{{op}}: {{why}}" in str(exc) else "OTHER MESSAGE: " + str(exc)
        y = torch.nn.functional.batch_norm(x.to(dev), None, None, training=True).cpu()
    ref = torch.nn.functional.batch_norm(x.cpu(), None, None, training=True)
    torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4)
    print("RESULT", style, case, "|", outcome, flush=True)
"""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    started = [ln for ln in proc.stdout.splitlines() if ln.startswith("START")]
    assert proc.returncode == 0, f"child exited with {proc.returncode} in {started[-1:]}: {proc.stderr[-2000:]}"
    results = dict(ln[len("RESULT ") :].split(" | ") for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    assert results == {f"{style} {case}": "RAISED" for style, case, *_ in cases}, proc.stdout


@pytest.mark.parametrize("which", ["host", "opencl"])
@pytest.mark.parametrize("op", ["aten::native_batch_norm", "aten::native_batch_norm_backward"])
def test_certify_entry_inputs_are_ones_cpu_accepts(op, which):
    """certify fed native_batch_norm eval mode without running statistics, and PyTorch's CPU
    reference crashed certify's child (exit -11); its synthesized calls now carry real
    per-channel statistics, and each plugin's entry passes against CPU (in a child process)."""
    plugin_device(which)
    code = f"""
from torch_fl.tools.certify_child import run_entry
import torch_fl
pd = next(st.record.dir for st in torch_fl.plugins() if st.record.name == {which!r})
for rank in (2, 4):
    for variant in ("contiguous", "offset"):
        r = run_entry(str(pd), {op!r}, "float32", rank, variant)
        assert r["passed"] and not r["skipped"], r
print("PASSED")
"""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "PASSED" in proc.stdout, f"exit {proc.returncode}: {proc.stderr[-2000:]}"
