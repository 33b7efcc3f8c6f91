"""The child process of probe.py: load every plugin, print plugins and devices as JSON.

argv: builtin plugin folder, marker folder (crash markers of this probe only, so a probe
that crashes leaves nothing in the user's cache), "deep" or "shallow".
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    """Print {"plugins": [...], "devices": [...]} for the runtime as this process sees it."""
    builtin, marker_dir, mode = sys.argv[1:4]
    from pathlib import Path

    from torch_fl.core import crash_marker, runtime

    runtime.builtin_plugin_dir = lambda: builtin
    crash_marker.marker_dir = lambda: Path(marker_dir)
    from torch_fl.tools import inventory

    check_op = inventory.op_checker() if mode == "deep" else None
    plugins = inventory.plugin_rows(check_op)
    devices = inventory.device_rows(plugins)
    json.dump({"plugins": [p.as_dict() for p in plugins], "devices": [d.as_dict() for d in devices]}, sys.stdout)


if __name__ == "__main__":
    main()
