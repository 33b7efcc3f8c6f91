"""Which plugin killed a process while it loaded: per-process marker files under the XDG cache.

The native loader (_native/init_marker.c) writes the directory of the plugin it is loading
into this process's marker file and removes the file when that plugin is done, so a marker
whose process is dead names the plugin that crashed it. The next initialisation in any
process warns about it once and keeps it as `last-crash.json`, which `ralctl doctor` reports.
Torch-free; costs one directory listing per process start-up of the runtime.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

LAST_CRASH = "last-crash.json"


def marker_dir() -> Path:
    """Where the markers live: $XDG_CACHE_HOME/torch_fl/init (~/.cache when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "torch_fl" / "init"


def _start_time(pid: int) -> str | None:
    """The kernel's start time of a live process (tells a reused pid apart), None if dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[19]


def _marker_name(pid: int) -> str:
    return f"{pid}-{_start_time(pid) or 0}.marker"


def stale_markers() -> list[dict]:
    """Markers left by processes that died while a plugin loaded: pid, plugin dir, when."""
    out = []
    try:
        entries = list(marker_dir().glob("*.marker"))
    except OSError:
        return out
    for path in entries:
        pid_text, _, start = path.stem.partition("-")
        if not pid_text.isdigit():
            continue
        alive = _start_time(int(pid_text))
        if alive is not None and (alive == start or start == "0"):
            continue  # that process is still running (perhaps loading right now)
        try:
            plugin_dir = path.read_text().strip()
            when = path.stat().st_mtime
        except OSError:
            continue
        out.append({"pid": int(pid_text), "plugin_dir": plugin_dir, "time": when, "marker": str(path)})
    return out


def describe(crash: dict) -> str:
    """One sentence naming the plugin a dead process was loading."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(crash["time"]))
    return (
        f"a process (pid {crash['pid']}, {stamp}) died while loading the ral plugin at {crash['plugin_dir']} "
        "(in its library constructor, init() or device_count())"
    )


def last_crash() -> dict | None:
    """The last crash recorded by a later run, if any."""
    try:
        return json.loads((marker_dir() / LAST_CRASH).read_text())
    except (OSError, ValueError):
        return None


def clear_last_crash() -> None:
    """Forget the recorded crash (after the plugin was fixed)."""
    (marker_dir() / LAST_CRASH).unlink(missing_ok=True)


def before_init(lib) -> None:
    """Report markers of crashed processes, then give the loader this process's marker path."""
    for crash in stale_markers():
        warnings.warn(
            f"torch_fl: {describe(crash)}. If it crashes again, skip it with "
            f"TORCH_FL_PLUGIN_SKIP={crash['plugin_dir']}; `ralctl doctor` probes it in a child process.",
            RuntimeWarning,
            stacklevel=4,
        )
        try:
            (marker_dir() / LAST_CRASH).write_text(json.dumps({k: crash[k] for k in ("pid", "plugin_dir", "time")}))
            os.unlink(crash["marker"])
        except OSError:
            pass  # another process took it first, or the cache is read-only
    path = marker_dir() / _marker_name(os.getpid())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return  # an unwritable cache: no marker, the crash message on stderr still names the plugin
    lib.rt_set_init_marker(os.fsencode(path))
