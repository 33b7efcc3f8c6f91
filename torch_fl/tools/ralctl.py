"""`ralctl`: list ral devices and plugins, validate manifests, and diagnose an installation.

Light by design: no torch import except `doctor` and `plugin-status --deep`.
"""

from __future__ import annotations

import click

from torch_fl import __version__
from torch_fl.tools import coverage_cmd, inventory, output
from torch_fl.tools.certify import SECTIONS
from torch_fl.tools.output import NO_RUNTIME, OK, PROBLEM
from torch_fl.tools.probe import probe_plugins
from torch_fl.tools.units import fmt_bytes

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of a table.")
EXIT_CODES = "Exit codes: 0 all good; 1 a problem was found; 2 bad command line; 3 the native runtime cannot load."


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EXIT_CODES)
@click.version_option(__version__, prog_name="ralctl", message="%(prog)s (torch_fl %(version)s)")
def cli():
    """Inspect torch_fl: devices, plugins and manifests, and diagnose problems."""


def _runtime_failure(exc: inventory.RuntimeUnavailable, as_json: bool, key: str) -> None:
    if as_json:
        output.print_json({key: [], "reason": str(exc)})
    else:
        click.echo(f"ralctl: {exc}", err=True)
    raise SystemExit(NO_RUNTIME)


@cli.command("list-devices", epilog=EXIT_CODES)
@json_option
def list_devices(as_json: bool):
    """Table of ID, TYPE, NAME, VENDOR, MEMORY and STATUS of every ral device (exit 1 if none)."""
    try:
        plugins, devices = probe_plugins()  # plugins load in a child process
    except inventory.RuntimeUnavailable as exc:
        _runtime_failure(exc, as_json, "devices")
    reason = None if devices else inventory.why_no_devices(plugins)
    if as_json:
        output.print_json({"devices": [d.as_dict() for d in devices], "reason": reason})
    else:
        rows = [
            [
                d.id,
                d.type,
                d.name,
                d.vendor,
                fmt_bytes(d.memory) if d.memory else "unknown",
                d.status + (f" ({d.reason})" if d.reason else ""),
            ]
            for d in devices
        ]
        output.print_table(["ID", "TYPE", "NAME", "VENDOR", "MEMORY", "STATUS"], rows, reason)
    raise SystemExit(OK if devices else PROBLEM)


@cli.command("plugin-status", epilog=EXIT_CODES)
@json_option
@click.option(
    "--deep", is_flag=True, help="Also check every manifest op name against the installed torch (imports torch)."
)
def plugin_status(as_json: bool, deep: bool):
    """Table of PLUGIN, VERSION, ABI, STATUS, DEPENDENCIES and REASON (exit 1 unless all LOADED)."""
    try:
        plugins, _ = probe_plugins(deep)  # plugins load in a child process: a crash is CRASHED
    except inventory.RuntimeUnavailable as exc:
        _runtime_failure(exc, as_json, "plugins")
    reason = None if plugins else inventory.why_no_devices(plugins)
    if as_json:
        output.print_json(
            {
                "plugins": [p.as_dict() for p in plugins],
                "reason": reason,
                "search_path": [{"source": s, "dir": d, "exists": e} for s, d, e in inventory.search_roots()],
            }
        )
    else:
        rows = [
            [p.name, p.version, p.abi, p.status, ", ".join(p.dependencies) or "-", p.reason or "-"] for p in plugins
        ]
        output.print_table(["PLUGIN", "VERSION", "ABI", "STATUS", "DEPENDENCIES", "REASON"], rows, reason)
    healthy = plugins and all(p.status == "LOADED" for p in plugins)
    raise SystemExit(OK if healthy else PROBLEM)


@cli.group()
def manifest():
    """Kernel manifest tools."""


@manifest.command("validate", epilog=EXIT_CODES)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@json_option
def manifest_validate(file: str, as_json: bool):
    """Validate a manifest.json against the schema; errors name the entry and field (exit 1 if invalid)."""
    from torch_fl.core.errors import ManifestError
    from torch_fl.core.manifest import load_manifest

    try:
        m = load_manifest(file)
    except ManifestError as exc:
        if as_json:
            output.print_json({"file": file, "valid": False, "error": str(exc)})
        else:
            click.echo(f"INVALID {exc}", err=True)
        raise SystemExit(PROBLEM) from None
    if as_json:
        output.print_json(
            {
                "file": file,
                "valid": True,
                "error": None,
                "plugin": m.plugin,
                "version": m.version,
                "entries": len(m.entries),
                "ops": sorted({e.op for e in m.entries}),
            }
        )
    else:
        click.echo(
            f"OK {file}: plugin {m.plugin} {m.version}, {len(m.entries)} kernel entries "
            f"for {len({e.op for e in m.entries})} ops"
        )
    raise SystemExit(OK)


_MARKS = {"ok": "[green]✔[/]", "warning": "[yellow]![/]", "problem": "[red]✘[/]"}


@cli.command(epilog=EXIT_CODES)
@json_option
@click.option("--no-smoke", is_flag=True, help="Skip the child-process test that runs one op on every device.")
def doctor(as_json: bool, no_smoke: bool):
    """Check the runtime, every plugin, the cache directories and torch; print the fix for each problem."""
    from torch_fl.tools.doctor import PROBLEM as LEVEL_PROBLEM
    from torch_fl.tools.doctor import as_dicts, run_checks

    findings = run_checks(smoke=not no_smoke)
    problems = [f for f in findings if f.level == LEVEL_PROBLEM]
    if as_json:
        output.print_json({"ok": not problems, "checks": as_dicts(findings)})
    else:
        from rich.markup import escape

        out = output.console()
        for f in findings:
            out.print(f"{_MARKS[f.level]} [bold]{escape(f.check)}[/]: {escape(f.detail)}")
            if f.fix:
                out.print(f"    fix: {f.fix}", markup=False)
        warnings = sum(f.level == "warning" for f in findings)
        out.print(f"{len(problems)} problem(s), {warnings} warning(s)")
    raise SystemExit(PROBLEM if problems else OK)


@cli.command(epilog="Exit codes: 0 certified; 1 not certified; 2 bad command line.")
@click.argument("plugin_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", default="ral-certificate", show_default=True, help="Folder for certificate.md/.json.")
@click.option("--samples", default=4, show_default=True, help="Samples per OpInfo op; below 3, one rank per entry.")
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS), help="Run only these (iterating).")
def certify(plugin_dir: str, out_dir: str, samples: int, sections: tuple):
    """Run the conformance programme against a plugin directory and write its certificate."""
    from .certify import CERTIFIED
    from .certify import certify as run_certify

    try:
        cert = run_certify(plugin_dir, out_dir, samples, sections or SECTIONS)
    except FileNotFoundError as exc:
        raise click.BadParameter(str(exc)) from None
    s = cert["summary"]
    for r in s["sections"]:
        click.echo(f"{r['title']}: {r['passed']}/{r['run']} passed ({r['skipped']} not exercised)")
    click.echo(f"vendor-tier share {s['vendor_share']:.1%}; {len(s['failures'])} failure(s); certificate in {out_dir}/")
    click.echo(s["verdict"])
    raise SystemExit(OK if s["verdict"] == CERTIFIED else PROBLEM)


coverage_cmd.register(cli)


def main(argv=None):
    """Console-script entry point."""
    return cli.main(args=argv, prog_name="ralctl")


if __name__ == "__main__":
    main()
