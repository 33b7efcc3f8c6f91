"""Run a function right after a module is imported (or now, if it already is).

torch_fl adapts some optional modules (safetensors.torch; torch._dynamo for ral_mode under
torch.compile) only once a program imports them, so importing torch_fl pays for neither.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

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
        for after in _PENDING.pop(self._name, ()):
            after()

    def __getattr__(self, name):  # get_source etc. for tracebacks
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the loader of a module someone waits for, the first time it is imported."""

    def find_spec(self, fullname, path, target=None):
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


def _run_finished() -> None:
    """Run what waits for modules that were mid-import when asked for and are done now."""
    for name in [n for n, m in ((n, sys.modules.get(n)) for n in _PENDING) if m is not None and not _initializing(m)]:
        for after in _PENDING.pop(name, ()):
            after()


def when_imported(name: str, after) -> None:
    """Call `after()` once module `name` has been imported (at once if it already is).

    A module still executing its body (`from safetensors.torch import load_file` before
    `import torch`: safetensors.torch imports torch, whose backend autoload imports torch_fl)
    is waited for: `after()` runs at the first import after its body has finished."""
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        after()
        return
    _PENDING.setdefault(name, []).append(after)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
