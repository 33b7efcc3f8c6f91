"""Chrome trace JSON (the format Perfetto and chrome://tracing load): event builders and a writer
that keeps the file valid JSON after every flush, so a crashed process still leaves a readable trace.
"""

from __future__ import annotations

import json
import os

# Categories of the events torch_fl writes; `load` uses them to recognise its own traces.
CAT_OP = "ral.op"
CAT_ALLOC = "ral.alloc"
CAT_SYNC = "ral.sync"
CAT_MEMORY = "ral.memory"
# Allocation/free instants and memory counters live on their own track of each device.
ALLOCATOR_TID = 1_000_000
FORMAT_VERSION = 1

dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


# The hot event kinds are formatted directly: same JSON as json.dumps, a fraction of the cost.
# String arguments arrive already JSON-quoted.
def op_event(name: str, tier: str, pid: int, tid: int, ts: float, dur: float, args: str) -> str:
    """A complete ("X") event for one op; args is the inside of an object (shapes, dtypes)."""
    return (
        f'{{"ph":"X","cat":"{CAT_OP}","name":{name},"pid":{pid},"tid":{tid},"ts":{ts:.3f},"dur":{dur:.3f},'
        f'"args":{{"tier":{tier},{args}}}}}'
    )


def alloc_event(kind: str, pid: int, ptr: int, nbytes: int, ts: float, stack: int | None) -> str:
    """An instant ("i") event for an allocation or a free on the device's allocator track."""
    extra = f',"stack":{stack}' if stack is not None else ""
    return (
        f'{{"ph":"i","s":"t","cat":"{CAT_ALLOC}","name":"{kind}","pid":{pid},"tid":{ALLOCATOR_TID},'
        f'"ts":{ts:.3f},"args":{{"ptr":"{ptr:#x}","bytes":{nbytes}{extra}}}}}'
    )


def counter_event(pid: int, ts: float, allocated: int) -> str:
    """A counter ("C") event: bytes allocated on the device."""
    return f'{{"ph":"C","cat":"{CAT_MEMORY}","name":"allocated bytes","pid":{pid},"ts":{ts:.3f},"args":{{"allocated":{allocated}}}}}'


def sync_event(pid: int, tid: int, ts: float, reason: str) -> str:
    """An instant ("i") event for a synchronization on a stream."""
    return f'{{"ph":"i","s":"t","cat":"{CAT_SYNC}","name":"sync","pid":{pid},"tid":{tid},"ts":{ts:.3f},"args":{{"reason":{reason}}}}}'


def process_metadata(pid: int, label: str, vendor: str) -> list[dict]:
    """The "M" events that name a device's track ("ral:0 <device name>") and order it."""
    return [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
        {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": vendor}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}},
        thread_metadata(pid, ALLOCATOR_TID, "allocator"),
    ]


def thread_metadata(pid: int, tid: int, name: str) -> dict:
    """The "M" event that names a stream's track."""
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def stream_name(stream: int) -> str:
    """Display name of a runtime stream id."""
    return "default stream" if stream == 0 else f"stream {stream}"


class TraceWriter:
    """Appends events to a Chrome trace file; after each `flush` the file is complete JSON.

    Layout: a header, one event per line inside "traceEvents", then the "torch_fl" summary
    (devices, stacks, live buffers). Each flush seeks back over the summary, appends the new
    events and writes the summary again, so readers never see a half-finished document
    unless the process dies in the middle of a write.
    """

    def __init__(self, path: str, other_data: dict):
        self.path = os.fspath(path)
        self._f = open(self.path, "wb")  # noqa: SIM115 - lives as long as the recording
        header = {"displayTimeUnit": "ms", "otherData": other_data}
        self._f.write(dumps(header)[:-1].encode() + b',"traceEvents":[\n')
        self._end = self._f.tell()
        self._count = 0

    @property
    def count(self) -> int:
        """Events written so far."""
        return self._count

    def write(self, events: list[str], summary: dict) -> None:
        """Append events (each one JSON object text) and rewrite the trailing summary."""
        f = self._f
        f.seek(self._end)
        if events:
            sep = ",\n" if self._count else ""
            f.write((sep + ",\n".join(events)).encode())
            self._count += len(events)
            self._end = f.tell()
        f.write(b'\n],"torch_fl":' + dumps(summary).encode() + b"}\n")
        f.truncate()
        f.flush()

    def close(self) -> None:
        """Close the file (the last `write` already left it complete)."""
        self._f.close()
