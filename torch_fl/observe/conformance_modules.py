"""Conformance against PyTorch's ModuleInfo database (common_modules.module_db): forward
outputs, input gradients, parameter gradients and buffers of every sample on a ral device,
in both styles, compared with the same module run on CPU. Used by tests/test_module_db.py
and `python -m torch_fl.tools.sweep module`.
"""

from __future__ import annotations

import copy
import time

import torch

from torch_fl.mode import ral_mode
from torch_fl.observe.conformance import TOLERANCES, CaseResult, _compare, _cpu, _seed, _to

# Modules whose forward draws from the RNG in training mode (dropout-like, fractional
# pooling): devices need not reproduce CPU's random stream, so only shapes and dtypes compare.
RANDOM_MODULES = {"nn.FractionalMaxPool2d", "nn.FractionalMaxPool3d", "nn.RReLU", "nn.Dropout"}


def load_module_db():
    """PyTorch's ModuleInfo list (imported lazily: it takes seconds)."""
    from torch.testing._internal.common_modules import module_db

    return module_db


def _tensors(v):
    return [x for x in torch.utils._pytree.tree_leaves(v) if isinstance(x, torch.Tensor)]


def _grad_weights(out):
    """Fixed cotangents for the floating outputs (a plain sum would hide permutations)."""
    g = torch.Generator().manual_seed(1234)
    return [torch.rand(o.shape, generator=g, dtype=o.dtype) + 0.5 for o in _tensors(out) if o.is_floating_point()]


def _run(module, fwd_args, fwd_kwargs, weights_dev=None):
    """Forward, then backward through the floating outputs; returns (out, input grads,
    param grads, buffers) with every tensor on CPU."""
    out = module(*fwd_args, **fwd_kwargs)
    floats = [o for o in _tensors(out) if o.is_floating_point() and o.requires_grad]
    ins = [x for x in _tensors((fwd_args, fwd_kwargs)) if x.requires_grad]
    params = [p for p in module.parameters() if p.requires_grad]
    in_grads, p_grads = [], []
    if floats and (ins or params):
        weights = _grad_weights(out)
        weights = [w.to(o.device) if weights_dev else w for w, o in zip(weights, floats)]
        loss = sum((o * w).sum() for o, w in zip(floats, weights))
        loss.backward()
        in_grads = [x.grad for x in ins]
        p_grads = [p.grad for p in params]
    buffers = [b for b in module.buffers()]
    return _cpu(_detach(out)), _cpu(in_grads), _cpu(p_grads), _cpu(buffers)


def _detach(v):
    return torch.utils._pytree.tree_map(lambda x: x.detach() if isinstance(x, torch.Tensor) else x, v)


def _fresh(v):
    """A copy of the sample's tensors with the same requires_grad (each run gets its own)."""

    def one(x):
        if not isinstance(x, torch.Tensor):
            return x
        c = x.detach().clone()
        return c.requires_grad_(x.requires_grad)

    return torch.utils._pytree.tree_map(one, v)


def _leaf_to(v, dev):
    return torch.utils._pytree.tree_map(
        lambda x: _to(x.detach(), dev).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x, v
    )


def _compare_part(part, actual, expected, dtype, shapes_only):
    """Compare one part of a run. Gradients sum many products: an element that cancels to
    near zero keeps the rounding of its largest terms, so their absolute tolerance scales with
    the largest gradient of the tensor (atol * max(1, max|g|))."""
    try:
        if part.endswith("grads") and not shapes_only and len(actual) == len(expected):
            rtol, atol = TOLERANCES.get(dtype, (1.3e-6, 1e-5))
            for a, e in zip(actual, expected):
                scale = float(e.abs().max()) if isinstance(e, torch.Tensor) and e.numel() else 1.0
                scale = scale if scale == scale and scale != float("inf") else 1.0  # NaN/inf: no scaling
                _compare(a, e, dtype, tolerance=(rtol, atol * max(1.0, scale)))
        else:
            _compare(actual, expected, dtype, exact_shape_only=shapes_only)
    except AssertionError as exc:
        raise AssertionError(f"{part}: {str(exc).splitlines()[0]}") from None


def _build(info, cons, training):
    _seed(0)
    m = info.module_cls(*cons.args, **cons.kwargs)
    return m.train(training)


def _is_random(info, cons, fwd, training) -> bool:
    if info.name in RANDOM_MODULES:
        return True
    if not training:
        return False
    try:
        m = _build(info, cons, training)
        _seed(0)
        a = m(*_fresh(fwd.args), **_fresh(fwd.kwargs))
        _seed(1)
        b = m(*_fresh(fwd.args), **_fresh(fwd.kwargs))
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
        return False
    except AssertionError:
        return True
    except Exception:
        return False


def _materialize(module, args, kwargs):
    with torch.no_grad():
        module(*_fresh(args), **_fresh(kwargs))


def _lazy_on(lazy, init, dev, fwd):
    """The lazy module moved to `dev` before its first forward (it materializes there), then
    given the CPU reference's initial weights: the device's RNG need not draw CPU's numbers."""
    m = copy.deepcopy(lazy).to(dev)
    _materialize(m, _leaf_to(fwd.args, dev), _leaf_to(fwd.kwargs, dev))
    m.load_state_dict(init.state_dict())
    return m


def run_module_case(info, dtype, dev, style="device", max_samples=None, backend=None) -> CaseResult:
    """Every sample of one ModuleInfo (training, and eval where they differ) on `dev` in one
    style; passed iff outputs, input/parameter gradients and buffers match CPU (or the device
    raises what CPU raises). backend: run the device module as torch.compile(module,
    backend=backend) (device style; Dynamo's caches are reset per sample)."""
    dname = str(dtype).replace("torch.", "")
    t0 = time.perf_counter()
    modes = (True, False) if info.train_and_eval_differ else (True,)
    samples = []
    for training in modes:
        _seed(0)
        for mi in info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True, training=training):
            samples.append((training, mi))
    if max_samples is not None:
        samples = samples[:max_samples]
    error = ""
    for i, (training, mi) in enumerate(samples):
        cons, fwd = mi.constructor_input, mi.forward_input
        if fwd is None:
            continue
        random = _is_random(info, cons, fwd, training)
        try:
            m = _build(info, cons, training)
            m = m.to(dtype) if not info.is_lazy else m
            lazy = copy.deepcopy(m) if info.is_lazy else None
            if lazy is not None:
                _materialize(m, fwd.args, fwd.kwargs)
            init = copy.deepcopy(m)
            _seed(0)
            expected = _run(m, _fresh(fwd.args), _fresh(fwd.kwargs))
            expected_exc = None
        except Exception as exc:  # the reference raises: the device must raise the same type
            expected, expected_exc, init, lazy = None, exc, None, None
        try:
            if init is None:
                init = _build(info, cons, training)
            _seed(0)
            if style == "mode":
                with ral_mode(dev):  # a lazy module materializes inside the mode (CPU's RNG)
                    actual = _run(copy.deepcopy(init if lazy is None else lazy), _fresh(fwd.args), _fresh(fwd.kwargs))
            else:
                dm = copy.deepcopy(init).to(dev) if lazy is None else _lazy_on(lazy, init, dev, fwd)
                if backend is not None:
                    torch._dynamo.reset()
                    dm = torch.compile(dm, backend=backend)
                actual = _run(dm, _leaf_to(fwd.args, dev), _leaf_to(fwd.kwargs, dev), weights_dev=dev)
            if expected_exc is not None:
                error = f"sample {i}: CPU raised {type(expected_exc).__name__} but ral did not"
                break
            for part, a, e in zip(("output", "input grads", "param grads", "buffers"), actual, expected):
                _compare_part(part, a, e, dtype, random and part != "buffers")
        except Exception as exc:
            if expected_exc is not None and isinstance(exc, type(expected_exc)):
                continue
            what = f"{'train' if training else 'eval'} {mi.desc or ''}".strip()
            msg = str(exc).splitlines()[0][:300] if str(exc) else ""
            error = f"sample {i} ({what}): {type(exc).__name__}: {msg}"
            break
    return CaseResult(info.name, dname, style, not error, len(samples), {}, error, time.perf_counter() - t0, dev)


def select_modules(module_db, names=None, dtype=torch.float32):
    """ModuleInfos of module_db that support `dtype` on CPU."""
    return [m for m in module_db if (names is None or m.name in names) and dtype in m.supported_dtypes("cpu")]
