"""Load every plugin in a child process, so that a plugin that crashes cannot take ralctl down.

`ralctl list-devices`, `plugin-status` and `doctor` call `probe_plugins`. The child
(probe_child.py, torch-free unless deep) initialises the runtime and prints the inventory as
JSON. If a plugin kills it, the loader's marker file (core/crash_marker.py) names the plugin
that was loading: it becomes a CRASHED row with the signal and its directory, and the probe
runs again with that plugin skipped (TORCH_FL_PLUGIN_SKIP) until the rest is reported.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

from torch_fl.tools.inventory import DeviceRow, PluginRow, RuntimeUnavailable, runtime, search_roots

PROBE_TIMEOUT_S = 300
CRASHED = "CRASHED"
SKIP_ENV = "TORCH_FL_PLUGIN_SKIP"


def signal_name(returncode: int) -> str:
    """ "SIGSEGV" for a child killed by signal 11 (returncode -11)."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _crashed_row(plugin_dir: str, returncode: int) -> PluginRow:
    from torch_fl.core.errors import ManifestError
    from torch_fl.core.manifest import load_manifest

    name, version, deps = os.path.basename(plugin_dir), "?", []
    try:
        m = load_manifest(Path(plugin_dir) / "manifest.json")
        name, version, deps = m.plugin or name, m.version, list(m.dependencies)
    except (ManifestError, OSError):
        pass
    parent = os.path.dirname(plugin_dir.rstrip("/"))
    source = next((src for src, root, _ in search_roots() if os.path.realpath(root) == os.path.realpath(parent)), "?")
    reason = (
        f"{signal_name(returncode)} while loading (library constructor, init() or device_count()) {plugin_dir}; "
        f"skip it with {SKIP_ENV}={plugin_dir}"
    )
    return PluginRow(name, version, "?", CRASHED, deps, reason, [], source, plugin_dir)


def _run_child(deep: bool, skip: list[str], marker_dir: str) -> subprocess.CompletedProcess:
    from torch_fl.core.runtime import builtin_plugin_dir

    env = {k: v for k, v in os.environ.items() if k != "TORCH_FL_TRACE"}
    if skip:
        env[SKIP_ENV] = ":".join([*filter(None, env.get(SKIP_ENV, "").split(":")), *skip])
    args = [sys.executable, "-c", "from torch_fl.tools.probe_child import main; main()"]
    # The parent's builtin folder and package (the child must see what this process would).
    args += [builtin_plugin_dir(), marker_dir, "deep" if deep else "shallow"]
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    try:
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        loading = _marker(marker_dir)
        where = f" while loading the plugin at {loading}" if loading else ""
        raise RuntimeUnavailable(f"probing the plugins took over {PROBE_TIMEOUT_S} s{where}") from None


def _marker(marker_dir: str) -> str | None:
    for path in Path(marker_dir).glob("*.marker"):
        text = path.read_text().strip()
        path.unlink()
        if text:
            return text
    return None


def probe_plugins(deep: bool = False) -> tuple[list[PluginRow], list[DeviceRow]]:
    """(plugins, devices) found by a child process; a plugin that killed it is CRASHED.
    deep: also check every manifest op name against the installed torch (in the child)."""
    from torch_fl.tools.doctor_warnings import warning_lines

    runtime(initialise=False)  # a runtime that cannot even import: RuntimeUnavailable, no child

    crashed: list[PluginRow] = []
    with tempfile.TemporaryDirectory(prefix="torch_fl-probe-") as marker_dir:
        while True:
            res = _run_child(deep, [r.dir for r in crashed], marker_dir)
            if res.returncode >= 0:
                break
            loading = _marker(marker_dir)
            if loading is None or any(r.dir == loading for r in crashed):
                tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeUnavailable(
                    f"the plugin probe process died with {signal_name(res.returncode)} outside any plugin's "
                    f"loading: {tail}"
                )
            crashed.append(_crashed_row(loading, res.returncode))
    for line in warning_lines(res.stderr):
        warnings.warn(f"plugin probe printed: {line}", stacklevel=2)
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        raise RuntimeUnavailable(f"the native runtime failed to start: {tail}")
    doc = json.loads(res.stdout)
    plugins = [PluginRow(**p) for p in doc["plugins"]] + crashed
    devices = [DeviceRow(**d) for d in doc["devices"]]
    return plugins, devices
