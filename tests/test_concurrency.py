"""Concurrent use of streams, events, allocation and rescan on every ral device.

Each test runs several threads against one device for a bounded time and checks that no
call raised, every result matches PyTorch CPU exactly, and the process keeps working.
TORCH_FL_STRESS_SECONDS sets the length of the stress test (default 2 s per device; the
sanitizer job, .ci/sanitizers.sh, runs it longer). These tests found use-after-frees
(a stream or event freed while another thread used its handle) and spurious "stream N
does not exist" errors (the current stream was process-wide, not per thread).
"""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

import torch_fl
from torch_fl._native import ffi, lib

DEVICES = ["ral:0", "ral:1"]
STRESS_SECONDS = float(os.environ.get("TORCH_FL_STRESS_SECONDS", "2"))


def _need(dev: str) -> int:
    idx = int(dev.split(":")[1])
    if torch.ral.device_count() <= idx:
        pytest.skip(f"{dev} is not present (needs the host and OpenCL plugins)")
    return idx


def _run_threads(targets, seconds: float) -> list[str]:
    """Run each target(stop_time, errors) in its own thread; return what they recorded."""
    errors: list[str] = []
    stop = time.monotonic() + seconds
    threads = [threading.Thread(target=t, args=(stop, errors)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 120)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    return errors


def _guard(fn):
    """Wrap a loop body so an exception is recorded instead of killing the thread."""

    def body(stop, errors):
        try:
            fn(stop, errors)
        except Exception as e:  # noqa: BLE001 -- every failure is reported by the test
            errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")

    return body


@pytest.mark.parametrize("dev", DEVICES)
def test_dropped_streams_do_not_break_synchronize(dev):
    """One thread creates, uses and drops streams while others synchronize and compute."""
    idx = _need(dev)

    @_guard
    def churn(stop, errors):
        kept = []
        while time.monotonic() < stop:
            s = torch.ral.Stream(idx)
            with torch.ral.stream(s):
                kept.append(torch.ones(64, device=dev) * 2)
            del s  # destroyed while its op may still be queued
        if not all(torch.equal(y.cpu(), torch.full((64,), 2.0)) for y in kept[-50:]):
            errors.append("churn: wrong result")

    @_guard
    def syncer(stop, errors):
        while time.monotonic() < stop:
            torch.ral.synchronize(idx)
            y = torch.ones(64, device=dev) + 1
        if not torch.equal(y.cpu(), torch.full((64,), 2.0)):
            errors.append("syncer: wrong result")

    assert _run_threads([churn, syncer, syncer], 1.5) == []


@pytest.mark.parametrize("dev", DEVICES)
def test_work_on_a_dropped_stream_completes(dev):
    """Work queued on a stream survives the stream being dropped before it ran."""
    idx = _need(dev)
    x = torch.randn(128, 128)
    outs = []
    for _ in range(20):
        s = torch.ral.Stream(idx)
        with torch.ral.stream(s):
            r = x.to(dev)
            outs.append(r @ r)
        del s  # destroy while the matmul may still be queued
    expected = x @ x
    for y in outs:
        torch.testing.assert_close(y.cpu(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dev", DEVICES)
def test_current_stream_is_per_thread(dev):
    """`with torch.ral.stream(s)` in one thread does not redirect another thread's ops."""
    idx = _need(dev)
    s = torch.ral.Stream(idx)
    seen = []
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait(10)
        seen.append(torch.ral.current_stream(idx))
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with torch.ral.stream(s):
        entered.set()
        done.wait(10)
    t.join()
    assert seen == [torch.ral.default_stream(idx)]


def _ok(status):
    if status != 0:
        raise RuntimeError(ffi.string(lib.rt_last_error()).decode())


@pytest.mark.parametrize("dev", DEVICES)
def test_raw_event_destroy_races_with_use(dev):
    """Runtime API: one thread destroys events others synchronize, query and wait on."""
    idx = _need(dev)
    ids: list[int] = []
    lock = threading.Lock()
    out = ffi.new("int32_t*")
    _ok(lib.rt_stream_create(idx, out))
    sid = out[0]

    @_guard
    def maker(stop, errors):
        out = ffi.new("int32_t*")
        while time.monotonic() < stop:
            _ok(lib.rt_event_create(idx, out))
            _ok(lib.rt_event_record(idx, out[0], sid))
            with lock:
                ids.append(out[0])
            with lock:
                victim = ids.pop(0) if len(ids) > 4 else None
            if victim is not None:
                _ok(lib.rt_event_destroy(idx, victim))

    @_guard
    def user(stop, errors):
        while time.monotonic() < stop:
            with lock:
                eid = ids[-1] if ids else None
            if eid is None:
                continue
            # The event may be destroyed under us: only "does not exist" is acceptable. Each
            # call's message is read right after it: the id can be reused by a new event
            # before the next call, which then sets its own (NOT_READY) message.
            for fn, args in (
                (lib.rt_event_synchronize, (idx, eid)),
                (lib.rt_event_query, (idx, eid)),
                (lib.rt_stream_wait_event, (idx, 0, eid)),
            ):
                st = fn(*args)
                if st not in (0, lib.RAL_ERROR_NOT_READY):
                    msg = ffi.string(lib.rt_last_error()).decode()
                    if "does not exist" not in msg:
                        errors.append(msg)

    try:
        assert _run_threads([maker, user, user], 1.5) == []
    finally:
        for eid in ids:
            lib.rt_event_destroy(idx, eid)
        _ok(lib.rt_device_synchronize(idx))
        _ok(lib.rt_stream_destroy(idx, sid))


@pytest.mark.parametrize("dev", DEVICES)
def test_stress_streams_events_alloc_rescan(dev):
    """Everything at once for TORCH_FL_STRESS_SECONDS: per-thread streams running ops,
    stream and event churn, device syncs, allocation churn and rescans."""
    idx = _need(dev)
    a = torch.randn(32, 32)
    expected = a @ a + 1

    @_guard
    def per_thread_stream_ops(stop, errors):
        while time.monotonic() < stop:
            s = torch.ral.Stream(idx)
            with torch.ral.stream(s):
                r = a.to(dev)
                y = r @ r + 1
                ev = s.record_event()
            ev.synchronize()
            if not s.query():
                errors.append("stream busy after its last event synchronized")
            got = y.cpu()
            del s
            if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
                errors.append("per-thread stream: wrong result")

    @_guard
    def default_stream_ops(stop, errors):
        while time.monotonic() < stop:
            y = (a.to(dev) @ a.to(dev) + 1).cpu()
            if not torch.allclose(y, expected, rtol=1e-4, atol=1e-4):
                errors.append("default stream: wrong result")
            torch.ral.synchronize(idx)

    @_guard
    def alloc_churn(stop, errors):
        while time.monotonic() < stop:
            bufs = [torch.empty(n * 1024, device=dev) for n in (1, 7, 64, 300)]
            del bufs
            ev = torch.ral.Event()
            ev.record(torch.ral.current_stream(idx))
            ev.wait(torch.ral.default_stream(idx))
            ev.synchronize()

    @_guard
    def rescanner(stop, errors):
        while time.monotonic() < stop:
            torch_fl.rescan()
            time.sleep(0.05)

    targets = [per_thread_stream_ops, per_thread_stream_ops, default_stream_ops, alloc_churn, rescanner]
    assert _run_threads(targets, STRESS_SECONDS) == []
    torch.ral.synchronize(idx)
    torch.testing.assert_close((a.to(dev) @ a.to(dev) + 1).cpu(), expected, rtol=1e-4, atol=1e-4)
