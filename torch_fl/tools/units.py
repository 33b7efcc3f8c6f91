"""Human-readable figures shared by ralctl and the trace reports."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    """1536 -> '1.50 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_us(us: float) -> str:
    """Microseconds in the unit that reads best: '850.0 µs', '12.35 ms', '3.210 s'."""
    if us < 1000:
        return f"{us:.1f} µs"
    if us < 1_000_000:
        return f"{us / 1000:.2f} ms"
    return f"{us / 1e6:.3f} s"


def fmt_share(share: float) -> str:
    """0.4567 -> '45.7%'."""
    return f"{share * 100:.1f}%"
