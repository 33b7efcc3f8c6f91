"""`with torch_fl.coverage() as cov:` — which tier ran each op, how often, for how long."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict

from torch_fl.dispatch import entry as dispatch


class Coverage:
    """Collects (op, tier) call counts and time while active. Re-entrant and thread-safe."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.seconds: defaultdict = defaultdict(float)
        self.devices: set[int] = set()
        self._lock = threading.Lock()

    def _observe(self, op, tier, dev, t0, t1, full):
        with self._lock:
            key = (op, tier)
            self.counts[key] += 1
            self.seconds[key] += t1 - t0
            self.devices.add(dev)

    def __enter__(self):
        dispatch.OBSERVERS.append(self._observe)
        return self

    def __exit__(self, *exc):
        dispatch.OBSERVERS.remove(self._observe)
        return False

    def tier_shares(self) -> dict[str, float]:
        """Fraction of op calls that ran in each tier."""
        total = sum(self.counts.values())
        shares: Counter = Counter()
        for (_, tier), n in self.counts.items():
            shares[tier] += n
        return {tier: n / total for tier, n in shares.items()} if total else {}

    def ops_in_tier(self, tier: str) -> list[str]:
        """Names of the ops that ran (at least once) in a tier."""
        return sorted({op for (op, t) in self.counts if t == tier})

    def fallbacks(self) -> list[tuple[str, str, int, float]]:
        """(op, tier, calls, seconds) of every non-vendor op, most expensive first: the to-do list."""
        rows = [(op, tier, n, self.seconds[(op, tier)]) for (op, tier), n in self.counts.items() if tier != "vendor"]
        return sorted(rows, key=lambda r: -r[3])


def coverage() -> Coverage:
    """A new coverage collector; use it as a context manager."""
    return Coverage()
