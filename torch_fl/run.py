"""Run an unmodified Python script on a ral device: `python -m torch_fl.run [--device ral:0] script.py [args...]`.

The script runs exactly as `python script.py args...` would (runpy.run_path semantics):
`__name__ == "__main__"`, `__file__` is the path given (made absolute), `sys.argv` is `[script, *args]`,
`sys.path[0]` is the script's folder (symlinks resolved, as CPython does), and the exit code is
the script's (`sys.exit(n)`, 1 on an uncaught exception) — only inside `ral_mode(device)`.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

import torch_fl


def _script_path_entry(script: str) -> str:
    """What `python script` puts first on sys.path: the script's folder, or a directory or
    zip archive with a __main__.py itself."""
    if os.path.isdir(script) or (not script.endswith(".py") and _is_zip(script)):
        return script
    return os.path.dirname(os.path.realpath(script))


def _is_zip(path: str) -> bool:
    import zipfile

    return zipfile.is_zipfile(path)


def main(argv=None) -> int:
    """Execute a script as __main__ inside ral_mode; returns (or raises SystemExit with) its exit code."""
    ap = argparse.ArgumentParser(prog="python -m torch_fl.run", description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="ral:0", help="ral device to run on (default ral:0)")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    if not os.path.exists(ns.script):
        # CPython's own message and status for a missing script
        print(
            f"{sys.executable}: can't open file {os.path.abspath(ns.script)!r}: [Errno 2] No such file or directory",
            file=sys.stderr,
        )
        return 2
    sys.argv = [ns.script, *ns.args]
    entry = _script_path_entry(ns.script)
    # `python -m torch_fl.run` put the working directory first; `python script.py` puts the
    # script's folder there instead (a directory or zip is inserted by run_path itself).
    if entry != ns.script:
        if sys.path and sys.path[0] in ("", os.getcwd()):
            sys.path[0] = entry
        else:
            sys.path.insert(0, entry)
    with torch_fl.ral_mode(ns.device):
        if entry == ns.script:  # a directory or zip archive with a __main__.py
            runpy.run_path(ns.script, run_name="__main__")
        else:
            _run_file(ns.script)
    return 0


def _run_file(script: str) -> None:
    """Execute a source file as CPython's `python script.py` does: a fresh `__main__` module
    (in sys.modules, so pickle and multiprocessing find the script's classes), `__file__`
    absolute but not normalised (`../x.py` from /a/b gives /a/b/../x.py), sys.argv[0] as given."""
    import io
    import types

    path = script if os.path.isabs(script) else os.path.join(os.getcwd(), script)
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=path, __cached__=None, __spec__=None, __builtins__=__builtins__)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


if __name__ == "__main__":
    raise SystemExit(main())
