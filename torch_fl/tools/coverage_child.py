"""Child process of `ralctl coverage`: run a script under coverage and write the rows as JSON,
even when the script raises or calls sys.exit."""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import traceback


def main() -> int:
    """Run the script, write coverage rows to --out, and return the script's exit code."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device")
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    ns = ap.parse_args()
    argv = ns.argv[1:] if ns.argv[:1] == ["--"] else ns.argv
    import contextlib

    import torch_fl

    cov = torch_fl.coverage()
    code = 0
    sys.argv = argv
    try:
        with cov, torch_fl.ral_mode(ns.device) if ns.device else contextlib.nullcontext():
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        rows = [
            {"op": op, "tier": tier, "device": dev, "calls": n, "seconds": seconds[(op, tier)]}
            for dev, (counts, seconds) in cov.per_device.items()
            for (op, tier), n in counts.items()
        ]
        with open(ns.out, "w") as f:
            json.dump({"rows": rows, "exit_code": code}, f)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
