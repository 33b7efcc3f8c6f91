"""torch.cuda-shaped views of a ral device's MemoryPool: nested stats, summary, snapshot."""

from __future__ import annotations

from torch_fl.device.memory import memory_stats_dict


def nested(stats: dict) -> dict:
    """A flat "a.b.c" stats dict as nested dicts (torch.cuda.memory_stats_as_nested_dict)."""
    out: dict = {}
    for key, value in stats.items():
        node = out
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def summary(device: int, name: str) -> str:
    """A human-readable table of the pool's figures (torch.cuda.memory_summary)."""
    s = memory_stats_dict(device)
    rows = [
        ("Allocated memory", _size(s["allocated_bytes.all.current"]), _size(s["allocated_bytes.all.peak"])),
        ("Reserved memory", _size(s["reserved_bytes.all.current"]), _size(s["reserved_bytes.all.peak"])),
        ("Live blocks", str(s["allocation.all.current"]), ""),
        ("Cached blocks", str(s["cached_blocks"]), ""),
        ("Allocations (total)", str(s["allocation.all.allocated"]), ""),
        ("Frees (total)", str(s["allocation.all.freed"]), ""),
        ("Cache hits (total)", str(s["cache_hits"]), ""),
        ("Plugin mallocs / frees", f"{s['plugin_mallocs']} / {s['plugin_frees']}", ""),
        ("Out-of-memory errors", str(s["num_ooms"]), ""),
        ("Pool limit", _size(s["limit_bytes"]) if s["limit_bytes"] else "none", ""),
    ]
    width = 75
    lines = ["=" * width, f" ral memory summary, device ral:{device} ({name})".ljust(width), "-" * width]
    lines.append(f" {'Metric':<30}| {'Current':>20} | {'Peak':>18}")
    lines.append("-" * width)
    lines += [f" {m:<30}| {c:>20} | {p:>18}" for m, c, p in rows]
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


def snapshot(devices) -> list[dict]:
    """One segment per device with the pool's totals (torch.cuda.memory_snapshot's shape): the
    runtime's pool keeps counters, not a list of blocks, so `blocks` is empty."""
    out = []
    for d in devices:
        s = memory_stats_dict(d)
        out.append(
            {
                "device": d,
                "address": 0,
                "total_size": s["reserved_bytes.all.current"],
                "allocated_size": s["allocated_bytes.all.current"],
                "active_size": s["allocated_bytes.all.current"],
                "requested_size": s["allocated_bytes.all.current"],
                "stream": 0,
                "segment_type": "pool",
                "blocks": [],
            }
        )
    return out
