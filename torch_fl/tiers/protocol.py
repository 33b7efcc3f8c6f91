"""What every tier offers the router: a builder that plans a run for one call, or declines.

A builder is `build(sch, args, kwargs, full, dev) -> Run`: `sch` is the op's OpSchema, `full`
its arguments in schema order, `dev` the ral device index. It raises `Declined` (with the
reason, which coverage tools show) when the tier cannot serve the call. The router alone
decides what to try next; a builder never calls another tier.
"""

from __future__ import annotations

from typing import Protocol


class Declined(Exception):
    """This tier cannot serve the call; the message says why."""


class Run(Protocol):
    """A planned call, cached by the router per (op, signature) and run on every such call."""

    tier: str

    def run(self, args, kwargs, full):
        """Execute the op; returns what the aten op returns."""
