"""PyTorch's pointwise OpInfo samples inside fusion regions, against CPU.

test_jit.py runs each op alone as a jit kernel; here each op is the middle of a chain, so
it is compiled into multi-op kernels the way `torch_fl.fuse()` and `torch.compile(backend="ral")`
build them: inputs come from a fused producer (a double negation, exact), and the result
feeds fused consumers (`y * 1 + y`). Three region kinds per sample:

- `fuse`: an eager `torch_fl.fuse()` region (scalars are kernel arguments);
- `baked`: the compile backend's recording region (scalars become literals in the source);
- `fallback`: a `fuse()` region whose every compile fails, so each group is replayed op by
  op through the router (decomposing ops included).

Found with it: a negative baked scalar under a unary minus rendered as `--0.5f` (a compile
error), and the op-by-op replay of a failed group let a decomposing op's parts (hardshrink:
abs, le, where) join a new pending group, so the copy-out read an unwritten buffer.

Half precision (bfloat16, float16) is stored as 16-bit words and computed in float, each op's
result rounded as eager rounds it (ral_half.h), so the comparison is with CPU's own half-precision
result at that dtype's tolerance. Found with it: GCC 12 crashed vectorising signbit() of a float
made from bfloat16 bits (the template now tests copysign(1, x) < 0).

CI runs every float32 op on ral:0 (each region kind), a stable 1-in-RAL1_ONE_IN sample of the
ops on ral:1 (PoCL compiles each kernel in ~0.3 s), a 1-in-INT_ONE_IN sample in int64/bool on
ral:0, and a 1-in-HALF_ONE_IN
sample of the ops in bfloat16 and float16 on the devices that store them (ral:0). The full sweep:
    .venv/bin/python -m pytest tests/test_fusion_opinfo.py -m slow
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from sweep_support import sampled
from test_jit import DEVS, POINTWISE

from torch_fl.jit import fusion, kernel_cache
from torch_fl.jit.compile_backend import _Recorder
from torch_fl.jit.target import target_of
from torch_fl.observe import conformance as C

SAMPLES = 4  # per op and dtype: the scalar and broadcast forms OpInfo lists first


@contextlib.contextmanager
def _failing_compiles():
    orig = fusion.compile_kernel
    fusion.compile_kernel = lambda *a, **k: None
    try:
        with fusion.fuse():
            yield
    finally:
        fusion.compile_kernel = orig


REGIONS = {"fuse": fusion.fuse, "baked": _Recorder, "fallback": _failing_compiles}


def _produced(v):
    """v from a fused producer: -(-v) is exact for floats and signed integers."""
    if isinstance(v, torch.Tensor) and (v.is_floating_point() or (v.dtype.is_signed and not v.is_complex())):
        return v.neg().neg()
    return v


def _chain(op, sample):
    y = op(_produced(sample.input), *[_produced(a) for a in sample.args], **sample.kwargs)
    if isinstance(y, torch.Tensor) and not y.is_complex() and y.dtype != torch.bool:
        return y * 1 + y
    return y


def _check(op, dtype: torch.dtype, dev: str) -> int:
    """Compare every region kind with CPU for the op's first samples; returns ops fused."""
    fused_before = fusion.STATS["fused_ops"]
    for i, sample in enumerate(C.samples_of(op, dtype, SAMPLES)):
        try:
            expected, expected_exc = _chain(op, sample), None
        except Exception as exc:  # CPU refuses: the device must refuse with the same type
            expected, expected_exc = None, exc
        for region_name, region in REGIONS.items():
            on_dev = sample.transform(lambda t: C._to(t, dev).detach() if isinstance(t, torch.Tensor) else t)
            where = f"{C.opinfo_name(op)} sample {i} in {region_name}"
            failed_compiles = kernel_cache.STATS["failures"]
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # compile-failure warnings of `fallback`
                    with torch.no_grad(), region():
                        out = _chain(op, on_dev)
                actual = C._cpu(out)
            except Exception as exc:
                if expected_exc is not None and isinstance(exc, type(expected_exc)):
                    continue
                raise AssertionError(f"{where}: {type(exc).__name__}: {exc}") from exc
            assert expected_exc is None, f"{where}: CPU raised {type(expected_exc).__name__}, ral did not"
            # generated source must compile (the fallback would hide a codegen bug as a slowdown)
            assert region_name == "fallback" or kernel_cache.STATS["failures"] == failed_compiles, (
                f"{where}: a generated kernel failed to compile"
            )
            try:
                C._compare(actual, expected, dtype)
            except AssertionError as exc:
                raise AssertionError(f"{where}: {exc}") from exc
    return fusion.STATS["fused_ops"] - fused_before


def _ops_for(dtype):
    return [op for op in POINTWISE if dtype in op.supported_dtypes("cpu")]


RAL1_ONE_IN = 8
HALF_ONE_IN = 6  # cold compiles: 1 in 3 cost CI ~80 s, this ~40 s (the full sweep: -m slow)
INT_DTYPES = (torch.int64, torch.bool)
HALF_DTYPES = (torch.bfloat16, torch.float16)


def _stores_half(dev_param, dtype) -> bool:
    target = target_of(dev_param.values[0]) if not dev_param.marks[0].args[0] else None
    return target is not None and dtype in target.lowp


def _float_cases(ci: bool):
    out = []
    for dev in DEVS:
        for op in POINTWISE:
            name = C.opinfo_name(op)
            if ci and dev.id != "host" and not sampled(f"fused:{name}", RAL1_ONE_IN):
                continue
            out.append(pytest.param(dev.values[0], op, id=f"{dev.id}-{name}", marks=dev.marks))
    return out


def _int_cases(ci: bool):
    return [
        pytest.param(dev.values[0], dt, id=f"{dev.id}-{str(dt)[6:]}", marks=dev.marks)
        for dev in DEVS
        if not ci or dev.id == "host"
        for dt in INT_DTYPES
    ]


def _half_cases(ci: bool):
    out = []
    for dev in DEVS:
        for dt in HALF_DTYPES:
            if not _stores_half(dev, dt):
                continue  # the device does not hold the dtype: its ops never reach a fused kernel
            for op in _ops_for(dt):
                name = C.opinfo_name(op)
                if ci and not sampled(f"fused-{dt}:{name}", HALF_ONE_IN):
                    continue
                out.append(pytest.param(dev.values[0], dt, op, id=f"{dev.id}-{str(dt)[6:]}-{name}", marks=dev.marks))
    return out


INT_ONE_IN = 3  # CI's integer/bool sweep: a third of the ops (cold compiles cost ~70 s for all; -m slow runs them all)


def _check_all(dtype, dev, ci: bool = False):
    failures, fused = [], 0
    for op in _ops_for(dtype):
        if ci and not sampled(f"fused-{dtype}:{C.opinfo_name(op)}", INT_ONE_IN):
            continue
        try:
            fused += _check(op, dtype, f"ral:{dev}")
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0][:300])
    assert not failures, "\n".join(failures)
    assert fused > 0, "no op of the sweep reached a fused kernel"


@pytest.mark.parametrize("dev,op", _float_cases(ci=True))
def test_float32_samples_in_fused_chains_match_cpu(dev, op):
    _check(op, torch.float32, f"ral:{dev}")


@pytest.mark.parametrize("dev,dtype", _int_cases(ci=True))
def test_integer_and_bool_samples_in_fused_chains_match_cpu(dev, dtype):
    _check_all(dtype, dev, ci=True)


@pytest.mark.parametrize("dev,dtype,op", _half_cases(ci=True))
def test_half_precision_samples_in_fused_chains_match_cpu(dev, dtype, op):
    _check(op, dtype, f"ral:{dev}")


@pytest.mark.slow
@pytest.mark.parametrize("dev,dtype,op", _half_cases(ci=False))
def test_half_precision_full_sweep(dev, dtype, op):
    _check(op, dtype, f"ral:{dev}")


@pytest.mark.slow
@pytest.mark.parametrize("dev,op", _float_cases(ci=False))
def test_float32_full_sweep(dev, op):
    _check(op, torch.float32, f"ral:{dev}")


@pytest.mark.slow
@pytest.mark.parametrize("dev,dtype", _int_cases(ci=False))
def test_integer_and_bool_full_sweep(dev, dtype):
    _check_all(dtype, dev)


def test_the_sweep_reaches_fused_kernels():
    """Most float32 ops must really run fused (a sweep that falls back everywhere proves little)."""
    dev = next((p.values[0] for p in DEVS if not p.marks[0].args[0]), None)
    if dev is None:
        pytest.skip("no device with a compile entry")
    # float32's kernels are compiled by the per-op test already; one half dtype, every 10th
    # op (float16 is stored and rounded by the same generated code as bfloat16): cold
    # compiles of float16 and bfloat16 at every 5th op cost CI ~40 s.
    for dt, step in ((torch.float32, 5), (torch.bfloat16, 10)):
        ops = _ops_for(dt)[::step]
        fused = [C.opinfo_name(op) for op in ops if _check(op, dt, f"ral:{dev}") > 0]
        assert len(fused) >= 0.6 * len(ops), (dt, fused)
