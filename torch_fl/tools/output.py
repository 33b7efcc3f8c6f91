"""Output shared by ralctl and ral-trace: JSON for scripts, rich tables for people, exit codes."""

from __future__ import annotations

import json
import os
import sys

# Exit codes of both tools (also in README.md).
OK = 0
PROBLEM = 1  # the command ran and found something wrong: no device, a bad plugin, an invalid file
USAGE = 2  # click's own code for a bad command line
NO_RUNTIME = 3  # torch_fl's native runtime could not be loaded at all
PIPE_WIDTH = 160


def print_json(obj) -> None:
    """Write one JSON document to stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")


def console(stderr: bool = False):
    """A rich Console (imported lazily: --json output never pays for rich)."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = PIPE_WIDTH  # logs and pipes read better with long reasons kept on one line
    return out


def print_table(columns: list[str], rows: list[list[str]], empty_reason: str | None = None) -> None:
    """A table with the given header (printed even when empty), then the reason it is empty."""
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: "[...]" in a reason is not markup
    out = console()
    out.print(table)
    if empty_reason:
        out.print(empty_reason, markup=False)
