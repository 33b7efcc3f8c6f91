"""The OpenCL plugin (PoCL in CI): every manifest op vs torch CPU, model training steps in the
vendor tier, two vendors in one program, the disk cache, hot plug and clean failures.

Tolerances: exact for copies, layout, indexing, comparisons and integer math; rtol/atol 1e-5
for float element-wise ops and reductions; 1e-4 for matmuls and softmax/norm/loss kernels
(float32 accumulation order differs from MKL/ATen)."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from pathlib import Path

import pytest
import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import REPO, SHARED_CACHE, private_cache_home, run_python  # noqa: E402
from model_zoo import build, inputs, to  # noqa: E402


def _ocl_plugin():
    return next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)


_P = _ocl_plugin()
if _P is None:
    pytest.skip("OpenCL plugin not built (needs /usr/include/CL/cl.h; run setup.py native)", allow_module_level=True)
if _P.record.status != "LOADED" or not _P.devices:
    pytest.skip(f"no OpenCL platform present: {_P.record.status} {_P.record.reason}", allow_module_level=True)

DEV = f"ral:{_P.devices[0]}"
FIND_DEV = "dev = 'ral:%d' % next(p for p in torch_fl.plugins() if p.record.name == 'opencl').devices[0]\n"
OCL_DIR = Path(_P.record.dir)
MANIFEST = json.loads((REPO / "manifests" / "opencl.json").read_text())


def host_dev():
    p = next((p for p in torch_fl.plugins() if p.record.name == "host" and p.devices), None)
    return f"ral:{p.devices[0]}" if p else None


def _on(dev, v):
    if isinstance(v, torch.Tensor):
        return v.to(dev)
    if isinstance(v, (list, tuple)):
        return type(v)(_on(dev, x) for x in v)
    return v


def _cmp(got, want, tol):
    if isinstance(want, (list, tuple)):
        for g, w in zip(got, want):
            _cmp(g, w, tol)
        return
    assert got.device.type == "ral"
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol, equal_nan=True)


def r(*shape, lo=-2.0, hi=2.0):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    return torch.rand(*shape, generator=g) * (hi - lo) + lo


def pos(*shape):
    return r(*shape, lo=0.1, hi=3.0)


def ints(*shape, hi=5):
    return torch.randint(0, hi, shape, generator=torch.Generator().manual_seed(7))


A = torch.ops.aten
E, EXACT, MM = 1e-5, 0.0, 1e-4
# (name, fn, args, tolerance): fn runs on CPU copies and on OpenCL copies of args.
CASES = [
    ("add", lambda a, b: a + 2 * b, [r(3, 5), r(5)], E),
    ("add_int", lambda a, b: a + b, [ints(4, 3), ints(3)], EXACT),
    ("sub", lambda a, b: torch.sub(a, b, alpha=0.5), [r(4, 3), r(4, 1)], E),
    ("mul_div", lambda a, b: a * b / (b.abs() + 1), [r(6, 2), r(6, 2)], E),
    ("scalar_ops", lambda a: (a + 1.5, a - 2, 3 - a, a * 0.25, a / 4, a**2, a**0.5 if False else a**3), [r(7)], E),
    ("rsub_pow", lambda a, b: (torch.rsub(a, 2.0), torch.pow(a, b)), [pos(5), r(5)], E),
    (
        "unary",
        lambda a: [
            f(a)
            for f in (
                torch.neg,
                torch.exp,
                torch.tanh,
                torch.sin,
                torch.cos,
                torch.sigmoid,
                torch.abs,
                torch.erf,
                torch.floor,
                torch.relu,
            )
        ],
        [r(4, 6)],
        E,
    ),
    ("unary_pos", lambda a: [torch.sqrt(a), torch.rsqrt(a), torch.log(a), torch.reciprocal(a)], [pos(9)], E),
    (
        "activations",
        lambda a: [
            torch.nn.functional.silu(a),
            torch.nn.functional.gelu(a),
            torch.nn.functional.gelu(a, approximate="tanh"),
        ],
        [r(3, 7)],
        E,
    ),
    (
        "act_backward",
        lambda g, x: [
            A.silu_backward(g, x),
            A.gelu_backward(g, x),
            A.gelu_backward(g, x, approximate="tanh"),
            A.tanh_backward(g, x.tanh()),
            A.sigmoid_backward(g, x.sigmoid()),
            A.threshold_backward(g, x, 0.0),
        ],
        [r(5, 4), r(5, 4)],
        E,
    ),
    (
        "clamp_max_min",
        lambda a, b: [a.clamp(-0.5, 0.7), a.clamp(min=0), torch.maximum(a, b), torch.minimum(a, b)],
        [r(8), r(8)],
        E,
    ),
    ("remainder", lambda a: [torch.remainder(a, 1.5), torch.remainder(a, -a + 3)], [r(9)], E),
    (
        "compare",
        lambda a, b: [a < b, a >= b, a == a, a != b, a > 0.5, a <= 0, a.eq(1.0), a.ne(0)],
        [r(4, 4), r(4, 4)],
        EXACT,
    ),
    (
        "compare_int",
        lambda a: [a > 2, a == 3, torch.logical_not(a), torch.bitwise_not(a), torch.bitwise_not(a > 1)],
        [ints(10)],
        EXACT,
    ),
    (
        "where_masked",
        lambda c, a, b: [
            torch.where(c > 0, a, b),
            a.masked_fill(c > 0, -1.5),
            a.masked_fill(c > 0, a.new_full((), 2.0)),
        ],
        [r(3, 4), r(3, 4), r(4)],
        EXACT,
    ),
    (
        "pointwise3",
        lambda a, b, c: [
            torch.addcdiv(a, b, c.abs() + 1, value=0.5),
            torch.addcmul(a, b, c, value=2),
            torch.lerp(a, b, 0.3),
            torch.lerp(a, b, 0.8),
        ],
        [r(6), r(6), r(6)],
        E,
    ),
    (
        "inplace",
        lambda a, b: (
            a.clone()
            .add_(b)
            .mul_(2)
            .sub_(1)
            .div_(3)
            .addcmul_(b, b, value=0.1)
            .addcdiv_(b, b.abs() + 1)
            .lerp_(b, 0.25)
            .sqrt_()
        ),
        [pos(5), pos(5)],
        E,
    ),
    (
        "copy_strided_cast",
        lambda a: [
            a.t().contiguous(),
            a.t().to(torch.int64),
            a.to(torch.float64),
            a[:, ::2].clone(),
            a.new_zeros(3, 4).copy_(a[1:4, :4]),
        ],
        [r(5, 6)],
        EXACT,
    ),
    ("copy_int_to_float", lambda a: [a.float(), a.to(torch.int32), a.bool(), a.to(torch.uint8)], [ints(3, 4)], EXACT),
    (
        "fill_zero",
        lambda a: [
            a.clone().fill_(2.5),
            a.clone().zero_(),
            a.clone().fill_(torch.tensor(1.25)),
            a.t().clone().fill_(3.0),
        ],
        [r(3, 3)],
        EXACT,
    ),
    (
        "reductions",
        lambda a: [
            a.sum(),
            a.sum(0),
            a.sum((0, 2), keepdim=True),
            a.mean(),
            a.mean(-1),
            a.amax(1),
            a.amin((0, 1)),
            a.max(1),
            a.min(2),
            a.argmax(),
            a.argmax(1),
            a.argmin(2),
            a.var(1),
            a.var((0, 1), correction=0),
            a.prod(),
        ],
        [r(4, 5, 3)],
        E,
    ),
    (
        "reductions_int",
        lambda a: [a.sum(), a.sum(0), a.amax(1), a.all(), (a > 0).any(1), (a >= 0).all()],
        [ints(3, 5)],
        EXACT,
    ),
    (
        "matmul",
        lambda a, b, c: [a @ b, a @ c.t(), torch.addmm(b[0], a, b), torch.addmm(b[:1], a, b, beta=0.5, alpha=2)],
        [r(33, 40), r(40, 37), r(37, 40)],
        MM,
    ),
    (
        "bmm",
        lambda a, b, c: [torch.bmm(a, b), torch.baddbmm(c, a, b, alpha=0.5), torch.bmm(a, a.transpose(1, 2))],
        [r(3, 17, 9), r(3, 9, 35), r(3, 17, 35)],
        MM,
    ),
    ("dot", lambda a, b: torch.dot(a, b), [r(50), r(50)], MM),
    (
        "softmax",
        lambda a: [
            torch.softmax(a, -1),
            torch.log_softmax(a, 1),
            torch.softmax(a, 0),
            A._safe_softmax(a.masked_fill(a > 1.5, float("-inf")), -1),
        ],
        [r(4, 6, 5)],
        MM,
    ),
    (
        "softmax_bwd",
        lambda g, a: [
            A._softmax_backward_data(g, a.softmax(-1), -1, torch.float32),
            A._log_softmax_backward_data(g, a.log_softmax(1), 1, torch.float32),
        ],
        [r(3, 7, 4), r(3, 7, 4)],
        MM,
    ),
    (
        "layer_norm",
        lambda x, w, b: (
            list(A.native_layer_norm(x, [8], w, b, 1e-5)) + list(A.native_layer_norm(x, [3, 8], None, None, 1e-5))
        ),
        [r(2, 3, 8), r(8), r(8)],
        MM,
    ),
    (
        "layer_norm_bwd",
        lambda g, x, w: A.native_layer_norm_backward(
            g, x, [8], *A.native_layer_norm(x, [8], w, None, 1e-5)[1:], w, w, [True, True, True]
        ),
        [r(5, 8), r(5, 8), r(8)],
        MM,
    ),
    (
        "nll",
        lambda x, t, w: [
            A.nll_loss_forward(x, t, None, 1, -100),
            A.nll_loss_forward(x, t, w, 2, 2),
            A.nll_loss_forward(x, t, None, 0, 1),
        ],
        [r(6, 5).log_softmax(1), ints(6), pos(5)],
        MM,
    ),
    (
        "nll_bwd",
        lambda go, x, t: [
            A.nll_loss_backward(go, x, t, None, 1, -100, torch.tensor(6.0)),
            A.nll_loss_backward(go, x, t, None, 2, 3, torch.tensor(4.0)),
        ],
        [torch.tensor(0.7), r(6, 5), ints(6)],
        MM,
    ),
    (
        "embedding",
        lambda w, i, g: [
            torch.nn.functional.embedding(i, w),
            A.embedding_dense_backward(g, i, 7, -1, False),
            A.embedding_dense_backward(g, i, 7, 2, True),
        ],
        [r(7, 4), ints(2, 3, hi=7), r(2, 3, 4)],
        E,
    ),
    (
        "cat",
        lambda a, b: [torch.cat([a, b], 0), torch.cat([a, a, b], 0), torch.cat([a.t(), b.t()], 1)],
        [r(2, 3), r(4, 3)],
        EXACT,
    ),
    ("tril_triu", lambda a, i: [a.tril(), a.triu(1), a.tril(-1), i.triu()], [r(2, 4, 5), ints(4, 4)], EXACT),
    (
        "gather_index",
        lambda a, i: [
            a.gather(1, i),
            a.index_select(0, i[:, 0]),
            a.index_select(1, i[0]),
            a.scatter(1, i, -a[:, :3]),
            a.scatter_add(1, i, a[:, :3]),
        ],
        [r(4, 5), ints(4, 3)],
        E,
    ),
    (
        "pad_slice_bwd",
        lambda a: [torch.nn.functional.pad(a, (1, 2, 0, 1), value=0.5), A.slice_backward(a, [4, 9], 1, 1, 8, 2)],
        [r(4, 4)],
        EXACT,
    ),
]


@pytest.mark.parametrize("name,fn,args,tol", CASES, ids=[c[0] for c in CASES])
def test_op_matches_cpu(name, fn, args, tol):
    want = fn(*[a.clone() for a in args])
    with torch_fl.coverage() as cov:
        got = fn(*_on(DEV, args))
    _cmp(got, want, tol)
    assert not [f for f in cov.fallbacks() if f[1] == "cpu"], cov.fallbacks()


def test_every_manifest_kernel_is_exported_and_exercised():
    from torch_fl._native import ffi, lib

    handle = ffi.new("int64_t*")
    for k in {e["kernel"] for e in MANIFEST["kernels"]}:
        assert lib.rt_kernel_lookup(_P.devices[0], k.encode(), handle) == 0, k
    assert _P.record.status == "LOADED"
    # No entry is disabled and no dtype is noted: every OpenCL device declares every dtype the
    # manifest lists (float64 aside, which the manifest keeps to copies and casts).
    assert _P.disabled == [] and _P.status == "LOADED", (_P.status, _P.reason)
    assert set(_P.notes) <= {"float64: not supported by this device"}, _P.notes


def test_random_ops_follow_the_host_philox_convention():
    x = torch.empty(1000, device=DEV)
    u = x.uniform_(-1, 2).cpu()
    assert -1 <= u.min() and u.max() < 2 and abs(u.mean() - 0.5) < 0.1
    n = torch.empty(4000, device=DEV).normal_(1.0, 2.0).cpu()
    assert abs(n.mean() - 1) < 0.15 and abs(n.std() - 2) < 0.15
    b = torch.empty(4000, device=DEV).bernoulli_(0.3).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean() - 0.3) < 0.05
    host = host_dev()
    if host:  # same generator state, same numbers on both vendors
        torch.ral.manual_seed_all(7)
        a = torch.empty(64, device=host).uniform_()
        b = torch.empty(64, device=DEV).uniform_()
        torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_training_step_fully_in_vendor_tier(name):
    ref = build(name)
    ref_out = ref(**inputs(name))
    ref_out.loss.backward()
    model = build(name).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = to(inputs(name), DEV)
    out = model(**batch)
    out.loss.backward()
    torch.testing.assert_close(out.loss.cpu(), ref_out.loss.detach(), rtol=2e-4, atol=2e-4)
    for (n, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        if q.grad is not None:
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=2e-4, atol=2e-4, msg=n)
    opt.step()
    opt.zero_grad()
    with torch_fl.coverage() as cov:
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
    assert cov.fallbacks() == [], f"ops outside the vendor tier: {cov.fallbacks()}"
    assert len(cov.ops_in_tier("vendor")) >= 25


def test_two_vendors_in_one_program_and_copies_between_them():
    host = host_dev()
    if host is None:
        pytest.skip("the host plugin is not loaded: nothing to pair the OpenCL device with")
    x = r(64, 33)
    a, b = x.to(host), x.to(DEV)
    torch.testing.assert_close(b.to(host).cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(a.to(DEV).cpu(), x, rtol=0, atol=0)
    torch.testing.assert_close(a.t().to(DEV).cpu(), x.t(), rtol=0, atol=0)
    dst = torch.zeros(33, 64, device=DEV)
    dst.copy_(a.t())
    torch.testing.assert_close(dst.cpu(), x.t(), rtol=0, atol=0)
    ma, mb = build("gpt2").to(host), build("llama").to(DEV)
    la = ma(**to(inputs("gpt2"), host)).loss
    lb = mb(**to(inputs("llama"), DEV)).loss
    la.backward()  # cross-device autograd needs device events from the Python layer (not ours)
    lb.backward()
    assert la.device == torch.device(host) and lb.device == torch.device(DEV)
    assert all(p.grad is not None and p.grad.device == torch.device(DEV) for p in mb.parameters() if p.requires_grad)


CACHE_PROBE = (
    "import time, torch, torch_fl\n" + FIND_DEV + "t0 = time.time()\n"
    # the random family is the smallest built-in program: one PoCL compile is ~2 s, not ew's ~10
    "torch.manual_seed(0)\n"
    "v = torch.empty(12, device=dev).uniform_().cpu()\n"
    "assert ((v >= 0) & (v < 1)).all() and len(set(v.tolist())) > 6, v\n"
    "print('SECONDS', time.time() - t0)\n"
)


def _entries(cache):
    d = cache / "torch_fl" / "opencl"
    return sorted(d.glob("*.bin")) if d.exists() else []


def test_disk_cache_reused_across_processes_corrupt_entry_rebuilt_unwritable_ok(tmp_path):
    env = {"XDG_CACHE_HOME": private_cache_home(tmp_path / "xdg"), "POCL_KERNEL_CACHE": "0"}
    cold = run_python(CACHE_PROBE, env)
    assert cold.returncode == 0, cold.stderr
    (entry,) = _entries(tmp_path / "xdg")
    stamp = (entry.stat().st_ino, entry.stat().st_mtime_ns)
    warm = run_python(CACHE_PROBE, env)
    assert warm.returncode == 0, warm.stderr
    assert (entry.stat().st_ino, entry.stat().st_mtime_ns) == stamp, "warm start rewrote the entry"
    t_cold, t_warm = (float(p.stdout.split("SECONDS")[1]) for p in (cold, warm))
    print(f"\nOpenCL random program: cold {t_cold:.2f}s, warm {t_warm:.2f}s (POCL_KERNEL_CACHE=0)")
    data = bytearray(entry.read_bytes())
    magic, size = struct.unpack_from("<8sQ", data)
    assert magic == b"RALOCLB1" and size == len(data) - 56
    data[100] ^= 0xFF
    entry.write_bytes(bytes(data))
    # PoCL's own cache may serve the rebuild and the unwritable run: what they check is ours
    pocl_cache = {"XDG_CACHE_HOME": env["XDG_CACHE_HOME"], "POCL_CACHE_DIR": str(SHARED_CACHE.parent / "pocl")}
    fixed = run_python(CACHE_PROBE, pocl_cache)
    assert fixed.returncode == 0, fixed.stderr
    assert entry.read_bytes() != bytes(data), "the corrupt entry was not rebuilt"
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    nocache = run_python(
        CACHE_PROBE, {"XDG_CACHE_HOME": str(blocker / "sub"), "POCL_CACHE_DIR": pocl_cache["POCL_CACHE_DIR"]}
    )
    assert nocache.returncode == 0, nocache.stderr


def test_missing_deps_then_rescan_brings_the_device_up(tmp_path):
    empty = tmp_path / "vendors"
    empty.mkdir()
    code = f"""
    import os, torch, torch_fl
    p = next(p for p in torch_fl.plugins() if p.record.name == "opencl")
    assert p.record.status == "MISSING_DEPS", p.record
    assert "no OpenCL platform/ICD found (OCL_ICD_VENDORS={empty})" in p.record.reason, p.record.reason
    os.environ["OCL_ICD_VENDORS"] = "/etc/OpenCL/vendors"
    torch_fl.rescan()
    p = next(p for p in torch_fl.plugins() if p.record.name == "opencl")
    assert p.record.status == "LOADED" and p.devices, p.record
    x = torch.ones(3, device="ral:%d" % p.devices[0]) * 2
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]
    """
    res = run_python(code, {"OCL_ICD_VENDORS": str(empty)})
    assert res.returncode == 0, res.stderr
    code = """
    import torch_fl
    p = next(p for p in torch_fl.plugins() if p.record.name == "opencl")
    assert p.record.status == "MISSING_DEPS" and "libOpenCL_absent.so.1 not found" in p.record.reason, p.record
    """
    res = run_python(code, {"TORCH_FL_OPENCL_LIBRARY": "libOpenCL_absent.so.1"})
    assert res.returncode == 0, res.stderr


def test_removed_plugin_dir_makes_its_tensors_raise_device_lost(tmp_path):
    root = tmp_path / "plugins"
    shutil.copytree(OCL_DIR, root / "opencl")
    code = f"""
    import shutil, sys, types
    sys.modules["torch_fl"] = types.ModuleType("torch_fl")
    sys.modules["torch_fl"].__path__ = [{str(REPO / "torch_fl")!r}]
    from torch_fl._native import lib
    assert lib.rt_init({str(root)!r}.encode()) == 0  # the first rt_init wins: only our copy loads
    del sys.modules["torch_fl"]
    import torch, torch_fl
    x = torch.ones(4, device="ral:0") + 1
    shutil.rmtree({str(root / "opencl")!r})
    torch_fl.rescan()
    try:
        (x * 2).cpu()
    except torch_fl.DeviceLostError as exc:
        assert "gone" in str(exc), exc
    else:
        raise AssertionError("no DeviceLostError")
    """
    res = run_python(code)
    assert res.returncode == 0, res.stderr


def test_compile_error_names_the_kernel_and_shows_the_log():
    from torch_fl._native import ffi, lib

    dev = _P.devices[0]
    handle = ffi.new("int64_t*")
    bad = b"__kernel void broken_kernel(__global float* x) { x[0] = undefined_symbol; }"
    assert lib.rt_kernel_compile(dev, b"opencl-c", bad, b"", b"broken_kernel", handle) == lib.RAL_ERROR_COMPILE_FAILED
    msg = ffi.string(lib.rt_last_error()).decode()
    assert "RAL_ERROR_COMPILE_FAILED" in msg and "'broken_kernel'" in msg and "undefined_symbol" in msg, msg
    good = b"__kernel void twice(__global float* o, long oo, __global float* i, long io, long n) { long k = get_global_id(0); if (k < n) o[oo + k] = 2 * i[io + k]; }"
    assert lib.rt_kernel_compile(dev, b"opencl-c", good, b"", b"twice", handle) == 0
    assert lib.rt_kernel_compile(dev, b"cuda", good, b"", b"twice", handle) == lib.RAL_ERROR_UNSUPPORTED


def test_oversize_launch_fails_cleanly_and_loses_nothing():
    x = torch.arange(4.0).to(DEV)
    huge = torch.zeros(1, device=DEV).expand(2**33)
    with pytest.raises(torch_fl.RalError, match="exceeds the limits"):
        A.fill_.Scalar(huge, 1.0)
        torch.ral.synchronize()
    assert (x + 1).cpu().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_16_bit_floats_on_every_device_with_or_without_cl_khr_fp16():
    from torch_fl._native import lib

    rec = next(d for d in torch_fl.devices() if d.index == _P.devices[0])
    # float16 and bfloat16 (dtype_mask bits 6 and 7, flags FP16 and BF16) need no cl_khr_fp16,
    # which PoCL lacks: the kernels store 16 bits with core vload_half/vstore_half and compute
    # in float (tests/test_opencl_half.py).
    assert rec.dtype_mask & (1 << 6) and rec.dtype_mask & (1 << 7), bin(rec.dtype_mask)
    assert rec.fp16 and rec.flags & lib.RAL_DEVICE_BF16, rec.flags
    assert not rec.host_mappable


# Inputs where float tanh rounds to +-1 (|x| >= 9.1), plus infinities, NaN and a few below.
SATURATING = [-float("inf"), -100.0, -20.0, -9.1, 9.1, 20.0, 100.0, float("inf"), float("nan"), -3.0, 0.5]


@pytest.mark.parametrize("tier", ["vendor", "jit"])
def test_tanh_saturates_exactly(tier):
    """PoCL's float tanh stops at +-0.99999994, even at +-inf; the plugin's kernels and the
    jit's OpenCL code saturate it, so tanh-based results at the ends are CPU's bits: tanh is
    +-1, tanh-gelu(-100) is -0 (not -2.98e-6), tanh-gelu(-inf) is NaN (not -inf), and their
    gradients vanish exactly. Values below the threshold stay within float tolerance."""
    import torch_fl.jit as J
    from torch_fl.observe.coverage import Coverage

    x = torch.tensor(SATURATING)
    ends = x.abs() >= 9.1  # where the result must be exact (NaN aside)
    J.force(tier == "jit")
    try:
        for fn in (
            torch.tanh,
            lambda t: torch.nn.functional.gelu(t, approximate="tanh"),
            lambda t: torch.ops.aten.gelu_backward(torch.ones_like(t), t, approximate="tanh"),
        ):
            cov = Coverage()
            with cov:
                got = fn(x.to(DEV)).cpu()
            want = fn(x)
            assert {t for (op, t) in cov.counts if "tanh" in op or "gelu" in op} == {tier}, cov.counts
            torch.testing.assert_close(got[ends], want[ends], rtol=0, atol=0, equal_nan=True)
            assert torch.equal(got[ends].signbit(), want[ends].signbit())  # -0 stays -0
            torch.testing.assert_close(got[~ends], want[~ends], rtol=1.3e-6, atol=1e-6, equal_nan=True)
    finally:
        J.force(False)
