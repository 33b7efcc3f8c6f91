"""Read a Chrome trace file back and check that torch_fl wrote it; every failure is a TraceError."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from torch_fl.observe.chrome_trace import CAT_OP


class TraceError(Exception):
    """A file that is not a readable torch_fl trace; the message names the file and the reason."""


@dataclass
class LoadedTrace:
    """The events of a trace file and its torch_fl summary (empty for a bare event array)."""

    path: str
    events: list[dict]
    meta: dict = field(default_factory=dict)
    other: dict = field(default_factory=dict)
    skipped: int = 0  # entries of traceEvents that were not event objects


def _json_error(path: str, raw: bytes, exc: json.JSONDecodeError) -> TraceError:
    where = f"line {exc.lineno} column {exc.colno}"
    if exc.pos >= len(raw.rstrip()):
        return TraceError(
            f"{path}: the JSON ends early at {where}: the file is truncated. Was the recording process "
            "killed while writing, or the copy cut short? Record it again with `ral-trace run`."
        )
    return TraceError(f"{path}: not valid JSON: {exc.msg} at {where}")


def _kind(doc) -> str:
    if isinstance(doc, dict):
        keys = ", ".join(sorted(doc)[:5]) or "no keys"
        return f"a JSON object with {keys}"
    return f"a JSON {type(doc).__name__}"


def load_trace(path) -> LoadedTrace:
    """Parse a trace file; raises TraceError for unreadable, truncated or foreign files."""
    path = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not raw.strip():
        raise TraceError(f"{path}: the file is empty")
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError:
        raise TraceError(f"{path}: not a text file, so not a Chrome trace JSON file") from None
    except json.JSONDecodeError as exc:
        raise _json_error(path, raw, exc) from None
    if isinstance(doc, list):  # the format's bare "JSON array" form
        events, meta, other = doc, {}, {}
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, meta, other = doc["traceEvents"], doc.get("torch_fl") or {}, doc.get("otherData") or {}
    else:
        raise TraceError(
            f'{path}: not a Chrome trace: expected an object with a "traceEvents" list, found {_kind(doc)}'
        )
    good = [e for e in events if isinstance(e, dict) and isinstance(e.get("ph"), str)]
    if not isinstance(meta, dict):
        meta = {}
    if not meta and not any(e.get("cat") == CAT_OP for e in good):
        raise TraceError(
            f'{path}: a Chrome trace, but not one torch_fl wrote (no {CAT_OP} events and no "torch_fl" '
            "section); record one with `ral-trace run -- python script.py` or `with torch_fl.trace(path):`"
        )
    return LoadedTrace(path, good, meta, other if isinstance(other, dict) else {}, len(events) - len(good))
