"""`ralctl coverage`: which ops run natively on a device, which fall back, and where time goes.

    ralctl coverage [--device ral:N ...] [--format table|json|markdown] -- python script.py [args]
    ralctl coverage --opinfo [--device ral:N ...] [--dtype float32 ...] [--op NAME ...]

Workload mode runs the script once per --device in a child process under
`torch_fl.ral_mode(device)` (without --device: as written, with one report per ral device the
script used), so a script that raises still gets its report and ralctl exits with the script's
own code. In a program, `with torch_fl.coverage() as cov:` then `print(cov)` gives the same.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import click

FORMATS = click.Choice(["table", "json", "markdown"])


def _child_command(device: str | None, out: str, script_argv: list[str]) -> list[str]:
    argv = list(script_argv)
    if argv and os.path.basename(argv[0]).startswith("python"):
        argv = argv[1:]  # `-- python script.py ...`: we supply the interpreter
    return [
        sys.executable,
        "-m",
        "torch_fl.tools.coverage_child",
        "--out",
        out,
        *(["--device", device] if device else []),
        "--",
        *argv,
    ]


def _coverage_of(rows: list[dict]):
    """A Coverage holding the child's rows."""
    from torch_fl.observe.coverage import Coverage

    cov = Coverage()
    for r in rows:
        cov.record(r["op"], r["tier"], r["device"], r["calls"], r["seconds"])
    return cov


def run_workload(devices: list[str], script_argv: list[str], fmt: str) -> int:
    """Run the script per device, print the report, return the script's exit code."""
    import torch  # noqa: F401  (torch first: it loads torch_fl's API before its torch-facing modules)

    from torch_fl.observe.coverage import Coverage
    from torch_fl.observe.coverage_report import workload_report

    env = dict(os.environ)
    covs, code = {}, 0
    for dev in devices or [None]:
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
            out = tmp.name
        try:
            proc = subprocess.run(_child_command(dev, out, script_argv), env=env)
            code = code or proc.returncode
            data = json.loads(open(out).read() or "{}")
        except (OSError, ValueError):
            data = {}
        finally:
            if os.path.exists(out):
                os.unlink(out)
        rows = data.get("rows", [])
        if dev:
            covs[dev] = _coverage_of(rows)
        else:  # as written: one report per device the script used
            for d in sorted({r["device"] for r in rows}):
                covs[f"ral:{d}"] = _coverage_of([r for r in rows if r["device"] == d])
            covs = covs or {"all ral devices": Coverage()}
    click.echo(workload_report(covs, fmt))
    return code


def run_opinfo(devices: list[str], dtypes: list[str], ops: list[str], max_samples: int | None, fmt: str) -> int:
    """Run the OpInfo conformance per device and print the op x dtype matrix; 1 if any fail."""
    import torch  # noqa: F401  (torch first: it loads torch_fl's API before its torch-facing modules)

    from torch_fl.observe import conformance as C
    from torch_fl.observe.coverage_report import opinfo_matrix

    db = C.load_op_db()
    pairs = C.select(db, set(ops) if ops else None, dtypes=tuple(dtypes))
    results = {dev: [C.run_case(op, dt, dev, "device", max_samples) for op, dt in pairs] for dev in devices}
    click.echo(opinfo_matrix(results, fmt))
    return 0 if all(r.passed for rs in results.values() for r in rs) else 1


def register(cli) -> None:
    """Attach the `coverage` command to the ralctl click group."""

    @cli.command("coverage", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
    @click.option("--device", "devices", multiple=True, help="ral device(s) to report on, side by side.")
    @click.option("--opinfo", is_flag=True, help="Run PyTorch's OpInfo samples instead of a script.")
    @click.option("--dtype", "dtypes", multiple=True, default=("float32",), show_default=True)
    @click.option("--op", "ops", multiple=True, help="OpInfo names to run (default: all).")
    @click.option("--max-samples", type=int, default=None, help="Samples per OpInfo entry (default: all).")
    @click.option("--format", "fmt", type=FORMATS, default="table", show_default=True)
    @click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
    @click.argument("script", nargs=-1, type=click.UNPROCESSED)
    def coverage(devices, opinfo, dtypes, ops, max_samples, fmt, as_json, script):
        """Per-op tiers, time and an "implement these next" list, for a script or OpInfo."""
        fmt = "json" if as_json else fmt
        if opinfo:
            raise SystemExit(run_opinfo(list(devices) or ["ral:0"], list(dtypes), list(ops), max_samples, fmt))
        if not script:
            raise click.UsageError("give a script after --, e.g. ralctl coverage -- python train.py")
        raise SystemExit(run_workload(list(devices), list(script), fmt))
