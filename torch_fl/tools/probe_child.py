"""The child process of probe.py: load every plugin, print plugins and devices as JSON.

argv: builtin plugin folder, marker folder (crash markers of this probe only, so a probe
that crashes leaves nothing in the user's cache), and the mode of probe.probe_plugins.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    """Print {"plugins": [...], "devices": [...]} for the runtime as this process sees it."""
    builtin, marker_dir, mode = sys.argv[1:4]
    from pathlib import Path

    from torch_fl.core import crash_marker, runtime
    from torch_fl.core.discovery import child_op_checker

    runtime.builtin_plugin_dir = lambda: builtin
    crash_marker.marker_dir = lambda: Path(marker_dir)
    from torch_fl.tools import inventory

    if mode == "deep":
        check_op = inventory.op_checker()
    elif mode == "ops":
        check_op = child_op_checker([(src, root) for src, root, _ in inventory.search_roots()])
    else:
        check_op = None
    plugins = inventory.plugin_rows(check_op)
    devices = inventory.device_rows(plugins)
    json.dump({"plugins": [p.as_dict() for p in plugins], "devices": [d.as_dict() for d in devices]}, sys.stdout)


if __name__ == "__main__":
    main()
