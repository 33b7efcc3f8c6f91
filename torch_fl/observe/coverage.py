"""`with torch_fl.coverage() as cov:` — which tier ran each op, how often, for how long, per device.

with torch_fl.coverage() as cov:
    model(x)
print(cov)            # tier shares and the top fallbacks by time, per device
cov.to_dict()         # the same for tools: {"devices": {"ral:0": {...}}, ...}
"""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict

from torch_fl.dispatch import entry as dispatch

TOP = 10  # fallbacks listed per device by summary()


class Coverage:
    """Collects (op, tier) call counts and time, overall and per device, while active.

    Re-entrant and thread-safe. `counts` and `seconds` are keyed by (op, tier) over every
    device; `per_device` holds the same two maps for each device index.
    """

    def __init__(self):
        self.counts: Counter = Counter()
        self.seconds: defaultdict = defaultdict(float)
        self.devices: set[int] = set()
        self.per_device: dict[int, tuple[Counter, defaultdict]] = {}
        self._lock = threading.Lock()

    def _observe(self, op, tier, dev, t0, t1, full):
        with self._lock:
            key = (op, tier)
            self.counts[key] += 1
            self.seconds[key] += t1 - t0
            self.devices.add(dev)
            counts, seconds = self.per_device.setdefault(dev, (Counter(), defaultdict(float)))
            counts[key] += 1
            seconds[key] += t1 - t0

    def __enter__(self):
        dispatch.OBSERVERS.append(self._observe)
        return self

    def __exit__(self, *exc):
        dispatch.OBSERVERS.remove(self._observe)
        return False

    def record(self, op: str, tier: str, device: int, calls: int, seconds: float) -> None:
        """Add `calls` calls of `op` in `tier` on ral:`device` taking `seconds` (for tools that merge runs)."""
        with self._lock:
            key = (op, tier)
            self.counts[key] += calls
            self.seconds[key] += seconds
            self.devices.add(device)
            counts, secs = self.per_device.setdefault(device, (Counter(), defaultdict(float)))
            counts[key] += calls
            secs[key] += seconds

    def _maps(self, device: int | None) -> tuple[Counter, defaultdict]:
        if device is None:
            return self.counts, self.seconds
        return self.per_device.get(device, (Counter(), defaultdict(float)))

    def tier_shares(self, device: int | None = None) -> dict[str, float]:
        """Fraction of op calls that ran in each tier (on one device index, or on all)."""
        counts = self._maps(device)[0]
        total = sum(counts.values())
        shares: Counter = Counter()
        for (_, tier), n in counts.items():
            shares[tier] += n
        return {tier: n / total for tier, n in shares.items()} if total else {}

    def ops_in_tier(self, tier: str, device: int | None = None) -> list[str]:
        """Names of the ops that ran (at least once) in a tier."""
        return sorted({op for (op, t) in self._maps(device)[0] if t == tier})

    def fallbacks(self, device: int | None = None) -> list[tuple[str, str, int, float]]:
        """(op, tier, calls, seconds) of every non-vendor op, most expensive first: the to-do list."""
        counts, seconds = self._maps(device)
        rows = [(op, tier, n, seconds[(op, tier)]) for (op, tier), n in counts.items() if tier != "vendor"]
        return sorted(rows, key=lambda r: (-r[3], -r[2], r[0]))

    def rows(self, device: int | None = None) -> list[dict]:
        """One dict per (op, tier): calls, seconds and share of the observed op time, slowest first."""
        counts, seconds = self._maps(device)
        total = sum(seconds.values())
        ops = [
            {
                "op": op,
                "tier": tier,
                "calls": n,
                "seconds": seconds[(op, tier)],
                "share": seconds[(op, tier)] / total if total else 0.0,
            }
            for (op, tier), n in counts.items()
        ]
        return sorted(ops, key=lambda r: (-r["seconds"], -r["calls"], r["op"]))

    def to_dict(self) -> dict:
        """Plain data for tools: per device ("ral:N") its calls, time, tier shares, ops and fallbacks."""
        devices = {}
        for dev in sorted(self.per_device):
            counts, seconds = self.per_device[dev]
            ops = self.rows(dev)
            devices[f"ral:{dev}"] = {
                "calls": sum(counts.values()),
                "seconds": sum(seconds.values()),
                "tier_shares": self.tier_shares(dev),
                "ops": ops,
                "fallbacks": [r for r in ops if r["tier"] != "vendor"],
            }
        return {"calls": sum(self.counts.values()), "devices": devices}

    def to_json(self, indent: int | None = 2) -> str:
        """`to_dict()` as a JSON string."""
        return json.dumps(self.to_dict(), indent=indent)

    def summary(self, top: int = TOP) -> str:
        """Readable report: per device, the tier shares of calls and the `top` fallbacks by time."""
        data = self.to_dict()
        if not data["devices"]:
            return "torch_fl coverage: no op ran on a ral device"
        lines = [f"torch_fl coverage: {data['calls']} op calls on {', '.join(data['devices'])}"]
        for name, d in data["devices"].items():
            shares = sorted(d["tier_shares"].items(), key=lambda kv: (-kv[1], kv[0]))
            lines.append(
                f"{name}: {d['calls']} calls in {d['seconds'] * 1e3:.1f} ms; calls by tier: "
                + ", ".join(f"{tier} {share * 100:.1f}%" for tier, share in shares)
            )
            falls = d["fallbacks"]
            if not falls:
                lines.append("  every op ran in the vendor tier")
                continue
            lines.append(f"  top fallbacks by time ({min(top, len(falls))} of {len(falls)}):")
            for r in falls[:top]:
                lines.append(
                    f"    {r['op']:<44} {r['tier']:<6} {r['calls']:>6} calls {r['seconds'] * 1e3:>9.2f} ms"
                    f" {r['share'] * 100:>5.1f}%"
                )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def __repr__(self) -> str:
        shares = ", ".join(f"{t} {s * 100:.0f}%" for t, s in sorted(self.tier_shares().items(), key=lambda kv: -kv[1]))
        devs = ", ".join(f"ral:{d}" for d in sorted(self.devices)) or "no device"
        return f"<Coverage {sum(self.counts.values())} calls on {devs}: {shares or 'nothing ran'}>"


def coverage() -> Coverage:
    """A new coverage collector; use it as a context manager, then print it."""
    return Coverage()
