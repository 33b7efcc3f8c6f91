"""`ral-trace report --html`: one self-contained HTML file (inline CSS, JS and data; no network)."""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from torch_fl.tools.trace.analysis import Device, HotRow, LeakGroup, OpSpan, Summary
from torch_fl.tools.units import fmt_bytes, fmt_share, fmt_us

_ASSETS = Path(__file__).with_name("assets")
TIER_COLOURS = {"vendor": "#2e9e5b", "decomp": "#3b7dd8", "jit": "#8e5bd6", "cpu": "#d9534f"}
OTHER_TIER_COLOUR = "#8a8a8a"
# Device tracks are coloured by vendor, in order of first appearance.
VENDOR_PALETTE = ("#f0b429", "#4fb0c6", "#c678dd", "#98c379", "#e5a07b", "#61afef")
MAX_LEAK_GROUPS = 100
MEMORY_CHART_POINTS = 1500  # per device; peaks are kept when a series is thinned


def _tier_colour(tier: str) -> str:
    return TIER_COLOURS.get(tier, OTHER_TIER_COLOUR)


def vendor_colours(devices: list[Device]) -> dict[str, str]:
    """A distinct colour per vendor."""
    out: dict[str, str] = {}
    for d in devices:
        out.setdefault(d.vendor, VENDOR_PALETTE[len(out) % len(VENDOR_PALETTE)])
    return out


def _share_cell(share: float) -> str:
    return (
        f'<td class="num share" data-v="{share:.6f}"><span class="bar" style="width:{share * 100:.1f}%"></span>'
        f'<span class="pct">{fmt_share(share)}</span></td>'
    )


def _hot_table(rows: list[HotRow], with_tier: bool, table_id: str) -> str:
    head = "<th>Op</th><th>Tier</th>" if with_tier else "<th>Tier</th>"
    head += '<th class="num">Calls</th><th class="num">Total</th><th class="num">Mean</th><th class="num">Share</th>'
    body = []
    for r in rows:
        tier = f'<td><span class="tier" style="background:{_tier_colour(r.tier)}"></span>{escape(r.tier)}</td>'
        first = f'<td class="op">{escape(r.name)}</td>{tier}' if with_tier else tier
        body.append(
            f'<tr>{first}<td class="num" data-v="{r.calls}">{r.calls}</td>'
            f'<td class="num" data-v="{r.total_us:.3f}">{fmt_us(r.total_us)}</td>'
            f'<td class="num" data-v="{r.mean_us:.3f}">{fmt_us(r.mean_us)}</td>{_share_cell(r.share)}</tr>'
        )
    return (
        f'<table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _thin(points: list[tuple[float, int]], t0: float, span: float) -> list[tuple[float, int]]:
    # One column per pixel-ish bucket keeps the highest and the last value, so peaks survive.
    if len(points) <= MEMORY_CHART_POINTS or span <= 0:
        return points
    buckets: dict[int, list[tuple[float, int]]] = {}
    for p in points:
        buckets.setdefault(int((p[0] - t0) / span * (MEMORY_CHART_POINTS / 2)), []).append(p)
    out = []
    for _, pts in sorted(buckets.items()):
        top = max(pts, key=lambda p: p[1])
        out += sorted({top, pts[-1]})
    return out


def _memory_chart(dev: Device, t0: float, span: float, colour: str) -> str:
    w, h, pad = 900, 150, 4
    peak = max(dev.peak_bytes, 1)
    span = span or 1.0

    def x(ts):
        return pad + max(ts - t0, 0.0) / span * (w - 2 * pad)

    def y(v):
        return h - pad - v / peak * (h - 2 * pad - 14)

    pts = _thin(dev.memory, t0, span)
    if pts:
        path = [f"M{x(pts[0][0]):.1f},{h - pad} V{y(pts[0][1]):.1f}"]
        path += [f"H{x(ts):.1f} V{y(v):.1f}" for ts, v in pts[1:]]
        path.append(f"H{x(t0 + span):.1f} V{h - pad} Z")
        shape = f'<path d="{" ".join(path)}" fill="{colour}" fill-opacity="0.35" stroke="{colour}" stroke-width="1.2"/>'
    else:
        shape = f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle">no allocations recorded</text>'
    final = dev.memory[-1][1] if dev.memory else 0
    return (
        f'<figure class="memory" data-device="{dev.pid}"><figcaption>{escape(dev.label)}: peak '
        f"<b>{fmt_bytes(dev.peak_bytes)}</b>, at end {fmt_bytes(final)}</figcaption>"
        f'<svg viewBox="0 0 {w} {h}" preserveAspectRatio="none" role="img" aria-label="memory of {escape(dev.label)}">'
        f'<line x1="{pad}" y1="{y(peak):.1f}" x2="{w - pad}" y2="{y(peak):.1f}" class="peak"/>'
        f'<text x="{w - pad}" y="{y(peak) - 3:.1f}" text-anchor="end" class="axis">{fmt_bytes(dev.peak_bytes)}</text>'
        f"{shape}</svg>"
        f'<div class="axis-row"><span>{fmt_us(0)}</span><span>{fmt_us(span)}</span></div></figure>'
    )


def _short_path(frame: str) -> str:
    # Installed packages read better without the interpreter's prefix.
    head, sep, tail = frame.partition("site-packages/")
    return "…/" + tail if sep else frame


def _leak_rows(leaks: list[LeakGroup], t0: float) -> str:
    rows = []
    for g in leaks[:MAX_LEAK_GROUPS]:
        stack = "\n".join(escape(_short_path(f)) for f in g.stack) or "(no Python frames outside torch and torch_fl)"
        rows.append(
            f'<tr><td>ral:{g.device}</td><td class="num" data-v="{g.count}">{g.count}</td>'
            f'<td class="num" data-v="{g.bytes}">{fmt_bytes(g.bytes)}</td>'
            f'<td class="num" data-v="{g.first_ts - t0:.3f}">{fmt_us(g.first_ts - t0)}</td>'
            f'<td><pre class="stack">{stack}</pre></td></tr>'
        )
    more = len(leaks) - MAX_LEAK_GROUPS
    tail = f'<p class="note">… and {more} more allocation sites.</p>' if more > 0 else ""
    return (
        '<table id="leaks" class="sortable"><thead><tr><th>Device</th><th class="num">Buffers</th>'
        '<th class="num">Size</th><th class="num">First allocated at</th><th>Allocating stack (innermost first)</th>'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table>{tail}"
    )


def _depths(ops: list[OpSpan]) -> list[int]:
    # Nesting depth of each op on its stream (a decomposed op encloses the ops it runs).
    open_ends: dict[tuple[int, int], list[float]] = {}
    out = []
    for o in ops:
        stack = open_ends.setdefault((o.pid, o.tid), [])
        while stack and stack[-1] <= o.ts:
            stack.pop()
        out.append(len(stack))
        stack.append(o.ts + o.dur)
    return out


def _timeline_data(s: Summary, colours: dict[str, str]) -> dict:
    names: dict[str, int] = {}
    shapes: dict[str, int] = {}
    tiers: dict[str, int] = {}
    lane_of = {d.pid: i for i, d in enumerate(s.devices)}
    ops = []
    for o, depth in zip(s.ops, _depths(s.ops)):
        ops.append(
            [
                lane_of[o.pid],
                o.tid,
                round(o.ts - s.start_us, 3),
                o.dur,
                names.setdefault(o.name, len(names)),
                tiers.setdefault(o.tier, len(tiers)),
                shapes.setdefault(o.shapes, len(shapes)),
                depth,
            ]
        )
    return {
        "span": s.span_us,
        "names": list(names),
        "shapes": list(shapes),
        "tiers": [{"name": t, "colour": _tier_colour(t)} for t in tiers],
        "lanes": [
            {
                "label": d.label,
                "vendor": d.vendor,
                "colour": colours[d.vendor],
                "streams": d.streams or [0],
                "syncs": [round(t - s.start_us, 3) for t in d.sync_ts],
            }
            for d in s.devices
        ],
        "ops": ops,
    }


def _script_json(obj) -> str:
    # Inside <script>, "</" would end the element early.
    return json.dumps(obj, separators=(",", ":")).replace("</", "<\\/")


def _overview(s: Summary) -> str:
    share = s.fallback_us / s.op_time_us if s.op_time_us else 0.0
    items = [
        ("Ops", f"{len(s.ops)}"),
        ("Recorded span", fmt_us(s.span_us)),
        ("Time in ops", fmt_us(s.op_time_us)),
        ("Fallback share", fmt_share(share)),
        ("Alive at end", f"{sum(g.count for g in s.leaks)} buffers, {fmt_bytes(s.leak_bytes)}"),
        ("Devices", ", ".join(d.label for d in s.devices) or "none"),
    ]
    cells = "".join(f'<div class="stat"><span>{k}</span><b>{escape(v)}</b></div>' for k, v in items)
    warn = ""
    if not s.complete:
        warn += '<p class="warn">This trace is incomplete: the recording process did not finish (it crashed or was killed). It shows what ran up to the last flush.</p>'
    if s.exit_error:
        warn += f'<p class="warn">The traced code raised <code>{escape(s.exit_error)}</code>.</p>'
    return f'<section id="overview"><div class="stats">{cells}</div>{warn}</section>'


def _legend(s: Summary, colours: dict[str, str]) -> str:
    tiers = "".join(
        f'<span class="key"><span class="tier" style="background:{_tier_colour(r.name)}"></span>{escape(r.name)}</span>'
        for r in s.by_tier
    )
    vendors = "".join(
        f'<span class="key"><span class="tier" style="background:{c}"></span>{escape(v or "unknown")}</span>'
        for v, c in colours.items()
    )
    return f'<div class="legend">Tiers: {tiers} &nbsp; Vendors: {vendors} &nbsp; <i>wheel: zoom, drag: pan, double-click: reset</i></div>'


def _fallbacks(s: Summary) -> str:
    if not s.fallbacks:
        return '<p id="no-fallbacks">No op left the device.</p>'
    share = s.fallback_us / s.op_time_us if s.op_time_us else 0.0
    return (
        f"<p>{len(s.fallbacks)} ops ran on PyTorch's CPU kernels, with data copied off the device and back: "
        f"<b>{fmt_us(s.fallback_us)}</b>, {fmt_share(share)} of op time.</p>"
        + _hot_table(s.fallbacks, True, "fallback-table")
    )


def render_html(s: Summary) -> str:
    """The whole report page."""
    colours = vendor_colours(s.devices)
    css = (_ASSETS / "report.css").read_text()
    js = (_ASSETS / "report.js").read_text()
    memory = "".join(_memory_chart(d, s.start_us, s.span_us, colours[d.vendor]) for d in s.devices)
    leaks = (
        _leak_rows(s.leaks, s.start_us)
        if s.leaks
        else '<p id="no-leaks">Every buffer allocated during the trace was freed.</p>'
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ral-trace report: {escape(Path(s.path).name)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>{css}</style></head>
<body>
<header><h1>ral-trace report</h1><p class="src">{escape(s.path)}</p></header>
<div id="errors" hidden><b>Report script errors</b><ul></ul></div>
{_overview(s)}
<section id="timeline-section"><h2>Timeline</h2>{_legend(s, colours)}
<div id="timeline-box"><canvas id="timeline"></canvas><div id="tooltip" hidden></div></div></section>
<section id="hotspots"><h2>Hotspots by op</h2>{_hot_table(s.by_op, True, "hot-ops")}
<h2>Time by tier</h2>{_hot_table(s.by_tier, False, "hot-tiers")}</section>
<section id="memory"><h2>Memory over time</h2>{memory or "<p>No device recorded.</p>"}</section>
<section id="leaks-section"><h2>Buffers alive at the end</h2>{leaks}</section>
<section id="fallbacks"><h2>Fallbacks: ops that left the device</h2>{_fallbacks(s)}</section>
<footer>Written by <code>ral-trace report</code>. The trace file itself opens in Perfetto or chrome://tracing.</footer>
<script type="application/json" id="trace-data">{_script_json(_timeline_data(s, colours))}</script>
<script>{js}</script>
</body></html>
"""
