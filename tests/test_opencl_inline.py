"""Capability: on an OpenCL CPU runtime whose buffers are host memory (PoCL), small commands on
an idle stream run on the calling thread ("inline", plugins/opencl/inline.c) with the queued
path's results, stream order, events and errors.

The plugin counts what it did (`ral_opencl_counters`: `inline_ops`, `inline_copies` beside the
OpenCL calls) and `ral_opencl_inline(0|1)` switches inline execution per process, so each test
compares the inline path with the queued one in one process and asserts which path ran. Values
are compared with PyTorch's CPU result (rtol 1e-5, atol 1e-5; 1e-4 where a product or a sum
of many terms is involved: the two paths add in different orders).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from pathlib import Path

import pytest
import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import run_python  # noqa: E402
from test_opencl_latency import _linear_loop  # noqa: E402  (the latency loop, both styles)

_P = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
if _P is None or _P.record.status != "LOADED" or not _P.devices:
    pytest.skip("OpenCL plugin or platform not present (needs PoCL and setup.py native)", allow_module_level=True)
DEV = f"ral:{_P.devices[0]}"
_SO = ctypes.CDLL(_P.record.library)
_SO.ral_opencl_counter_name.restype = ctypes.c_char_p
_SO.ral_opencl_inline.restype = ctypes.c_int
if _SO.ral_opencl_inline(-1) < 0:
    pytest.skip(
        f"{DEV} cannot run commands inline (not a CPU device with unified host memory, or TORCH_FL_OPENCL_INLINE=0)",
        allow_module_level=True,
    )
_N = _SO.ral_opencl_counters(None, 0)
_NAMES = [_SO.ral_opencl_counter_name(i).decode() for i in range(_N)]


def counters() -> dict[str, int]:
    """The plugin's counts since load."""
    out = (ctypes.c_uint64 * _N)()
    _SO.ral_opencl_counters(out, _N)
    return dict(zip(_NAMES, out))


def delta(fn):
    """(fn()'s result, counter increments while it ran)."""
    a = counters()
    r = fn()
    b = counters()
    return r, {k: b[k] - a[k] for k in _NAMES}


@pytest.fixture(autouse=True)
def _inline_on():
    """Each test starts with inline execution on and an idle stream; the setting is restored."""
    before = _SO.ral_opencl_inline(1)
    torch.ral.synchronize(DEV)
    yield
    _SO.ral_opencl_inline(before)
    torch.ral.synchronize(DEV)


def _set_inline(on: bool):
    torch.ral.synchronize(DEV)
    _SO.ral_opencl_inline(1 if on else 0)


@pytest.mark.parametrize("style", ["to", "mode"])
def test_item_loop_runs_inline_with_no_opencl_call(style):
    """Linear(64)+sum+.item(): the product and the sum run inline, the read is a memcpy; the
    step makes no OpenCL call at all, and the value is CPU's."""
    step, want = _linear_loop(style)
    step()
    got, c = delta(lambda: [step() for _ in range(10)])
    assert c["inline_ops"] >= 20 and c["inline_copies"] >= 10
    for k in ("kernels", "reads", "writes", "finishes", "flushes", "markers", "gates", "waits", "buffers"):
        assert c[k] == 0, (k, c)
    assert got == pytest.approx([want] * 10, rel=1e-4, abs=1e-4)


def _ops_case(dev):
    """A batch of the ops that run inline, on `dev`: products of every stride kind, sums and
    means over dims, element-wise ops with broadcasts and scalars, copies, fills, index_select."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(24, 40, generator=g), torch.randn(40, 16, generator=g)
    bias, w = torch.randn(16, generator=g), torch.randn(16, 40, generator=g)
    x3, y3 = torch.randn(3, 8, 12, generator=g), torch.randn(3, 12, 5, generator=g)
    idx = torch.tensor([3, 0, 3, 23, 7])
    a, b, bias, w, x3, y3, idx = (t.to(dev) for t in (a, b, bias, w, x3, y3, idx))
    out = {
        "mm": a @ b,
        "linear": torch.nn.functional.linear(a, w, bias),
        "addmm_scaled": torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
        "mm_tt": b.t() @ a.t(),
        "bmm": torch.bmm(x3, y3),
        "bmm_strided": torch.bmm(x3.transpose(1, 2).contiguous().transpose(1, 2), y3),
        "sum_all": a.sum(),
        "sum_rows": a.sum(dim=1),
        "sum_cols_keep": a.sum(dim=0, keepdim=True),
        "mean_mid": x3.mean(dim=1),
        "sum_02": x3.sum(dim=(0, 2)),
        "sum_t": a.t().sum(dim=1),
        "add_alpha": torch.add(a, a * 0.5, alpha=-1.5),
        "sub_bcast": a - bias.repeat(3)[:40],
        "mul_div": (a * 3.0) / (a * a + 1),
        "rsub": 2.0 - a,
        "relu_neg": (-a).relu(),
        "strided_add": a.t() + a.t(),
        "clone_t": a.t().contiguous(),
        "fill": torch.full((7, 5), 2.5, device=dev),
        "zeros": torch.zeros(33, device=dev),
        "copy_slice": a[3:9].clone(),
        "index_select": torch.index_select(a, 0, idx),
        "index_select1": torch.index_select(a, 1, idx),
    }
    return {k: v.cpu() for k, v in out.items()}


def test_inline_ops_agree_with_queued_and_cpu():
    """Each op's inline result equals the queued path's and CPU's (within float tolerance), and
    the inline run really was inline (no kernels) while the queued run was not."""
    want = _ops_case("cpu")
    inline, ci = delta(lambda: _ops_case(DEV))
    _set_inline(False)
    queued, cq = delta(lambda: _ops_case(DEV))
    assert ci["inline_ops"] >= 20 and ci["kernels"] == 0, ci
    assert cq["inline_ops"] == 0 and cq["kernels"] >= 20, cq
    for k in want:
        torch.testing.assert_close(inline[k], want[k], rtol=1e-4, atol=1e-4, msg=lambda m, k=k: f"{k}: {m}")
        torch.testing.assert_close(inline[k], queued[k], rtol=1e-4, atol=1e-4, msg=lambda m, k=k: f"{k}: {m}")


def test_inline_waits_for_a_pending_queued_kernel():
    """A queued kernel not yet run (exp has no inline form; on PoCL it waits behind the batch
    gate until a sync) followed by small ops that read its result: the stream is not idle, so
    they queue behind it, in order, and see its values. After the sync they run inline again."""
    if os.environ.get("TORCH_FL_OPENCL_BATCH") == "0":
        pytest.skip("needs the batch gate to hold the queued kernel (TORCH_FL_OPENCL_BATCH=0)")
    x_cpu = torch.randn(64)
    x = x_cpu.to(DEV)
    torch.ral.synchronize(DEV)

    def run():
        y = x.exp()  # queued, held
        z = y * 2.0  # would run inline on an idle stream
        return z, z.sum()

    (z, s), c = delta(run)
    assert c["kernels"] == 3 and c["inline_ops"] == 0, c
    torch.testing.assert_close(z.cpu(), x_cpu.exp() * 2.0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s.cpu(), (x_cpu.exp() * 2.0).sum(), rtol=1e-5, atol=1e-4)
    _, c = delta(lambda: (z + 1).cpu())
    assert c["inline_ops"] == 1 and c["kernels"] == 0, c


def test_inline_after_big_queued_work_sees_its_result():
    """Big queued work (above the inline size) then small ops reading it, no sync between:
    whichever path the small ops take (inline only once the queued work is known complete),
    they see the finished values."""
    x_cpu = torch.randn(1 << 20)
    x = x_cpu.to(DEV)
    y = x
    for _ in range(4):
        y = y * 1.5 + 1.0
    head, tail = y[:64] * 2.0, y[-16:].sum()
    ref = x_cpu
    for _ in range(4):
        ref = ref * 1.5 + 1.0
    torch.testing.assert_close(head.cpu(), ref[:64] * 2.0, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(tail.cpu(), ref[-16:].sum(), rtol=1e-5, atol=1e-4)


def test_events_across_two_streams():
    """s1's work (big: queued; small: inline), an event recorded on s1, s2 waiting on it: s2's
    small op sees s1's results in both cases; after inline work the event is complete at once
    and s2 stays inline."""
    s1, s2 = torch.ral.Stream(DEV), torch.ral.Stream(DEV)
    for n, big in ((1 << 21, True), (64, False)):
        base = torch.randn(n)
        with torch.ral.stream(s1):
            a = base.to(DEV)
            for _ in range(3):
                a = a * 2 + 1
            ev = s1.record_event()
        with torch.ral.stream(s2):

            def waited(ev=ev, a=a):
                s2.wait_event(ev)
                return a[:32] - 1.0

            b, c = delta(waited)
        s2.synchronize()
        ref = base
        for _ in range(3):
            ref = ref * 2 + 1
        torch.testing.assert_close(b.cpu(), ref[:32] - 1.0, rtol=1e-5, atol=1e-5)
        if not big:
            assert c["inline_ops"] == 1 and c["barriers"] == 0 and c["kernels"] == 0, c
        assert ev.query() and s1.query() and s2.query()
    s1.synchronize()


def test_events_recorded_inline_time_and_query():
    """Events recorded around inline work: complete when queried, and timed (>= 0 ms)."""
    x = torch.randn(64, 64).to(DEV)
    e0, e1 = torch.ral.Event(enable_timing=True), torch.ral.Event(enable_timing=True)
    (_, c) = delta(lambda: (e0.record(), x @ x, e1.record()))
    assert c["inline_ops"] == 1 and c["kernels"] == 0, c
    assert e1.query() and e0.query()
    assert e0.elapsed_time(e1) >= 0.0


def test_index_error_inline_is_the_queued_error_and_the_stream_works_on():
    """An index out of range in an inline index_select raises the same IndexError (op, index,
    dim, size) as the queued kernel's fault at the next sync; nothing is left behind."""
    w = torch.randn(10, 4).to(DEV)
    bad = torch.tensor([0, 10], device=DEV)
    msg = r"index_select\b.*index 10 is out of bounds for dimension 0 with size 10"

    def fault():
        with pytest.raises(IndexError, match=msg):
            torch.index_select(w, 0, bad)
            (w + 1).sum().item()

    _, ci = delta(fault)
    _set_inline(False)
    _, cq = delta(fault)
    assert ci["inline_ops"] >= 1 and ci["kernels"] == 0, ci  # raised by the inline command
    assert cq["inline_ops"] == 0 and cq["kernels"] >= 1, cq  # raised at the queued path's sync
    for on in (False, True):
        _set_inline(on)
        torch.testing.assert_close((w * 3).sum().cpu(), (w.cpu() * 3).sum(), rtol=1e-5, atol=1e-5)


def test_queued_fault_still_surfaces_when_later_ops_run_inline():
    """A queued index kernel faults, then small ops run: the fault still raises at the sync."""
    w = torch.randn(10, 4).to(DEV)
    _set_inline(False)
    torch.index_select(w, 0, torch.tensor([0, 12], device=DEV))
    _SO.ral_opencl_inline(1)
    with pytest.raises(IndexError, match=r"index 12 is out of bounds"):
        (w + 1).sum().item()
    torch.testing.assert_close((w + 1).sum().cpu(), (w.cpu() + 1).sum(), rtol=1e-5, atol=1e-5)


def test_threads_on_one_stream_inline_and_queued_mixed():
    """Four threads share the default stream, each mixing inline-able ops with a queued one
    (exp) and reading back: no deadlock, every value is the thread's own CPU value."""
    failures: list[str] = []
    go = threading.Barrier(4)

    def work(seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        host = torch.randn(8, 8, generator=g)
        dev = host.to(DEV)
        go.wait(timeout=60)
        for i in range(25):
            q = (dev @ dev + i).sum().item() if i % 3 else (dev.exp() * i).sum().item()
            want = (host @ host + i).sum().item() if i % 3 else (host.exp() * i).sum().item()
            if abs(q - want) > 1e-3 * max(1.0, abs(want)):
                failures.append(f"thread {seed} step {i}: {q} != {want}")

    pool = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    (_, c) = delta(lambda: ([t.start() for t in pool], [t.join(timeout=300) for t in pool]))
    assert not any(t.is_alive() for t in pool), "a thread hung"
    assert not failures, failures[:5]
    assert c["inline_ops"] > 0 and c["kernels"] > 0, c


def test_transfers_inline_on_an_idle_stream():
    """Host to device, device to host, device to device and memset run as memcpy/memset on an
    idle stream, with the bytes of the queued path."""
    src = torch.arange(1000, dtype=torch.float32)

    def run():
        x = src.to(DEV)
        y = torch.empty_like(x)
        y.copy_(x)
        z = torch.zeros(1000, device=DEV)
        return x.cpu(), y.cpu(), z.cpu()

    (x, y, z), c = delta(run)
    assert c["inline_copies"] >= 4 and c["writes"] == 0 and c["reads"] == 0 and c["copies"] == 0, c
    assert torch.equal(x, src) and torch.equal(y, src) and torch.equal(z, torch.zeros(1000))


def test_off_switch_env_keeps_everything_queued():
    """TORCH_FL_OPENCL_INLINE=0: no inline command, plain runtime buffers, CPU's value."""
    code = f"""
import ctypes, torch, torch_fl
p = next(p for p in torch_fl.plugins() if p.record.name == 'opencl')
so = ctypes.CDLL(p.record.library); so.ral_opencl_counter_name.restype = ctypes.c_char_p
n = so.ral_opencl_counters(None, 0); names = [so.ral_opencl_counter_name(i).decode() for i in range(n)]
torch.manual_seed(0)
lin, x = torch.nn.Linear(64, 64), torch.randn(32, 64)
want = lin(x).sum().item()
lin, x = lin.to('{DEV}'), x.to('{DEV}')
with torch.no_grad():
    got = [lin(x).sum().item() for _ in range(3)]
c = (ctypes.c_uint64 * n)(); so.ral_opencl_counters(c, n); c = dict(zip(names, c))
assert so.ral_opencl_inline(-1) == -1, 'inline still possible'
assert c['inline_ops'] == 0 and c['inline_copies'] == 0 and c['kernels'] >= 6, c
assert all(abs(g - want) <= 1e-4 * max(1.0, abs(want)) for g in got), (got, want)
print('OK')
"""
    r = run_python(code, env={"TORCH_FL_OPENCL_INLINE": "0"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("k", [1, 7, 8, 9, 64, 67])
@pytest.mark.parametrize("n", [1, 3, 4, 5, 17])
def test_inline_linear_shapes_match_cpu(k, n):
    """nn.Linear's x @ W.t() inline (four weight rows per pass, eight lanes over K): every tail
    of K and of the output columns, with bias, against CPU; the product ran inline."""
    torch.manual_seed(k * 100 + n)
    x, w, b = torch.randn(6, k), torch.randn(n, k), torch.randn(n)
    got, d = delta(lambda: torch.nn.functional.linear(x.to(DEV), w.to(DEV), b.to(DEV)).cpu())
    assert d["inline_ops"] >= 1 and d["kernels"] == 0, d
    torch.testing.assert_close(got, torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("m", [4, 5, 13])
@pytest.mark.parametrize("n", [16, 31, 48])
@pytest.mark.parametrize("k", [1, 16, 64])
def test_inline_blocked_products_match_cpu(m, n, k):
    """Products of four rows or more run inline as register blocks of 4 x 16 over a packed B:
    row and column tails, a transposed and a row-major B, alpha/beta, beta = 0 over a NaN
    addend (ignored, as on CPU), a strided output, a batch; against CPU, inline only."""
    g = torch.Generator().manual_seed(m * 1000 + n * 10 + k)
    x, w, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g), torch.randn(n, generator=g)
    x3, y3 = torch.randn(3, m, k, generator=g), torch.randn(3, k, n, generator=g)
    nan_bias = torch.full((n,), float("nan"))

    def run(dev):
        xd, wd, bd, x3d, y3d, nd = (t.to(dev) for t in (x, w, b, x3, y3, nan_bias))
        out = torch.zeros(m, 2 * n, device=dev)
        torch.mm(xd, wd.t(), out=out[:, ::2])
        return [
            torch.nn.functional.linear(xd, wd, bd),
            xd @ wd.t().contiguous(),
            torch.addmm(bd, xd, wd.t(), beta=0.5, alpha=-2.0),
            torch.addmm(nd, xd, wd.t(), beta=0.0),
            out,
            torch.bmm(x3d, y3d),
        ]

    got, d = delta(lambda: [t.cpu() for t in run(DEV)])
    assert d["inline_ops"] >= 5 and d["kernels"] == 0, d  # K = 1: matmul may take an outer product
    for g_, w_ in zip(got, run("cpu"), strict=True):
        torch.testing.assert_close(g_, w_, rtol=1e-5, atol=1e-5)
