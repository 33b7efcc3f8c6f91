"""Conformance against PyTorch's OpInfo database: run each sample on a ral device, compare
with CPU, and record which tier served it. Used by tests/test_opinfo.py and
`ralctl coverage --opinfo`.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field

import torch

from torch_fl.mode import ral_mode
from torch_fl.observe.coverage import Coverage
from torch_fl.tensor.ral_tensor import RalTensor

# Tolerances per dtype (rtol, atol). Half types accumulate in float32 on plugins, like
# PyTorch's CPU kernels, but may round at different points.
TOLERANCES = {
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float32: (1.3e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-5, 1e-5),
}
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "uint8": torch.uint8,
    "complex64": torch.complex64,
}


@dataclass
class CaseResult:
    """Outcome of one (OpInfo, dtype) pair over all its samples."""

    op: str
    dtype: str
    style: str
    passed: bool
    n_samples: int
    tiers: dict = field(default_factory=dict)
    error: str = ""
    seconds: float = 0.0
    device: str = ""

    @property
    def key(self) -> str:
        return f"{self.op}:{self.dtype}"


def opinfo_name(op) -> str:
    """`name` or `name.variant` of an OpInfo entry."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def load_op_db():
    """PyTorch's OpInfo list (imported lazily: it takes seconds)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def load_python_ref_db():
    """PyTorch's OpInfo entries of its reference implementations (torch._refs, built on
    torch._prims): what PyTorch's test_ops/test_*_ufuncs check on every device."""
    from torch.testing._internal.common_methods_invocations import python_ref_db

    return python_ref_db


def _to(v, dev):
    if isinstance(v, torch.Tensor):
        if v.layout == torch.strided and not v.is_conj() and not v.is_neg():
            # Move the whole storage and rebuild the view, as a sample made on the device
            # would be: ops like as_strided reach elements outside the view itself.
            base = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage()).to(dev)
            moved = base.as_strided(v.shape, v.stride(), v.storage_offset())
        else:
            moved = v.detach().to(dev)
        return moved.requires_grad_(v.requires_grad) if v.is_floating_point() or v.is_complex() else moved
    if isinstance(v, (list, tuple)):
        return _rebuilt(v, [_to(x, dev) for x in v])
    if isinstance(v, dict):
        return {k: _to(x, dev) for k, x in v.items()}
    return v


def _cpu(v):
    if isinstance(v, RalTensor):
        return v.cpu()
    if isinstance(v, torch.Tensor):
        return v
    if isinstance(v, (list, tuple)):
        return _rebuilt(v, [_cpu(x) for x in v])
    return v


def _rebuilt(seq, items):
    """A sequence of seq's type holding items: a namedtuple (torch._refs' results) takes them
    as fields, a list, tuple or torch.return_types structseq as one iterable."""
    return type(seq)(*items) if hasattr(seq, "_fields") else type(seq)(items)


def _compare(actual, expected, dtype, exact_shape_only=False, tolerance=None):
    if exact_shape_only:
        exp_t = [x for x in torch.utils._pytree.tree_leaves(expected) if isinstance(x, torch.Tensor)]
        act_t = [x for x in torch.utils._pytree.tree_leaves(actual) if isinstance(x, torch.Tensor)]
        assert [(t.shape, t.dtype) for t in act_t] == [(t.shape, t.dtype) for t in exp_t], (
            "random op: shape/dtype differ"
        )
        return
    # Floating sample dtypes use the table; for integer/bool samples (whose outputs may still be
    # floating, e.g. softmax(dtype=float)) assert_close picks its defaults per output dtype.
    rtol, atol = TOLERANCES.get(dtype, (None, None))
    if tolerance is not None and (dtype.is_floating_point or dtype.is_complex):
        rtol, atol = max(rtol, tolerance[0]), max(atol, tolerance[1])
    torch.testing.assert_close(
        actual,
        expected,
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        check_device=False,
        check_stride=False,
        check_layout=False,
    )


# Ops whose samples all take the cpu tier and are many: CI (and `sweep --capped`) checks their
# first 8 samples, the full sweep checks all (pooling on CPU fallback costs ~30 s per op on 2
# cores).
SLOW_OPS = {
    "nn.functional.max_pool1d",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
    "max_pool2d_with_indices_backward",
    "nn.functional.max_unpool1d",
    "nn.functional.max_unpool2d",
    "nn.functional.max_unpool3d",
    "nn.functional.unfold",
    "grid_sampler_3d",
    "nn.functional.multi_head_attention_forward",
    "histogramdd",
    "nn.functional.linear_cross_entropy",
}
# Ops whose values are unspecified (uninitialized memory) or drawn from the RNG without
# OpInfo's seeding wrapper: only shapes and dtypes compare.
UNINITIALIZED = {
    "empty",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "empty_strided",
    "empty_permuted",
    "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d",
}


def _uninitialized(op) -> bool:
    """Whether the entry returns uninitialised memory (nothing to compare), its torch._refs
    form (python_ref_db: "_refs.empty") included."""
    return any(n.removeprefix("_refs.") in UNINITIALIZED for n in (opinfo_name(op), op.name))


# Per-op float tolerances where the device legitimately takes another algorithm than CPU:
# attention runs the math path (matmul + softmax) where CPU uses a fused flash kernel.
# A key is an op name, or (op name, dtype) for one dtype only.
TOLERANCE_OVERRIDES = {
    "nn.functional.scaled_dot_product_attention": (1e-4, 1e-4),
    "nn.functional.multi_head_attention_forward": (1e-4, 1e-4),
    # The host plugin's convolution widens half types to float32 and rounds once; CPU's
    # half transposed convolution rounds differently. Over these samples (outputs up to
    # ~400) they differ by 1-2 ulps of the largest output (0.25 float16, 0.5-1.0 bfloat16),
    # and the device's result is never further from the float32 result than CPU's.
    ("nn.functional.conv_transpose2d", torch.float16): (1e-2, 0.25),
    ("nn.functional.conv_transpose2d", torch.bfloat16): (2e-2, 0.5),
    ("nn.functional.conv_transpose3d", torch.bfloat16): (2e-2, 1.0),
    # float16 3-d: CPU's kernel is off on near-zero outputs (samples 2 and 3: 0.035 where the
    # float32 result is 0.0167); both devices' results are bit-equal to each other and per
    # element never further from the float32 result than CPU's (max 0.061 against 0.12).
    ("nn.functional.conv_transpose3d", torch.float16): (1e-2, 0.03125),
    # The host plugin's batch norm computes half types in float32 and rounds once; CPU's
    # bfloat16 kernel rounds on the way. instance_norm's sample 4 (eps 0.5, outputs up to
    # ~19) differs by 1 ulp there (0.125), and the device is closer to the float32 result
    # (max error 0.049 against CPU's 0.094).
    ("nn.functional.instance_norm", torch.bfloat16): (2e-2, 0.125),
    # The plugins' trilinear upsampling computes half types in float32 with float32 weights;
    # CPU's NCDHW bfloat16 kernel keeps its weights in bfloat16. Over these samples (inputs up
    # to ~9) near-zero outputs differ by up to 0.024, and per element the device is never
    # further from the float32 result than CPU (within 1e-6).
    ("nn.functional.interpolate.trilinear", torch.bfloat16): (2e-2, 0.03125),
}


def _seed(seed: int) -> None:
    """torch.manual_seed for the generators a case can draw from (CPU and every ral device).
    torch.manual_seed also queues a lazy CUDA/XPU/MTIA seeding with a formatted stack trace
    each call (about 1 ms on a machine without them): that was most of a sweep's time."""
    torch.default_generator.manual_seed(seed)
    torch.ral.manual_seed_all(seed)


# The seed OpInfo's sample iterator sets before drawing each sample outside a
# unittest.TestCase (torch.testing._internal.common_utils.SEED).
SAMPLE_SEED = 1234


def samples_of(op, dtype: torch.dtype, max_samples: int | None = None, requires_grad: bool = False) -> list:
    """op.sample_inputs("cpu", dtype) as OpInfo's iterator draws them here (each sample after
    seeding SAMPLE_SEED), without its two stack walks per call (inspect.stack: ~45 ms each)."""
    import numpy

    it = iter(op.sample_inputs_func(op, "cpu", dtype, requires_grad))
    out = []
    while max_samples is None or len(out) < max_samples:
        _seed(SAMPLE_SEED)
        random.seed(SAMPLE_SEED)
        numpy.random.seed(SAMPLE_SEED)
        try:
            out.append(next(it))
        except StopIteration:
            break
    return out


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _storage_copy(t):
    if isinstance(t, torch.Tensor) and t.layout == torch.strided and not t.is_conj() and not t.is_neg():
        base = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage().clone())
        return base.as_strided(t.shape, t.stride(), t.storage_offset())
    return t.clone() if isinstance(t, torch.Tensor) else t


def _fresh_copy(sample):
    """The sample with every tensor copied storage and all (in-place ops must not leak)."""
    return sample.transform(_storage_copy) if hasattr(sample, "transform") else sample


_SEEDED: dict[str, bool] = {}


def _seeded_random(op) -> bool:
    """OpInfo wraps RNG-consuming ops in wrapper_set_seed (a fixed seed, state restored after),
    which hides them from a two-seed comparison; recognise them by that wrapper."""
    name = opinfo_name(op)
    hit = _SEEDED.get(name)
    if hit is None:
        code = getattr(op.op, "__code__", None)
        hit = code is not None and "wrapper_set_seed" in code.co_names
        _SEEDED[name] = hit
    return hit


def _is_random(op, sample) -> bool:
    """True if the op's result depends on the RNG: two seeds give different results. Devices
    need not reproduce CPU's random stream, so such results compare by shape and dtype."""
    try:
        _seed(0)
        a = _call(op, _fresh_copy(sample))
        _seed(1)
        b = _call(op, _fresh_copy(sample))
    except Exception:
        return False
    try:
        torch.testing.assert_close(a, b, equal_nan=True, rtol=0, atol=0)
        return False
    except AssertionError:
        return True


def run_case(op, dtype: torch.dtype, dev: str, style: str = "device", max_samples: int | None = None) -> CaseResult:
    """Run every sample of one OpInfo entry in one dtype on `dev` ("device") or under
    ral_mode ("mode"); passed iff every sample matches CPU (or raises the same error type)."""
    name = opinfo_name(op)
    dname = str(dtype).replace("torch.", "")
    t0 = time.perf_counter()
    samples = samples_of(op, dtype, max_samples)
    cov = Coverage()
    error = ""
    for i, sample in enumerate(samples):
        try:
            _seed(0)
            expected = _call(op, sample)
            expected_exc = None
        except Exception as exc:  # the reference raises: the device must raise the same type
            expected, expected_exc = None, exc
        random = expected_exc is None and (_uninitialized(op) or _seeded_random(op) or _is_random(op, sample))
        try:
            _seed(0)
            with cov:
                if style == "mode":
                    with ral_mode(dev):
                        actual = _cpu(_call(op, sample))
                else:
                    actual = _cpu(
                        _call(op, sample.transform(lambda t: _to(t, dev)) if hasattr(sample, "transform") else sample)
                    )
            if expected_exc is not None:
                error = f"sample {i}: CPU raised {type(expected_exc).__name__} but ral did not"
                break
            _compare(
                actual,
                expected,
                dtype,
                exact_shape_only=random,
                tolerance=TOLERANCE_OVERRIDES.get((name, dtype), TOLERANCE_OVERRIDES.get(name)),
            )
        except Exception as exc:
            if expected_exc is not None and isinstance(exc, type(expected_exc)):
                continue
            error = _failure(i, exc)
            break
    return CaseResult(name, dname, style, not error, len(samples), _tiers(cov), error, time.perf_counter() - t0, dev)


def _failure(i: int, exc: Exception) -> str:
    return f"sample {i}: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"


def _tiers(cov: Coverage) -> dict:
    """Calls per tier over every op a case ran."""
    tiers: dict = {}
    for (_, tier), n in cov.counts.items():
        tiers[tier] = tiers.get(tier, 0) + n
    return tiers


def _grads(op, sample, dev: str | None, style: str):
    """Gradients of a fixed weighting of the op's differentiable outputs with respect to the
    sample's requires_grad tensors (None: nothing to differentiate). dev None: on CPU, inputs
    copied storage and all (as_strided samples read around their view)."""
    if dev is not None and style == "device":
        move = lambda t: _to(t.detach(), dev).requires_grad_(t.requires_grad)  # noqa: E731
    else:
        move = lambda t: _storage_copy(t.detach()).requires_grad_(t.requires_grad)  # noqa: E731
    sample = sample.transform(lambda t: move(t) if isinstance(t, torch.Tensor) else t)
    leaves = [
        t
        for t in torch.utils._pytree.tree_leaves([sample.input, sample.args, sample.kwargs])
        if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    if not leaves:
        return None
    ctx = ral_mode(dev) if dev is not None and style == "mode" else contextlib.nullcontext()
    with ctx:
        out = _call(op, sample)
        outs = [
            o
            for o in torch.utils._pytree.tree_leaves(out)
            if isinstance(o, torch.Tensor) and o.requires_grad and (o.is_floating_point() or o.is_complex())
        ]
        if not outs:
            return None
        grads = torch.autograd.grad(sum(_weighted_sum(o) for o in outs), leaves, allow_unused=True)
    return [None if g is None else _cpu(g).detach() for g in grads]


def _weighted_sum(o: torch.Tensor) -> torch.Tensor:
    """A real loss over o with unequal weights per element (and other weights for a complex
    output's imaginary part), so a gradient routed to the wrong element or part shows."""
    w = torch.linspace(0.5, 1.5, o.numel(), device=o.device).reshape(o.shape)
    if not o.is_complex():
        return (o * w).sum()
    return (o.real * w).sum() + (o.imag * torch.linspace(-1.0, 0.7, o.numel(), device=o.device).reshape(o.shape)).sum()


def run_grad_case(
    op, dtype: torch.dtype, dev: str, style: str = "device", max_samples: int | None = 3, transform=None
) -> CaseResult:
    """Gradients of the op's samples on `dev` ("device" style, or CPU tensors under ral_mode)
    against CPU autograd: passed iff every sample's gradients match (or both sides raise the
    same error type). Random and uninitialised ops are skipped (nothing to compare).
    `transform`: applied to every value of each sample first (another layout of the inputs)."""
    name = opinfo_name(op)
    t0 = time.perf_counter()
    error, n = "", 0
    cov = Coverage()
    skip = _uninitialized(op) or _seeded_random(op) or not op.supports_autograd
    samples = [] if skip else samples_of(op, dtype, max_samples, requires_grad=True)
    if transform is not None:
        samples = [s.transform(transform) for s in samples]
    for i, sample in enumerate(samples):
        if _is_random(op, sample):
            continue
        try:
            _seed(0)
            expected, expected_exc = _grads(op, sample, None, style), None
        except Exception as exc:
            expected, expected_exc = None, exc
        if expected_exc is None and expected is None:
            continue
        n += 1
        try:
            _seed(0)
            with cov:
                actual = _grads(op, sample, dev, style)
            if expected_exc is not None:
                error = f"sample {i}: CPU raised {type(expected_exc).__name__} but ral did not"
                break
            for k, (a, e) in enumerate(zip(actual, expected)):
                if e is None:
                    assert a is None or not a.any(), f"input {k}: a gradient where CPU has none"
                    continue
                assert a is not None, f"input {k}: no gradient where CPU has one"
                _compare(a, e, dtype, tolerance=GRAD_TOLERANCE)
        except Exception as exc:
            if expected_exc is not None and isinstance(exc, type(expected_exc)):
                continue
            error = _failure(i, exc)
            break
    return CaseResult(
        name, str(dtype).replace("torch.", ""), style, not error, n, _tiers(cov), error, time.perf_counter() - t0, dev
    )


# Gradients sum over many products (a matmul's backward, a norm's chain rule): float32
# rounding in another order than CPU's shows at ~1e-5 relative.
GRAD_TOLERANCE = (1e-4, 1e-4)


def device_declares(dev: str, dtype: torch.dtype) -> bool:
    """True if the device's plugin declares `dtype` in its dtype_mask (float16 conformance
    applies only where it does; both built-in plugins declare it)."""
    from torch_fl.core.dtype_names import names_in_mask
    from torch_fl.device.index import parse_device

    idx = parse_device(dev)
    rec = [r for r in torch.ral.device_records() if r.index == idx][0]
    return str(dtype).replace("torch.", "") in names_in_mask(rec.dtype_mask)


def select(op_db, names=None, dtypes=("float32",)):
    """(op, dtype) pairs of op_db whose CPU support includes the dtype."""
    out = []
    for op in op_db:
        if names is not None and opinfo_name(op) not in names:
            continue
        supported = op.supported_dtypes("cpu")
        for dname in dtypes:
            dt = DTYPES[dname]
            if dt in supported:
                out.append((op, dt))
    return out
