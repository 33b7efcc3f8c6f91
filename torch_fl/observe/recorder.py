"""Record every op, allocation and sync on ral devices into a Chrome trace file.

Entry points: `with torch_fl.trace("trace.json"):` and TORCH_FL_TRACE=path (set by
`ral-trace run`), which records the whole process and finishes at exit.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
import time
from pathlib import Path

import torch

from torch_fl.core import runtime
from torch_fl.device import memory, sync
from torch_fl.device import stream_state as streams_state
from torch_fl.dispatch import entry as dispatch
from torch_fl.observe import chrome_trace as chrome

# Python frames kept per allocation; the innermost ones outside torch and torch_fl.
STACK_DEPTH = 8
# Events held in memory before they are appended to the file; a flush also happens when this
# many seconds passed, so a process that dies hard loses at most about a second of events.
FLUSH_EVERY = 4096
FLUSH_SECONDS = 1.0
_SKIP_PREFIXES = (
    str(Path(torch.__file__).parent) + os.sep,
    str(Path(__file__).resolve().parents[1]) + os.sep,
    "<frozen ",
)
_active: Recorder | None = None
_active_lock = threading.Lock()
# Kinds of the compact records buffered between flushes (formatted to JSON only when written).
_OP, _ALLOC, _FREE, _COUNTER, _SYNC, _META = range(6)


def _args_key(full) -> tuple:
    """Hashable shapes and dtypes of the tensor arguments of one call (no tensor is kept)."""
    key = []
    Tensor = torch.Tensor
    for v in full:
        if isinstance(v, Tensor):
            key += (v.shape, v.dtype)
        elif type(v) in (list, tuple) and v and isinstance(v[0], Tensor):
            key += (tuple(t.shape for t in v if t is not None), v[0].dtype)
    return tuple(key)


def _args_json(key: tuple) -> str:
    shapes = [list(s) if isinstance(s, torch.Size) else [list(x) for x in s] for s in key[::2]]
    dtypes = [str(d).removeprefix("torch.") for d in key[1::2]]
    return chrome.dumps({"shapes": shapes, "dtypes": dtypes})[1:-1]


def _exception_text(exc_type, exc) -> str | None:
    if exc_type is None:
        return None
    return f"{exc_type.__name__}: {exc}"


class Recorder:
    """Observer of the dispatch, allocator and sync hooks that streams events into a TraceWriter.

    The hooks append small tuples; JSON is produced only when a batch is written, and memory
    counters are coalesced to one per op per device (the alloc/free events stay exact).
    """

    def __init__(self, path: str | os.PathLike, flush_every: int = FLUSH_EVERY):
        self.path = os.fspath(path)
        self.flush_every = max(1, flush_every)
        self.complete = False
        self.exit_error: str | None = None
        self._t0 = self._last_flush = time.perf_counter()
        self._pending: list[tuple] = []
        self._lock = threading.RLock()
        self._flushing = False
        self._stacks: list[list[str]] = []
        self._stack_ids: dict[tuple, int] = {}
        # id(code) -> (skip?, code); holding the code object keeps its id from being reused.
        self._skip: dict[int, tuple[bool, object]] = {}
        self._args: dict[tuple, str] = {}
        self._names: dict[str, str] = {}
        self._live: dict[tuple[int, int], tuple[int, float, int]] = {}
        self._allocated: dict[int, int] = {}
        self._dirty: set[int] = set()
        self._streams: set[tuple[int, int]] = set()
        self._devices: list[dict] = []
        self._writer = chrome.TraceWriter(
            self.path,
            {
                "producer": "torch_fl",
                "format": chrome.FORMAT_VERSION,
                "pid": os.getpid(),
                "argv": list(sys.argv),
                "start_unix_s": time.time(),
                "torch": torch.__version__,
            },
        )
        # Devices join the trace when the plugins load: tracing a script must not load them
        # earlier than the script would (a CPU-only script stays immune to a crashing plugin).
        runtime.on_initialized(self._add_devices)
        self.flush()

    def _add_devices(self) -> None:
        """Name each device's track and start its memory counter (once the plugins are loaded)."""
        with self._lock:
            for d in (self._device_entry(rec) for rec in runtime.device_records()):
                self._devices.append(d)
                for event in chrome.process_metadata(d["pid"], d["label"], d["vendor"]):
                    self._pending.append((_META, event))
                self._allocated[d["pid"]] = memory.memory_stats_dict(d["pid"])["allocated_bytes.all.current"]
                self._pending.append((_COUNTER, d["pid"], self._t0, self._allocated[d["pid"]]))

    @staticmethod
    def _device_entry(rec) -> dict:
        return {
            "pid": rec.index,
            "label": f"ral:{rec.index} {rec.name}",
            "name": rec.name,
            "vendor": rec.vendor,
            "type": rec.type,
            "total_memory": rec.total_memory,
        }

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Recorder:
        """Attach to the dispatch, allocator and sync hooks."""
        dispatch.OBSERVERS.append(self._on_op)
        memory.ALLOC_OBSERVERS.append(self._on_alloc)
        sync.SYNC_OBSERVERS.append(self._on_sync)
        return self

    def stop(self, exit_error: str | None = None) -> None:
        """Detach, write the remaining events and the final summary, and close the file."""
        for hooks, fn in (
            (dispatch.OBSERVERS, self._on_op),
            (memory.ALLOC_OBSERVERS, self._on_alloc),
            (sync.SYNC_OBSERVERS, self._on_sync),
        ):
            if fn in hooks:
                hooks.remove(fn)
        self._counters(time.perf_counter())
        self.exit_error = exit_error
        self.complete = True
        self.flush()
        self._writer.close()

    @property
    def events_written(self) -> int:
        """Events in the file so far."""
        return self._writer.count

    # -- observers (hot: keep them to a few appends) ---------------------------------------
    def _on_op(self, op, tier, dev, t0, t1, full):
        stream = streams_state.current(dev)
        if (dev, stream) not in self._streams:
            self._name_stream(dev, stream)
        self._pending.append((_OP, op, tier, dev, stream, t0, t1, _args_key(full)))
        if self._dirty:
            self._counters(t1)
        self._maybe_flush()

    def _on_alloc(self, event, buf):
        t = time.perf_counter()
        dev, ptr, n = buf.device, buf.ptr, buf.nbytes
        if event == "alloc":
            sid = self._stack_id()
            self._live[(dev, ptr)] = (n, t, sid)
            self._allocated[dev] = self._allocated.get(dev, 0) + n
            self._pending.append((_ALLOC, dev, ptr, n, t, sid))
        else:
            self._live.pop((dev, ptr), None)  # absent when allocated before the trace began
            self._allocated[dev] = self._allocated.get(dev, 0) - n
            self._pending.append((_FREE, dev, ptr, n, t))
        self._dirty.add(dev)
        self._maybe_flush()

    def _on_sync(self, dev, reason):
        stream = streams_state.current(dev)
        if (dev, stream) not in self._streams:
            self._name_stream(dev, stream)
        t = time.perf_counter()
        if self._dirty:
            self._counters(t)
        self._pending.append((_SYNC, dev, stream, t, reason))
        self._maybe_flush()

    def _counters(self, t: float) -> None:
        dirty, self._dirty = self._dirty, set()
        for dev in dirty:
            self._pending.append((_COUNTER, dev, t, self._allocated[dev]))

    def _name_stream(self, dev: int, stream: int) -> None:
        self._streams.add((dev, stream))
        self._pending.append((_META, chrome.thread_metadata(dev, stream, chrome.stream_name(stream))))

    def _maybe_flush(self) -> None:
        n = len(self._pending)
        if n >= self.flush_every or (n & 63 == 0 and time.perf_counter() - self._last_flush > FLUSH_SECONDS):
            self.flush()

    def _stack_id(self) -> int:
        """Index into the stack table of the allocating Python stack (user frames, innermost first)."""
        f = sys._getframe(3)  # skip _stack_id, _on_alloc and memory.allocate
        skip = self._skip
        key = []
        while f is not None:
            code = f.f_code
            s = skip.get(id(code))
            if s is None:
                s = skip[id(code)] = (code.co_filename.startswith(_SKIP_PREFIXES), code)
            if not s[0]:
                key += (id(code), f.f_lasti)
                if len(key) == 2 * STACK_DEPTH:
                    break
            f = f.f_back
        key = tuple(key)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = self._stack_ids[key] = len(self._stacks)
            self._stacks.append(self._describe_stack(sys._getframe(3)))
        return sid

    def _describe_stack(self, f) -> list[str]:
        # Only on a cache miss: line numbers and names of the same user frames _stack_id keyed on.
        frames = []
        while f is not None and len(frames) < STACK_DEPTH:
            if not self._skip[id(f.f_code)][0]:
                frames.append(f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}")
            f = f.f_back
        return frames

    # -- output ----------------------------------------------------------------------------
    def _format(self, rec: tuple) -> str:
        kind = rec[0]
        us = self._us
        if kind == _OP:
            _, name, tier, dev, stream, t0, t1, key = rec
            args = self._args.get(key)
            if args is None:
                args = self._args[key] = _args_json(key)
            return chrome.op_event(self._name(name), self._name(tier), dev, stream, us(t0), (t1 - t0) * 1e6, args)
        if kind == _ALLOC:
            _, dev, ptr, n, t, sid = rec
            return chrome.alloc_event("alloc", dev, ptr, n, us(t), sid)
        if kind == _FREE:
            _, dev, ptr, n, t = rec
            return chrome.alloc_event("free", dev, ptr, n, us(t), None)
        if kind == _COUNTER:
            _, dev, t, used = rec
            return chrome.counter_event(dev, us(t), used)
        if kind == _SYNC:
            _, dev, stream, t, reason = rec
            return chrome.sync_event(dev, stream, us(t), self._name(reason))
        return chrome.dumps(rec[1])

    def _us(self, t: float) -> float:
        return (t - self._t0) * 1e6

    def _name(self, text: str) -> str:
        quoted = self._names.get(text)
        if quoted is None:
            quoted = self._names[text] = chrome.dumps(text)
        return quoted

    def _summary(self) -> dict:
        # A GC pass could free a Buffer (and call _on_alloc) while the table is copied.
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            live = list(self._live.items())
        finally:
            if was_enabled:
                gc.enable()
        return {
            "format": chrome.FORMAT_VERSION,
            "complete": self.complete,
            "exit_error": self.exit_error,
            "devices": self._devices,
            "stacks": self._stacks,
            "live": [
                {"device": d, "ptr": hex(p), "bytes": n, "ts": round(self._us(t), 3), "stack": sid}
                for (d, p), (n, t, sid) in live
            ],
        }

    def flush(self) -> None:
        """Append the pending events to the file; the file is valid JSON afterwards."""
        if self._flushing:  # re-entered from a Buffer freed by GC during the write
            return
        with self._lock:
            self._flushing = True
            try:
                batch, self._pending = self._pending, []
                self._writer.write([self._format(r) for r in batch], self._summary())
                self._last_flush = time.perf_counter()
            finally:
                self._flushing = False


def _begin(path, flush_every: int = FLUSH_EVERY) -> Recorder:
    global _active
    with _active_lock:
        if _active is not None:
            raise RuntimeError(f"torch_fl: a trace is already recording to {_active.path}; traces do not nest")
        _active = Recorder(path, flush_every).start()
        return _active


def _end(rec: Recorder, exit_error: str | None) -> None:
    global _active
    with _active_lock:
        if _active is rec:
            _active = None
    if not rec.complete:
        rec.stop(exit_error)


class Trace:
    """`with torch_fl.trace(path) as t:`: records while the block runs; t.recorder is live inside."""

    def __init__(self, path="trace.json", flush_every: int = FLUSH_EVERY):
        self.path = os.fspath(path)
        self.flush_every = flush_every
        self.recorder: Recorder | None = None

    def __enter__(self) -> Trace:
        self.recorder = _begin(self.path, self.flush_every)
        return self

    def __exit__(self, exc_type, exc, tb):
        _end(self.recorder, _exception_text(exc_type, exc))
        return False


def trace(path="trace.json") -> Trace:
    """A context manager that records every op, allocation and sync into a Chrome trace file."""
    return Trace(path)


def active() -> Recorder | None:
    """The recorder now running in this process, if any."""
    return _active


def start_from_env() -> None:
    """Honour TORCH_FL_TRACE=path: record this process until it exits (used by `ral-trace run`)."""
    # Popped so that Python subprocesses of the traced script do not overwrite the same file.
    path = os.environ.pop("TORCH_FL_TRACE")
    flush_every = int(os.environ.pop("TORCH_FL_TRACE_FLUSH_EVERY", FLUSH_EVERY))
    rec = _begin(path, flush_every)
    atexit.register(_finish_at_exit, rec)


def _finish_at_exit(rec: Recorder) -> None:
    # An uncaught exception has been printed by now; the interpreter keeps it in sys.last_*.
    error = _exception_text(getattr(sys, "last_type", None), getattr(sys, "last_value", None))
    # Collect cycles first, so "alive at exit" means still referenced, not awaiting the collector.
    gc.collect()
    _end(rec, error)
