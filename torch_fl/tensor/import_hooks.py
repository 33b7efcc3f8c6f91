"""Run a function right after a module is imported (or now, if it already is).

torch_fl adapts some optional modules (safetensors.torch; torch._dynamo for ral_mode under
torch.compile) only once a program imports them, so importing torch_fl pays for neither.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

# module name -> functions to call once it has been imported
_PENDING: dict[str, list] = {}


class _Loader(importlib.abc.Loader):
    """The module's own loader, then the functions waiting for it."""

    def __init__(self, inner, name: str):
        self._inner = inner
        self._name = name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _run(self._name)

    def __getattr__(self, name):  # get_source etc. for tracebacks
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of a module someone waits for, the first time it is imported."""

    def find_spec(self, fullname, path, target=None):
        # (never leaves sys.meta_path changed: importlib is iterating over that list now)
        _run_finished()
        if fullname not in _PENDING:
            return None
        sys.meta_path.remove(self)  # find the real spec without finding ourselves
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _Loader(spec.loader, fullname)
        return spec


_FINDER = _Finder()


def _initializing(module) -> bool:
    """Whether a module in sys.modules is still executing its body (importlib's own flag)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _call(name: str, after) -> None:
    """Run one adaptation; its failure is a warning, never a failed import of `name`.

    These run inside someone else's `import` statement (autoload makes that any program
    with torch_fl installed), so an exception here would break a module that works
    without torch_fl."""
    try:
        after()
    except Exception as e:  # noqa: BLE001 (any failure must stay out of the user's import)
        what = getattr(after, "__qualname__", repr(after))
        warnings.warn(
            f"torch_fl: adapting {name} ({what}) failed: {type(e).__name__}: {e}; "
            f"{name} is imported and works as without torch_fl, minus that adaptation",
            RuntimeWarning,
            stacklevel=2,
        )


def _run(name: str) -> None:
    """Run every adaptation waiting for module `name`, each on its own."""
    for after in _PENDING.pop(name, ()):
        _call(name, after)


def _run_finished() -> None:
    """Run what waits for modules that were mid-import when asked for and are done now."""
    for name in [n for n, m in ((n, sys.modules.get(n)) for n in _PENDING) if m is not None and not _initializing(m)]:
        _run(name)


def when_imported(name: str, after) -> None:
    """Call `after()` once module `name` has been imported (at once if it already is).

    A module still executing its body (`from safetensors.torch import load_file` before
    `import torch`: safetensors.torch imports torch, whose backend autoload imports torch_fl)
    is waited for: `after()` runs at the first import after its body has finished."""
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        _call(name, after)
        return
    _PENDING.setdefault(name, []).append(after)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
