"""Run an unmodified Python script on a ral device: `python -m torch_fl.run [--device ral:0] script.py [args...]`."""

from __future__ import annotations

import argparse
import runpy
import sys

import torch_fl


def main(argv=None) -> int:
    """Execute a script as __main__ inside ral_mode."""
    ap = argparse.ArgumentParser(prog="python -m torch_fl.run", description=__doc__)
    ap.add_argument("--device", default="ral:0")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    sys.argv = [ns.script, *ns.args]
    with torch_fl.ral_mode(ns.device):
        runpy.run_path(ns.script, run_name="__main__")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
