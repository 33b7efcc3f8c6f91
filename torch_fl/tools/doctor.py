"""`ralctl doctor`: check the runtime, every plugin, the devices, the cache directories and torch,
and say how to fix each problem found.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

from torch_fl.tools import inventory
from torch_fl.tools.probe import probe_plugins

OK, WARNING, PROBLEM = "ok", "warning", "problem"
# The torch requirement when torch_fl is used from a source tree rather than installed.
FALLBACK_TORCH_REQUIREMENT = "torch>=2.10,<2.15"
SMOKE_TIMEOUT_S = 180

STATUS_FIX = {
    "MISSING_DEPS": "install the vendor runtime library named in the reason (e.g. with the system package manager), "
    "then call torch_fl.rescan() or restart; the plugin needs no rebuild",
    "ABI_MISMATCH": "rebuild the plugin against this torch_fl's include/ral_abi.h (same ABI major version), "
    "or install the plugin release built for it",
    "LOAD_FAILED": "check the library with `ldd` and the reason above; rebuild or reinstall the plugin",
    "INVALID_MANIFEST": "fix the manifest: `ralctl manifest validate {dir}/manifest.json` names the entry and field",
    "DEGRADED": "export the missing kernel symbols from the library, or remove those entries from {dir}/manifest.json "
    "(`ralctl plugin-status --deep --json` lists every disabled entry)",
    "INSECURE": "make the path named in the reason writable by its owner only (chmod go-w) and owned by root or "
    "you, or accept it explicitly with TORCH_FL_ALLOW_INSECURE_PLUGINS=<folder> (docs/reliability.md)",
    "FAILED": "the plugin answered garbage (see the reason); report it to its vendor",
    "GONE": "the plugin directory vanished: reinstall it, then call torch_fl.rescan()",
    "CRASHED": "the plugin kills any process that loads it: report it to its vendor, remove {dir}, or skip it with "
    "TORCH_FL_PLUGIN_SKIP={dir} (CPU-only scripts are not affected: plugins load at the first device use)",
}


@dataclass
class Finding:
    """One check: its subject, its outcome, what was seen and, for a problem, the fix."""

    check: str
    level: str
    detail: str
    fix: str = ""


def _plugin_findings(rows: list[inventory.PluginRow]) -> list[Finding]:
    if not rows:
        return [
            Finding(
                "plugins",
                PROBLEM,
                inventory.why_no_devices(rows),
                "build the built-in plugins (`python setup.py native`) or set TORCH_FL_PLUGIN_PATH",
            )
        ]
    out = []
    for p in rows:
        name = f"plugin {p.name}"
        if p.status == "LOADED" and not p.devices:
            out.append(
                Finding(
                    name,
                    WARNING,
                    f"LOADED {p.version} from {p.dir}, but it reports no device",
                    "check that the hardware is present and its driver is loaded",
                )
            )
        elif p.status == "LOADED":
            note = f"; note: {p.reason}" if p.reason else ""  # e.g. a dtype the device lacks
            out.append(Finding(name, OK, f"LOADED {p.version}, ABI {p.abi}, devices {p.devices}{note}"))
        else:
            fix = STATUS_FIX.get(p.status, "see the reason").format(dir=p.dir)
            out.append(Finding(name, PROBLEM, f"{p.status}: {p.reason}", fix))
    return out


def _crash_marker_findings() -> list[Finding]:
    """Processes that died while a plugin loaded (core/crash_marker.py), seen by a later run."""
    from torch_fl.core import crash_marker

    crashes = crash_marker.stale_markers()
    last = crash_marker.last_crash()
    if last and all(c["plugin_dir"] != last["plugin_dir"] for c in crashes):
        crashes.append(last)
    return [
        Finding(
            f"crash while loading {c['plugin_dir']}",
            WARNING,
            crash_marker.describe(c),
            f"`ralctl plugin-status` shows whether it still crashes; skip it with TORCH_FL_PLUGIN_SKIP={c['plugin_dir']}; "
            f"delete {crash_marker.marker_dir() / crash_marker.LAST_CRASH} once it is fixed",
        )
        for c in crashes
    ]


def _search_path_findings() -> list[Finding]:
    missing = [path for src, path, ok in inventory.search_roots() if src == "TORCH_FL_PLUGIN_PATH" and not ok]
    if missing:
        return [
            Finding(
                "plugin search path",
                WARNING,
                f"TORCH_FL_PLUGIN_PATH names missing directories: {', '.join(missing)}",
                "create them or remove them from TORCH_FL_PLUGIN_PATH",
            )
        ]
    roots = ", ".join(path for _, path, ok in inventory.search_roots() if ok)
    return [Finding("plugin search path", OK, f"searching {roots or 'no existing directory'}")]


def _torch_requirement() -> str:
    try:
        reqs = metadata.requires("torch_fl") or []
    except metadata.PackageNotFoundError:
        reqs = []
    return next(
        (r.split(";")[0].strip() for r in reqs if r.replace(" ", "").startswith("torch>")), FALLBACK_TORCH_REQUIREMENT
    )


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _torch_finding() -> Finding:
    import re

    requirement = _torch_requirement()
    low = re.search(r">=\s*([0-9][0-9.]*)", requirement)
    high = re.search(r"<\s*([0-9][0-9.]*)", requirement)
    minimum = low.group(1) if low else "0"
    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return Finding("torch", PROBLEM, "torch is not installed", f'pip install "{requirement}"')
    if _version_tuple(installed) < _version_tuple(minimum):
        return Finding(
            "torch",
            PROBLEM,
            f"torch {installed} is older than torch_fl needs ({requirement})",
            f'pip install --upgrade "{requirement}"',
        )
    t0 = time.perf_counter()
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch install shows up as anything
        return Finding(
            "torch",
            PROBLEM,
            f"torch {installed} is installed but does not import: {exc}",
            "reinstall torch (pip install --force-reinstall torch)",
        )
    ms = (time.perf_counter() - t0) * 1000
    if high and _version_tuple(installed) >= _version_tuple(high.group(1)):
        return Finding(
            "torch",
            WARNING,
            f"torch {installed} is newer than the range torch_fl was verified on ({requirement}); "
            "it may work, but nothing has checked it",
            f'run scripts/torch_versions.sh {installed.split("+")[0]} from a source checkout, or pip install "{requirement}"',
        )
    return Finding("torch", OK, f"torch {torch.__version__} ({requirement}); import took {ms:.0f} ms")


def _cache_findings() -> list[Finding]:
    from torch_fl.device.guard import cache_dir  # imports torch; called only once torch imported fine

    root = cache_dir()
    dirs = [root] + sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else [root]
    out = []
    for d in dirs:
        probe = d if d.exists() else next((p for p in d.parents if p.exists()), Path("/"))
        if os.access(probe, os.W_OK | os.X_OK):
            state = "exists" if d.exists() else "will be created"
            out.append(Finding(f"cache {d}", OK, f"writable ({state})"))
        else:
            out.append(
                Finding(
                    f"cache {d}",
                    PROBLEM,
                    f"{probe} is not writable, so build products cannot be cached",
                    f"fix its permissions (chmod u+w {probe}) or set XDG_CACHE_HOME to a writable directory",
                )
            )
    return out


SMOKE_CODE = """
import sys, torch, torch_fl
bad = []
for i in range(torch.ral.device_count()):
    got = (torch.arange(4.0, device=f"ral:{i}") * 2).cpu().tolist()
    if got != [0.0, 2.0, 4.0, 6.0]:
        bad.append(f"ral:{i} computed {got}")
print("; ".join(bad) or "ok")
sys.exit(1 if bad else 0)
"""


def _smoke_finding(n_devices: int) -> Finding:
    # In a child process: a crashing plugin must not take the doctor down with it.
    env = {k: v for k, v in os.environ.items() if k != "TORCH_FL_TRACE"}
    try:
        res = subprocess.run(
            [sys.executable, "-c", SMOKE_CODE], env=env, capture_output=True, text=True, timeout=SMOKE_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return Finding(
            "device smoke test",
            PROBLEM,
            f"`import torch_fl` and one op per device took over {SMOKE_TIMEOUT_S} s",
            "run `python -c 'import torch_fl'` by hand to see where it hangs",
        )
    from torch_fl.tools.doctor_warnings import warning_lines

    for line in warning_lines(res.stderr):  # surfaced (and explained) by run_checks
        warnings.warn(f"smoke-test child printed: {line}", stacklevel=1)
    if res.returncode == 0:
        return Finding("device smoke test", OK, f"import torch_fl and a multiply on {n_devices} device(s) worked")
    tail = (res.stderr.strip().splitlines() or [res.stdout.strip() or f"exit code {res.returncode}"])[-1]
    return Finding(
        "device smoke test",
        PROBLEM,
        f"import torch_fl or an op failed: {tail}",
        "run `python -c 'import torch, torch_fl; print(torch.ones(2, device=\"ral:0\") * 2)'` to see the traceback",
    )


def run_checks(smoke: bool = True) -> list[Finding]:
    """Every check, then one explained finding per warning raised or printed while checking."""
    from torch_fl.tools.doctor_warnings import collected, explain

    with collected() as messages:
        findings = _run_checks(smoke)
    for message in messages:
        meaning, fix = explain(message)
        findings.append(Finding("warning", WARNING, f"{message.splitlines()[0][:300]} (means: {meaning})", fix))
    return findings


def _run_checks(smoke: bool) -> list[Finding]:
    """Every check, in order; later checks are skipped when the ones they depend on failed."""
    try:
        inventory.runtime(initialise=False)  # plugins load in the probe's child process only
    except inventory.RuntimeUnavailable as exc:
        findings = [
            Finding("native runtime", PROBLEM, str(exc), "build it: `python setup.py native` or reinstall torch_fl")
        ]
        return findings + [_torch_finding()]
    from torch_fl._native import _ral

    findings = [Finding("native runtime", OK, f"loaded {_ral.__file__}")]
    findings += _search_path_findings()
    torch_ok = _torch_finding()
    try:
        plugins, devices = probe_plugins("deep" if torch_ok.level == OK else "ops")
    except inventory.RuntimeUnavailable as exc:
        return findings + [
            Finding("native runtime", PROBLEM, str(exc), "build it: `python setup.py native` or reinstall torch_fl"),
            torch_ok,
        ]
    findings += _plugin_findings(plugins)
    findings += _crash_marker_findings()
    findings.append(torch_ok)
    if torch_ok.level == OK:
        findings += _cache_findings()
        n = len(devices)
        if smoke and n:
            findings.append(_smoke_finding(n))
    return findings


def as_dicts(findings: list[Finding]) -> list[dict]:
    """JSON-ready findings."""
    return [asdict(f) for f in findings]
