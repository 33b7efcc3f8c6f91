"""Summaries of a loaded trace: hotspots by op and by tier, fallbacks, memory over time, leaks."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from torch_fl.observe.chrome_trace import CAT_ALLOC, CAT_MEMORY, CAT_OP, CAT_SYNC
from torch_fl.tools.trace.load import LoadedTrace

# The tier whose ops left the device: PyTorch's CPU kernel with data copied off and back.
FALLBACK_TIER = "cpu"


@dataclass
class HotRow:
    """Calls and time of one op (in one tier), or of one whole tier."""

    name: str
    tier: str
    calls: int = 0
    total_us: float = 0.0
    share: float = 0.0  # of all op time in the trace

    @property
    def mean_us(self) -> float:
        return self.total_us / self.calls if self.calls else 0.0


@dataclass
class Device:
    """One device track of the trace."""

    pid: int
    label: str
    vendor: str = ""
    peak_bytes: int = 0
    sync_ts: list[float] = field(default_factory=list)
    memory: list[tuple[float, int]] = field(default_factory=list)  # (ts µs, allocated bytes)
    streams: list[int] = field(default_factory=list)

    @property
    def syncs(self) -> int:
        return len(self.sync_ts)


@dataclass
class LeakGroup:
    """Buffers still alive at the end of the trace that share a device and an allocating stack."""

    device: int
    count: int
    bytes: int
    first_ts: float
    stack: list[str]


@dataclass
class OpSpan:
    """One op on the timeline."""

    pid: int
    tid: int
    ts: float
    dur: float
    name: str
    tier: str
    shapes: str


@dataclass
class Summary:
    """Everything the terminal and HTML reports show."""

    path: str
    complete: bool
    exit_error: str | None
    start_us: float
    span_us: float
    op_time_us: float
    devices: list[Device]
    by_op: list[HotRow]
    by_tier: list[HotRow]
    fallbacks: list[HotRow]
    leaks: list[LeakGroup]
    ops: list[OpSpan]

    @property
    def leak_bytes(self) -> int:
        return sum(g.bytes for g in self.leaks)

    @property
    def fallback_us(self) -> float:
        return sum(r.total_us for r in self.fallbacks)


def _shapes_text(args: dict) -> str:
    shapes, dtypes = args.get("shapes") or [], args.get("dtypes") or []
    return ", ".join(f"{dt}{list(s)}" for s, dt in zip(shapes, dtypes))


def _devices(trace: LoadedTrace) -> dict[int, Device]:
    devices: dict[int, Device] = {}
    for d in trace.meta.get("devices") or []:
        devices[d["pid"]] = Device(d["pid"], d.get("label", f"ral:{d['pid']}"), d.get("vendor", ""))
    for e in trace.events:
        if e["ph"] != "M" or "pid" not in e:
            continue
        dev = _device(devices, e["pid"])
        args = e.get("args") or {}
        if e.get("name") == "process_name":
            dev.label = str(args.get("name", dev.label))
        elif e.get("name") == "process_labels" and not dev.vendor:
            dev.vendor = str(args.get("labels", ""))
    return devices


def _rank(rows, total_us: float) -> list[HotRow]:
    for r in rows:
        r.share = r.total_us / total_us if total_us else 0.0
    return sorted(rows, key=lambda r: (-r.total_us, r.name))


def _leaks_from_events(trace: LoadedTrace) -> list[dict]:
    # A bare event array has no "live" table: replay allocs and frees instead.
    live: dict[tuple, dict] = {}
    for e in trace.events:
        if e.get("cat") != CAT_ALLOC:
            continue
        args = e.get("args") or {}
        key = (e["pid"], args.get("ptr"))
        if e.get("name") == "alloc":
            live[key] = {
                "device": e["pid"],
                "bytes": args.get("bytes", 0),
                "ts": e.get("ts", 0),
                "stack": args.get("stack"),
            }
        else:
            live.pop(key, None)
    return list(live.values())


def _leak_groups(trace: LoadedTrace) -> list[LeakGroup]:
    stacks = trace.meta.get("stacks") or []
    live = trace.meta.get("live")
    groups: dict[tuple, LeakGroup] = {}
    for b in live if live is not None else _leaks_from_events(trace):
        sid = b.get("stack")
        stack = stacks[sid] if isinstance(sid, int) and 0 <= sid < len(stacks) else []
        key = (b.get("device", 0), sid)
        g = groups.get(key)
        if g is None:
            groups[key] = LeakGroup(b.get("device", 0), 1, b.get("bytes", 0), b.get("ts", 0.0), list(stack))
        else:
            g.count += 1
            g.bytes += b.get("bytes", 0)
            g.first_ts = min(g.first_ts, b.get("ts", 0.0))
    return sorted(groups.values(), key=lambda g: (-g.bytes, g.device, g.first_ts))


def _memory_series(counters: list[tuple[float, int]], deltas: list[tuple[float, int]]) -> list[tuple[float, int]]:
    """Bytes allocated over time: the first counter replayed through every alloc and free.

    The recorder coalesces counters to one per op, so the alloc/free events give the exact
    curve (peaks inside an op included); counters alone are the fallback.
    """
    counters.sort()
    if not deltas:
        return counters
    deltas.sort()
    t, used = counters[0] if counters else (deltas[0][0], 0)
    series = [(t, used)]
    for ts, d in deltas:
        used += d
        series.append((ts, used))
    return series


def _device(devices: dict[int, Device], pid: int) -> Device:
    dev = devices.get(pid)
    if dev is None:
        dev = devices[pid] = Device(pid, f"ral:{pid}")
    return dev


def summarize(trace: LoadedTrace) -> Summary:
    """Compute the report's tables and series from a loaded trace."""
    devices = _devices(trace)
    by_op: dict[tuple[str, str], HotRow] = {}
    by_tier: dict[str, HotRow] = {}
    ops: list[OpSpan] = []
    streams: dict[int, set[int]] = defaultdict(set)
    counters: dict[int, list[tuple[float, int]]] = defaultdict(list)
    deltas: dict[int, list[tuple[float, int]]] = defaultdict(list)
    t_min, t_max = float("inf"), 0.0
    for e in trace.events:
        if e["ph"] == "M":
            continue
        cat = e.get("cat")
        ts = float(e.get("ts", 0.0))
        pid = e.get("pid", 0)
        if cat != CAT_MEMORY:  # the opening counters mark when recording began, not activity
            t_min, t_max = min(t_min, ts), max(t_max, ts)
        if cat == CAT_OP and e["ph"] == "X":
            dur = float(e.get("dur", 0.0))
            args = e.get("args") or {}
            tier = str(args.get("tier", "?"))
            name = str(e.get("name", "?"))
            for row in (
                by_op.setdefault((name, tier), HotRow(name, tier)),
                by_tier.setdefault(tier, HotRow(tier, tier)),
            ):
                row.calls += 1
                row.total_us += dur
            ops.append(OpSpan(pid, e.get("tid", 0), ts, dur, name, tier, _shapes_text(args)))
            streams[pid].add(e.get("tid", 0))
            _device(devices, pid)
            t_max = max(t_max, ts + dur)
        elif cat == CAT_MEMORY and e["ph"] == "C":
            counters[pid].append((ts, int((e.get("args") or {}).get("allocated", 0))))
        elif cat == CAT_ALLOC:
            n = int((e.get("args") or {}).get("bytes", 0))
            deltas[pid].append((ts, n if e.get("name") == "alloc" else -n))
        elif cat == CAT_SYNC:
            _device(devices, pid).sync_ts.append(ts)
    for pid in counters.keys() | deltas.keys():
        dev = _device(devices, pid)
        dev.memory = _memory_series(counters.get(pid, []), deltas.get(pid, []))
        dev.peak_bytes = max((v for _, v in dev.memory), default=0)
    for pid, dev in devices.items():
        dev.sync_ts.sort()
        dev.streams = sorted(streams.get(pid, ()))
    op_time = sum(r.total_us for r in by_tier.values())
    hot = _rank(by_op.values(), op_time)
    ops.sort(key=lambda o: o.ts)
    return Summary(
        path=trace.path,
        complete=bool(trace.meta.get("complete", False)),
        exit_error=trace.meta.get("exit_error"),
        start_us=t_min if t_max >= t_min else 0.0,
        span_us=max(t_max - t_min, 0.0),
        op_time_us=op_time,
        devices=[devices[p] for p in sorted(devices)],
        by_op=hot,
        by_tier=_rank(by_tier.values(), op_time),
        fallbacks=[r for r in hot if r.tier == FALLBACK_TIER],
        leaks=_leak_groups(trace),
        ops=ops,
    )
