"""Run a function right after a module is imported (or now, if it already is).

FSDP2 and the functional collectives are heavy imports (DTensor and more, seconds on a busy
machine); torch_fl adapts them only when the user's program imports them.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, after):
        self._inner = inner
        self._after = after

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._after()

    def __getattr__(self, name):  # get_source etc. for tracebacks
        return getattr(self._inner, name)


class _Hook(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, after):
        self.name = name
        self.after = after

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # one shot; also keeps the lookup below from finding us
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader, self.after)
        return spec


def when_imported(name: str, after) -> None:
    """Call `after()` once module `name` has been imported (at once if it already is)."""
    if name in sys.modules:
        after()
    else:
        sys.meta_path.insert(0, _Hook(name, after))
