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

from ... import dispatch, memory, runtime, streams_state, transfer
from . import chrome

# Python frames kept per allocation; the innermost ones outside torch and torch_fl.
STACK_DEPTH = 8
# Events held in memory before they are appended to the file; a flush also happens when this
# many seconds passed, so a process that dies hard loses at most about a second of events.
FLUSH_EVERY = 4096
FLUSH_SECONDS = 1.0
_SKIP_PREFIXES = (
    str(Path(torch.__file__).parent) + os.sep,
    str(Path(__file__).resolve().parents[2]) + os.sep,
    "<frozen ",
)
_DTYPE_NAMES: dict = {}
_active: Recorder | None = None
_active_lock = threading.Lock()


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def _describe_args(full) -> tuple[list, list]:
    """Shapes and dtypes of the tensor arguments of one call (tensor lists give nested lists)."""
    shapes, dtypes = [], []
    Tensor = torch.Tensor
    for v in full:
        if isinstance(v, Tensor):
            shapes.append(list(v.shape))
            dtypes.append(_dtype_name(v.dtype))
        elif type(v) in (list, tuple) and v and isinstance(v[0], Tensor):
            shapes.append([list(t.shape) for t in v if t is not None])
            dtypes.append(_dtype_name(v[0].dtype))
    return shapes, dtypes


def _exception_text(exc_type, exc) -> str | None:
    if exc_type is None:
        return None
    return f"{exc_type.__name__}: {exc}"


class Recorder:
    """Observer of dispatch, allocator and sync hooks that streams events into a TraceWriter."""

    def __init__(self, path: str | os.PathLike, flush_every: int = FLUSH_EVERY):
        self.path = os.fspath(path)
        self.flush_every = max(1, flush_every)
        self.complete = False
        self.exit_error: str | None = None
        self._t0 = self._last_flush = time.perf_counter()
        self._pending: list[dict] = []
        self._lock = threading.RLock()
        self._flushing = False
        self._stacks: list[list[str]] = []
        self._stack_ids: dict[tuple, int] = {}
        self._skip: dict[str, bool] = {}
        self._live: dict[tuple[int, int], tuple[int, float, int]] = {}
        self._allocated: dict[int, int] = {}
        self._streams: set[tuple[int, int]] = set()
        self._devices = [self._device_entry(d) for d in runtime.device_records()]
        self._writer = chrome.TraceWriter(
            self.path,
            {"producer": "torch_fl", "format": chrome.FORMAT_VERSION, "pid": os.getpid(),
             "argv": list(sys.argv), "start_unix_s": time.time(), "torch": torch.__version__},
        )
        self._writer.write(self._opening_events(), self._summary())

    @staticmethod
    def _device_entry(rec) -> dict:
        return {"pid": rec.index, "label": f"ral:{rec.index} {rec.name}", "name": rec.name, "vendor": rec.vendor,
                "type": rec.type, "total_memory": rec.total_memory}

    def _opening_events(self) -> list[dict]:
        events = []
        for d in self._devices:
            events += chrome.process_metadata(d["pid"], d["label"], d["vendor"])
            used = memory.memory_stats_dict(d["pid"])["allocated_bytes.all.current"]
            self._allocated[d["pid"]] = used
            events.append(self._counter(d["pid"], 0.0, used))
        return events

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Recorder:
        """Attach to the dispatch, allocator and sync hooks."""
        dispatch.OBSERVERS.append(self._on_op)
        memory.ALLOC_OBSERVERS.append(self._on_alloc)
        transfer.SYNC_OBSERVERS.append(self._on_sync)
        return self

    def stop(self, exit_error: str | None = None) -> None:
        """Detach, write the remaining events and the final summary, and close the file."""
        for hooks, fn in ((dispatch.OBSERVERS, self._on_op), (memory.ALLOC_OBSERVERS, self._on_alloc),
                          (transfer.SYNC_OBSERVERS, self._on_sync)):
            if fn in hooks:
                hooks.remove(fn)
        self.exit_error = exit_error
        self.complete = True
        self.flush()
        self._writer.close()

    @property
    def events_written(self) -> int:
        """Events in the file so far."""
        return self._writer.count

    # -- observers -------------------------------------------------------------------------
    def _now_us(self) -> float:
        return round((time.perf_counter() - self._t0) * 1e6, 3)

    def _on_op(self, op, tier, dev, t0, t1, full):
        stream = streams_state.current(dev)
        if (dev, stream) not in self._streams:
            self._name_stream(dev, stream)
        shapes, dtypes = _describe_args(full)
        self._emit({"ph": "X", "cat": chrome.CAT_OP, "name": op, "pid": dev, "tid": stream,
                    "ts": round((t0 - self._t0) * 1e6, 3), "dur": round((t1 - t0) * 1e6, 3),
                    "args": {"tier": tier, "shapes": shapes, "dtypes": dtypes}})

    def _on_alloc(self, event, buf):
        ts = self._now_us()
        dev, n = buf.device, buf.nbytes
        args = {"ptr": hex(buf.ptr), "bytes": n}
        if event == "alloc":
            sid = args["stack"] = self._stack_id()
            self._live[(dev, buf.ptr)] = (n, ts, sid)
            used = self._allocated[dev] = self._allocated.get(dev, 0) + n
        else:
            self._live.pop((dev, buf.ptr), None)  # absent when allocated before the trace began
            used = self._allocated[dev] = self._allocated.get(dev, 0) - n
        self._emit({"ph": "i", "s": "t", "cat": chrome.CAT_ALLOC, "name": event, "pid": dev,
                    "tid": chrome.ALLOCATOR_TID, "ts": ts, "args": args})
        self._emit(self._counter(dev, ts, used))

    def _on_sync(self, dev, reason):
        stream = streams_state.current(dev)
        if (dev, stream) not in self._streams:
            self._name_stream(dev, stream)
        self._emit({"ph": "i", "s": "t", "cat": chrome.CAT_SYNC, "name": "sync", "pid": dev, "tid": stream,
                    "ts": self._now_us(), "args": {"reason": reason}})

    @staticmethod
    def _counter(dev: int, ts: float, used: int) -> dict:
        return {"ph": "C", "cat": chrome.CAT_MEMORY, "name": "allocated bytes", "pid": dev, "ts": ts,
                "args": {"allocated": used}}

    def _name_stream(self, dev: int, stream: int) -> None:
        self._streams.add((dev, stream))
        self._emit(chrome.thread_metadata(dev, stream, chrome.stream_name(stream)))

    def _emit(self, event: dict) -> None:
        pending = self._pending
        pending.append(event)
        n = len(pending)
        if n >= self.flush_every or (n & 255 == 0 and time.perf_counter() - self._last_flush > FLUSH_SECONDS):
            self.flush()

    def _stack_id(self) -> int:
        """Index into the stack table of the allocating Python stack (user frames, innermost first)."""
        f = sys._getframe(3)  # skip _stack_id, _on_alloc and memory.allocate
        skip = self._skip
        frames = []
        while f is not None:
            code = f.f_code
            fn = code.co_filename
            s = skip.get(fn)
            if s is None:
                s = skip[fn] = fn.startswith(_SKIP_PREFIXES)
            if not s:
                frames.append((fn, f.f_lineno, code.co_name))
                if len(frames) == STACK_DEPTH:
                    break
            f = f.f_back
        key = tuple(frames)
        sid = self._stack_ids.get(key)
        if sid is None:
            sid = self._stack_ids[key] = len(self._stacks)
            self._stacks.append([f"{fn}:{line} in {name}" for fn, line, name in frames])
        return sid

    # -- output ----------------------------------------------------------------------------
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
            "live": [{"device": d, "ptr": hex(p), "bytes": n, "ts": ts, "stack": sid} for (d, p), (n, ts, sid) in live],
        }

    def flush(self) -> None:
        """Append the pending events to the file; the file is valid JSON afterwards."""
        if self._flushing:  # re-entered from a Buffer freed by GC during the write
            return
        with self._lock:
            self._flushing = True
            try:
                batch, self._pending = self._pending, []
                self._writer.write(batch, self._summary())
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
