"""Capability: a synchronizing loop on an OpenCL CPU runtime (PoCL) queues its small commands in
batches, one hand-off to the runtime's worker threads per `.item()`, with unchanged results and
stream semantics. These tests run with inline execution switched off (`ral_opencl_inline(0)`),
so every command takes the queued path they check; tests/test_opencl_inline.py covers inline.

The plugin counts the OpenCL calls it makes (`ral_opencl_counters`, exported beside the plugin
entry point); these tests assert the counts per loop step, never a time. Values are compared
with PyTorch's CPU result (rtol/atol 1e-5; matmul 1e-4 where a product is involved).
"""

from __future__ import annotations

import copy
import ctypes
import sys
import threading
from pathlib import Path

import pytest
import torch

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import run_python  # noqa: E402

_P = next((p for p in torch_fl.plugins() if p.record.name == "opencl"), None)
if _P is None or _P.record.status != "LOADED" or not _P.devices:
    pytest.skip("OpenCL plugin or platform not present (needs PoCL and setup.py native)", allow_module_level=True)
DEV = f"ral:{_P.devices[0]}"
if torch_fl.devices()[_P.devices[0]].type != "cpu":
    pytest.skip("batching applies to CPU OpenCL runtimes only; this one is not", allow_module_level=True)

_SO = ctypes.CDLL(_P.record.library)
_SO.ral_opencl_counter_name.restype = ctypes.c_char_p
_N = _SO.ral_opencl_counters(None, 0)
_NAMES = [_SO.ral_opencl_counter_name(i).decode() for i in range(_N)]


@pytest.fixture(autouse=True)
def _queued_only():
    """Every command of these tests is queued (inline execution off, restored after)."""
    _SO.ral_opencl_inline.restype = ctypes.c_int
    before = _SO.ral_opencl_inline(0)
    torch.ral.synchronize(DEV)
    yield
    if before == 1:
        _SO.ral_opencl_inline(1)


def counters() -> dict[str, int]:
    """The plugin's OpenCL call counts since load."""
    out = (ctypes.c_uint64 * _N)()
    _SO.ral_opencl_counters(out, _N)
    return dict(zip(_NAMES, out))


def per_step(step, n=20) -> dict[str, float]:
    """Counter increments per call of step() (after two warm-up calls)."""
    step()
    step()
    a = counters()
    for _ in range(n):
        step()
    b = counters()
    return {k: (b[k] - a[k]) / n for k in _NAMES}


def _linear_loop(style):
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(64, 64), torch.randn(32, 64)
    expected = lin(x).sum().item()
    if style == "to":
        lin_d, x_d = lin.to(DEV), x.to(DEV)

        def step():
            with torch.no_grad():
                return lin_d(x_d).sum().item()

    else:

        def step():
            with torch.no_grad(), torch_fl.ral_mode(DEV):
                return lin(x).sum().item()

    return step, expected


def test_counter_names_are_stable():
    assert _N == len(_NAMES) >= 13
    for name in ("kernels", "reads", "finishes", "waits", "flushes", "gates", "gate_opens"):
        assert name in _NAMES
    assert _SO.ral_opencl_counter_name(_N) is None


@pytest.mark.parametrize("style", ["to", "mode"])
def test_item_loop_is_one_batch_per_step(style):
    """Linear(64)+sum+.item(): every command of a step waits behind one gate that the read
    opens; one finish, one read, no event waits per step; the value is CPU's."""
    step, expected = _linear_loop(style)
    c = per_step(step)
    assert c["kernels"] >= 2  # the product and the sum run on the device
    assert c["gates"] == 1 and c["gate_opens"] == 1
    assert c["reads"] == 1 and c["finishes"] == 1
    assert c["waits"] == 0 and c["markers"] == 0
    assert step() == pytest.approx(expected, rel=1e-4, abs=1e-4)


def test_item_loop_values_match_cpu_each_step():
    """Inputs that change every step: each .item() reads that step's result."""
    torch.manual_seed(1)
    lin = torch.nn.Linear(64, 64)
    lin_d = copy.deepcopy(lin).to(DEV)
    xs = [torch.randn(32, 64) for _ in range(12)]
    with torch.no_grad():
        for x in xs:
            got = lin_d(x.to(DEV)).relu().sum().item()
            assert got == pytest.approx(lin(x).relu().sum().item(), rel=1e-4, abs=1e-4)


# A child process's prelude: the plugin's counters (`counters()`) and the latency loop's
# Linear(64, 64) with its CPU value `want`.
_CHILD_LOOP = """
import ctypes, torch, torch_fl
p = next(p for p in torch_fl.plugins() if p.record.name == 'opencl')
so = ctypes.CDLL(p.record.library); so.ral_opencl_counter_name.restype = ctypes.c_char_p
n = so.ral_opencl_counters(None, 0); names = [so.ral_opencl_counter_name(i).decode() for i in range(n)]
def counters():
    c = (ctypes.c_uint64 * n)(); so.ral_opencl_counters(c, n); return dict(zip(names, c))
torch.manual_seed(0)
lin, x = torch.nn.Linear(64, 64), torch.randn(32, 64)
want = lin(x).sum().item()
"""


def test_batching_off_by_env_queues_without_gates():
    """TORCH_FL_OPENCL_BATCH=0: the same loop creates no gate (and still gives CPU's value)."""
    code = (
        _CHILD_LOOP
        + f"""
lin, x = lin.to('{DEV}'), x.to('{DEV}')
with torch.no_grad():
    for _ in range(5):
        got = lin(x).sum().item()
c = counters()
assert c['gates'] == 0 and c['gate_opens'] == 0, c
assert c['kernels'] >= 10, c
assert abs(got - want) <= 1e-4 * max(1.0, abs(want)), (got, want)
print('OK')
"""
    )
    r = run_python(code, env={"TORCH_FL_OPENCL_BATCH": "0", "TORCH_FL_OPENCL_INLINE": "0"})
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr


def test_gate_opens_by_itself_after_a_batch():
    """Many small ops and no sync: the gate opens every OCL_GATE_MAX (16) commands, so queued
    work runs without the host waiting; the result is CPU's."""
    x_cpu = torch.randn(100)
    x = x_cpu.to(DEV)
    torch.ral.synchronize()
    a = counters()
    y, y_cpu = x, x_cpu
    for _ in range(40):
        y, y_cpu = y * 1.01 + 0.1, y_cpu * 1.01 + 0.1
    b = counters()
    assert b["kernels"] - a["kernels"] >= 40
    assert b["gate_opens"] - a["gate_opens"] >= 4  # 80 commands / 16
    assert b["finishes"] == a["finishes"]  # nobody waited
    torch.testing.assert_close(y.cpu(), y_cpu, rtol=1e-5, atol=1e-5)


def test_big_launch_starts_at_once():
    """A launch over 2^18 elements or more opens the gate right after it is queued."""
    x = torch.randn(1 << 19).to(DEV)
    torch.ral.synchronize()
    a = counters()
    y = x * 2
    b = counters()
    assert b["gate_opens"] - a["gate_opens"] == 1
    torch.testing.assert_close(y.cpu(), x.cpu() * 2)


def test_fault_behind_the_gate_surfaces_at_the_sync():
    """An index fault of a held kernel raises IndexError at the next sync; the stream works on."""
    w = torch.randn(10, 4).to(DEV)
    with pytest.raises(IndexError, match=r"index_select\b.*index 10 is out of"):
        torch.index_select(w, 0, torch.tensor([0, 10], device=DEV))
        (w + 1).sum().item()
    torch.testing.assert_close((w * 3).sum().cpu(), (w.cpu() * 3).sum(), rtol=1e-5, atol=1e-5)


def test_event_across_streams_orders_held_work():
    """Work held on one stream, an event recorded there, a second stream waiting on it: the
    second stream sees the first's results (recording opens the gate)."""
    s1, s2 = torch.ral.Stream(DEV), torch.ral.Stream(DEV)
    base = torch.randn(64, 64)
    with torch.ral.stream(s1):
        a = base.to(DEV)
        for _ in range(3):
            a = a * 2 + 1
        ev = s1.record_event()
    with torch.ral.stream(s2):
        s2.wait_event(ev)
        b = a.sum(dim=0)
    s2.synchronize()
    expected = base
    for _ in range(3):
        expected = expected * 2 + 1
    torch.testing.assert_close(b.cpu(), expected.sum(dim=0), rtol=1e-5, atol=1e-4)
    assert ev.query() and s1.query()


def test_query_runs_held_work():
    """A stream query opens the gate: polling alone (no sync) sees the work finish."""
    s = torch.ral.Stream(DEV)
    with torch.ral.stream(s):
        y = torch.ones(32, device=DEV) * 5
    for _ in range(2000):
        if s.query():
            break
    assert s.query()
    assert torch.equal(y.cpu(), torch.full((32,), 5.0))


def test_threads_sharing_a_stream_neither_deadlock_nor_mix_up():
    """Threads queue small ops on the shared default stream while others read back."""
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def worker(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            x_cpu = torch.randn(16, 16, generator=g)
            x = x_cpu.to(DEV)
            start.wait(timeout=60)
            for i in range(30):
                got = (x * i + 1).sum().item()
                want = (x_cpu * i + 1).sum().item()
                assert got == pytest.approx(want, rel=1e-4, abs=1e-3)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread hung (a wait behind a closed gate)"
    assert not errors, errors


def test_pocl_basic_device_is_not_gated_and_does_not_hang():
    """PoCL's single-threaded "basic" device runs the commands a user event releases inside
    clSetUserEventStatus and (PoCL 3.1) deadlocks on its own event lock there: the plugin
    must not gate it. The loop finishes in both styles with CPU's value and no gate."""
    code = (
        _CHILD_LOOP
        + f"""
name = torch.ral.get_device_name('{DEV}')
if not name.startswith('basic-'):
    print('NOBASIC', name); raise SystemExit(0)
lin_d, x_d = lin.to('{DEV}'), x.to('{DEV}')
with torch.no_grad():
    got = [lin_d(x_d).sum().item() for _ in range(3)]
    with torch_fl.ral_mode('{DEV}'):
        got += [lin(x).sum().item() for _ in range(3)]
assert all(abs(g - want) <= 1e-4 * max(1.0, abs(want)) for g in got), (got, want)
assert counters()['gates'] == 0, counters()
print('OK')
"""
    )
    r = run_python(code, env={"POCL_DEVICES": "basic"}, timeout=240)
    if "NOBASIC" in r.stdout:
        pytest.skip(f"this PoCL exposes no basic device under POCL_DEVICES=basic: {r.stdout.strip()}")
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr
