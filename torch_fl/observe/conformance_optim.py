"""Conformance against PyTorch's OptimizerInfo database (common_optimizers.optim_db): every
optimizer input, in its for-loop, foreach and fused variants where CPU supports them, takes
several steps of a small nonlinear least-squares problem (one that LBFGS does not solve
exactly in its steps, where its curvature state would be rounding noise) on a ral device (both styles); parameters and
optimizer state must equal the same steps on CPU. Used by tests/test_optim_db.py and
`python -m torch_fl.tools.sweep optim`.
"""

from __future__ import annotations

import time

import torch

from torch_fl.mode import ral_mode
from torch_fl.observe.conformance import CaseResult, _cpu

STEPS = 3
# Several steps compound rounding: state tolerances are a little looser than one op's.
RTOL, ATOL = 1e-4, 1e-5


def load_optim_db():
    """PyTorch's OptimizerInfo list (imported lazily: it takes seconds)."""
    from torch.testing._internal.common_optimizers import optim_db

    return optim_db


def impls(info) -> list[str]:
    """The variants CPU supports: "forloop" always, "foreach", and "fused" where CPU has it."""
    out = ["forloop"]
    if "foreach" in info.supported_impls:
        out.append("foreach")
    if "fused" in info.supported_impls and "cpu" in info.supports_fused_on:
        out.append("fused")
    return out


def _problem(info, dtype):
    """Parameters and data (CPU); Muon takes 2-D parameters only."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(4, 3, generator=g, dtype=dtype)
    b = torch.randn(3, generator=g, dtype=dtype)
    x = torch.randn(5, 4, generator=g, dtype=dtype)
    y = torch.randn(5, 3, generator=g, dtype=dtype)
    params = [w] if info.name == "Muon" else [w, b]
    return params, x, y


def _steps(info, kwargs, params, x, y):
    """STEPS optimizer steps; returns (params, state tensors) on CPU."""
    params = [p.detach().clone().requires_grad_(True) for p in params]
    opt = info.optim_cls(params, **kwargs)

    def closure():
        opt.zero_grad()
        pred = x @ params[0] + (params[1] if len(params) > 1 else 0)
        loss = ((torch.tanh(pred) - y) ** 2).mean()
        loss.backward()
        return loss

    for _ in range(STEPS):
        opt.step(closure)
    state = []
    for p in params:
        for k, v in sorted(opt.state[p].items()):
            if isinstance(v, torch.Tensor):
                state.append((k, v.detach()))
            elif isinstance(v, (int, float)):
                state.append((k, torch.tensor(float(v))))
    return _cpu([p.detach() for p in params]), [(k, _cpu(v)) for k, v in state]


def case_names(info) -> list[tuple[str, object, str]]:
    """(case id, OptimizerInput, impl) for every input and supported variant of one optimizer."""
    out = []
    for oi in info.optim_inputs_func(device="cpu", dtype=torch.float32):
        for impl in impls(info):
            out.append((f"{info.name}.{oi.desc.replace(' ', '_')}.{impl}", oi, impl))
    return out


def run_optim_case(info, oi, impl, dev, style="device", dtype=torch.float32) -> CaseResult:
    """One optimizer input in one variant on `dev`: params and state after STEPS steps equal
    CPU's (or the device raises what CPU raises)."""
    name = f"{info.name}.{oi.desc.replace(' ', '_')}.{impl}"
    t0 = time.perf_counter()
    # LBFGS runs up to 20 inner iterations per step, which amplify float32 rounding
    # differences (another summation order) past any fixed tolerance: it compares in float64.
    dtype = torch.float64 if info.name == "LBFGS" else dtype
    kwargs = dict(oi.kwargs)
    if impl != "forloop":
        kwargs[impl] = True
    params, x, y = _problem(info, dtype)
    error = ""
    try:
        expected = _steps(info, kwargs, params, x, y)
        expected_exc = None
    except Exception as exc:
        expected, expected_exc = None, exc
    try:
        if style == "mode":
            with ral_mode(dev):
                actual = _steps(info, kwargs, params, x, y)
        else:
            actual = _steps(info, kwargs, [p.to(dev) for p in params], x.to(dev), y.to(dev))
        if expected_exc is not None:
            error = f"CPU raised {type(expected_exc).__name__} but ral did not"
        else:
            (ap, ast), (ep, est) = actual, expected
            torch.testing.assert_close(ap, ep, rtol=RTOL, atol=ATOL, check_device=False)
            if [k for k, _ in ast] != [k for k, _ in est]:
                raise AssertionError(f"state keys differ: {[k for k, _ in ast]} vs {[k for k, _ in est]}")
            for (k, a), (_, e) in zip(ast, est):
                try:
                    torch.testing.assert_close(a, e, rtol=RTOL, atol=ATOL, check_device=False, equal_nan=True)
                except AssertionError as exc:
                    raise AssertionError(f"state {k!r}: {str(exc).splitlines()[0]}") from None
    except Exception as exc:
        if not (expected_exc is not None and isinstance(exc, type(expected_exc))):
            msg = str(exc).splitlines()[0][:300] if str(exc) else ""
            error = f"{type(exc).__name__}: {msg}"
    dname = str(dtype).replace("torch.", "")
    return CaseResult(name, dname, style, not error, STEPS, {}, error, time.perf_counter() - t0, dev)
