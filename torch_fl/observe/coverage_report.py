"""Render coverage results: a user's workload (ops, tiers, time, to-do list) and the OpInfo
op x dtype matrix, as a terminal table, JSON or Markdown."""

from __future__ import annotations

import json
from collections import defaultdict


def workload_rows(cov) -> list[dict]:
    """One row per (op, tier) of a Coverage over all its devices: calls, seconds and share of time."""
    return cov.rows()


def todo_rows(cov) -> list[dict]:
    """The vendor's to-do list: ops that did not run natively, by share of time."""
    return [r for r in workload_rows(cov) if r["tier"] != "vendor"]


def workload_report(covs: dict, fmt: str = "table") -> str:
    """Report one or more devices' workload coverage ({device label: Coverage})."""
    data = {
        dev: {"ops": workload_rows(c), "implement_next": todo_rows(c), "tier_shares": c.tier_shares()}
        for dev, c in covs.items()
    }
    if fmt == "json":
        return json.dumps(data, indent=2)
    lines = []
    for dev, d in data.items():
        shares = ", ".join(f"{t} {s * 100:.1f}%" for t, s in sorted(d["tier_shares"].items(), key=lambda kv: -kv[1]))
        title = f"{dev}: calls by tier: {shares or 'no ral ops ran'}"
        if fmt == "markdown":
            lines += [f"### {title}", "", "| op | tier | calls | time (ms) | share |", "|---|---|---:|---:|---:|"]
            lines += [
                f"| `{r['op']}` | {r['tier']} | {r['calls']} | {r['seconds'] * 1e3:.2f} | {r['share'] * 100:.1f}% |"
                for r in d["ops"]
            ]
            lines += ["", "**Implement next** (ops that left the device, by share of time):", ""]
            lines += [
                f"{i}. `{r['op']}` ({r['tier']}, {r['share'] * 100:.1f}% of time, {r['calls']} calls)"
                for i, r in enumerate(d["implement_next"], 1)
            ] or ["(nothing: every op ran in the vendor tier)"]
            lines.append("")
        else:
            lines.append(title)
            lines.append(f"  {'op':<44} {'tier':<7} {'calls':>7} {'ms':>9} {'share':>7}")
            for r in d["ops"]:
                lines.append(
                    f"  {r['op']:<44} {r['tier']:<7} {r['calls']:>7} {r['seconds'] * 1e3:>9.2f} {r['share'] * 100:>6.1f}%"
                )
            lines.append(
                "  implement next: "
                + (
                    ", ".join(f"{r['op']} ({r['share'] * 100:.1f}%)" for r in d["implement_next"])
                    or "nothing, every op ran in the vendor tier"
                )
            )
            lines.append("")
    return "\n".join(lines)


def _dominant_tier(tiers: dict) -> str:
    return max(tiers.items(), key=lambda kv: kv[1])[0] if tiers else "-"


def opinfo_matrix(results: dict, fmt: str = "table") -> str:
    """Render OpInfo results ({device: [CaseResult]}) as an op x dtype matrix per device."""
    if fmt == "json":
        return json.dumps({dev: [vars(r) for r in rs] for dev, rs in results.items()}, indent=2, default=str)
    lines = []
    for dev, rs in results.items():
        dtypes = sorted({r.dtype for r in rs})
        cells: dict = defaultdict(dict)
        for r in rs:
            cells[r.op][r.dtype] = f"{'pass' if r.passed else 'FAIL'}/{_dominant_tier(r.tiers)}"
        summary = []
        for dt in dtypes:
            sel = [r for r in rs if r.dtype == dt]
            summary.append(
                f"{dt} {sum(r.passed for r in sel)}/{len(sel)} ({100 * sum(r.passed for r in sel) / max(len(sel), 1):.1f}%)"
            )
        if fmt == "markdown":
            lines += [
                f"### {dev}: " + "; ".join(summary),
                "",
                "| op | " + " | ".join(dtypes) + " |",
                "|---|" + "---|" * len(dtypes),
            ]
            lines += [
                f"| `{op}` | " + " | ".join(c.get(dt, "") for dt in dtypes) + " |" for op, c in sorted(cells.items())
            ]
            lines.append("")
        else:
            lines.append(f"{dev}: " + "; ".join(summary))
            lines.append(f"  {'op':<40} " + " ".join(f"{dt:<16}" for dt in dtypes))
            for op, c in sorted(cells.items()):
                lines.append(f"  {op:<40} " + " ".join(f"{c.get(dt, ''):<16}" for dt in dtypes))
            fails = [r for r in rs if not r.passed]
            if fails:
                lines.append("  failures:")
                lines += [f"    {r.op} [{r.dtype}]: {r.error}" for r in fails]
            lines.append("")
    return "\n".join(lines)
