"""`ral-trace report trace.json`: the hotspot tables and a one-paragraph summary in the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from torch_fl.tools.trace.analysis import HotRow, Summary
from torch_fl.tools.units import fmt_bytes, fmt_share, fmt_us


def _hot_table(title: str, rows: list[HotRow], first: str, with_tier: bool) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column(first)
    if with_tier:
        table.add_column("TIER")
    for col in ("CALLS", "TOTAL", "MEAN", "SHARE"):
        table.add_column(col, justify="right")
    for r in rows:
        cells = [r.name] + ([r.tier] if with_tier else [])
        table.add_row(*cells, str(r.calls), fmt_us(r.total_us), fmt_us(r.mean_us), fmt_share(r.share))
    return table


def print_report(summary: Summary, console: Console, top: int = 20) -> None:
    """Print the summary line, hotspots by op (top N) and by tier, and the fallback total."""
    s = summary
    state = "complete" if s.complete else "INCOMPLETE (the process did not finish recording)"
    console.print(
        f"[bold]{s.path}[/]: {len(s.ops)} ops over {fmt_us(s.span_us)}, {fmt_us(s.op_time_us)} in ops; {state}"
    )
    if s.exit_error:
        console.print(f"[red]the traced code raised[/] {s.exit_error}")
    for d in s.devices:
        console.print(f"  {d.label} ({d.vendor or 'unknown vendor'}): peak {fmt_bytes(d.peak_bytes)}, {d.syncs} syncs")
    shown = s.by_op[:top]
    more = f" (top {top} of {len(s.by_op)})" if len(s.by_op) > top else ""
    console.print(_hot_table(f"Hotspots by op{more}", shown, "OP", True))
    console.print(_hot_table("Time by tier", s.by_tier, "TIER", False))
    if s.fallbacks:
        share = s.fallback_us / s.op_time_us if s.op_time_us else 0.0
        names = ", ".join(r.name for r in s.fallbacks[:5])
        console.print(
            f"Fallbacks (tier cpu): {len(s.fallbacks)} ops, {fmt_us(s.fallback_us)} = {fmt_share(share)} of op time: {names}"
        )
    if s.leaks:
        console.print(
            f"Alive at end: {sum(g.count for g in s.leaks)} buffers, {fmt_bytes(s.leak_bytes)} "
            "(see --html for their stacks)"
        )


def _row_dict(r: HotRow) -> dict:
    return {
        "name": r.name,
        "tier": r.tier,
        "calls": r.calls,
        "total_us": round(r.total_us, 3),
        "mean_us": round(r.mean_us, 3),
        "share": round(r.share, 6),
    }


def summary_dict(s: Summary, top: int) -> dict:
    """The summary as JSON-ready data (`ral-trace report --json`)."""
    return {
        "path": s.path,
        "complete": s.complete,
        "exit_error": s.exit_error,
        "ops": len(s.ops),
        "span_us": round(s.span_us, 3),
        "op_time_us": round(s.op_time_us, 3),
        "devices": [
            {"pid": d.pid, "label": d.label, "vendor": d.vendor, "peak_bytes": d.peak_bytes, "syncs": d.syncs}
            for d in s.devices
        ],
        "by_op": [_row_dict(r) for r in s.by_op[:top]],
        "by_tier": [_row_dict(r) for r in s.by_tier],
        "fallbacks": [_row_dict(r) for r in s.fallbacks],
        "leaks": [{"device": g.device, "buffers": g.count, "bytes": g.bytes, "stack": g.stack} for g in s.leaks],
    }
