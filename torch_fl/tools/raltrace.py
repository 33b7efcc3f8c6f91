"""`ral-trace`: record a program's ops, allocations and syncs on ral devices, and report on them.

ral-trace run [-o trace.json] -- python script.py [args]
ral-trace report trace.json [--html report.html]
"""

from __future__ import annotations

import os
import subprocess
import sys

import click

from torch_fl import __version__
from torch_fl.tools import output
from torch_fl.tools.output import OK, PROBLEM

EXIT_CODES = (
    "Exit codes: `run` returns the traced command's own code (1 if it succeeded but left no trace, "
    "127 if it cannot start); `report`: 0 done, 1 unreadable or foreign trace, 2 bad command line."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(__version__, prog_name="ral-trace", message="%(prog)s (torch_fl %(version)s)")
def cli():
    """Record and report torch_fl traces (Chrome trace JSON: opens in Perfetto and chrome://tracing)."""


def child_env(trace_path: str, flush_every: int | None = None) -> dict[str, str]:
    """The traced program's environment: ours plus TORCH_FL_TRACE."""
    env = dict(os.environ)
    env["TORCH_FL_TRACE"] = trace_path
    if flush_every:
        env["TORCH_FL_TRACE_FLUSH_EVERY"] = str(flush_every)
    return env


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}, epilog=EXIT_CODES)
@click.option(
    "-o",
    "--output",
    "out",
    default="trace.json",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Where to write the Chrome trace JSON.",
)
@click.option("--html", type=click.Path(dir_okay=False), help="Also write the HTML report here when the run ends.")
@click.option("--flush-every", type=int, default=None, help="Events buffered before each write (default 4096).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(out: str, html: str | None, flush_every: int | None, command: tuple[str, ...]):
    """Run COMMAND (e.g. `-- python train.py`) with tracing on; the program must import torch_fl."""
    path = os.path.abspath(out)
    if os.path.exists(path):
        os.remove(path)  # a stale file must not pass for this run's trace
    try:
        rc = subprocess.call(list(command), env=child_env(path, flush_every))
    except OSError as exc:
        click.echo(f"ral-trace: cannot run {command[0]!r}: {exc.strerror or exc}", err=True)
        raise SystemExit(127) from None
    if not os.path.exists(path):
        click.echo(
            f"ral-trace: {command[0]} exited with code {rc} and recorded nothing: the program never "
            "imported torch_fl (tracing starts at `import torch_fl`).",
            err=True,
        )
        raise SystemExit(rc or PROBLEM)
    click.echo(
        f"ral-trace: trace written to {out} (open it in https://ui.perfetto.dev or chrome://tracing; "
        f"`ral-trace report {out} --html report.html` for the report)",
        err=True,
    )
    if html:
        _report(path, html, top=20, as_json=False, quiet=True)
    raise SystemExit(rc)


def _report(trace_file: str, html: str | None, top: int, as_json: bool, quiet: bool = False) -> None:
    from torch_fl.tools.trace.analysis import summarize
    from torch_fl.tools.trace.load import TraceError, load_trace

    try:
        summary = summarize(load_trace(trace_file))
    except TraceError as exc:
        click.echo(f"ral-trace: {exc}", err=True)
        raise SystemExit(PROBLEM) from None
    if html:
        from torch_fl.tools.trace.report_html import render_html

        with open(html, "w", encoding="utf-8") as f:
            f.write(render_html(summary))
        click.echo(f"ral-trace: report written to {html}", err=True)
    if as_json:
        from torch_fl.tools.trace.report_text import summary_dict

        output.print_json(summary_dict(summary, top))
    elif not html and not quiet:
        from torch_fl.tools.trace.report_text import print_report

        print_report(summary, output.console(), top)


@cli.command(epilog=EXIT_CODES)
@click.argument("trace_file", type=click.Path(dir_okay=False))
@click.option("--html", type=click.Path(dir_okay=False), help="Write the self-contained HTML report here.")
@click.option("--top", default=20, show_default=True, help="Rows of the terminal hotspot table.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def report(trace_file: str, html: str | None, top: int, as_json: bool):
    """Summarise a trace: hotspot table in the terminal, or the full report with --html."""
    _report(trace_file, html, top, as_json)
    raise SystemExit(OK)


def main(argv=None):
    """Console-script entry point."""
    return cli.main(args=argv, prog_name="ral-trace")


if __name__ == "__main__":
    sys.exit(main())
