"""Manifest dtype names and their ABI codes, derived from ral_plugin.h (no torch import)."""

from __future__ import annotations

from torch_fl._native import lib

# ral_plugin.h's RAL_DTYPE_<NAME> enum is the single source of truth; names are lower-cased.
CODE_OF_NAME: dict[str, int] = dict(
    sorted(
        (
            (attr[len("RAL_DTYPE_") :].lower(), getattr(lib, attr))
            for attr in dir(lib)
            if attr.startswith("RAL_DTYPE_") and attr != "RAL_DTYPE_COUNT"
        ),
        key=lambda item: item[1],
    )
)
NAMES: tuple[str, ...] = tuple(CODE_OF_NAME)
ABSENT_CODE: int = lib.RAL_DTYPE_COUNT


def names_in_mask(mask: int) -> list[str]:
    """Manifest names of the dtypes whose bits are set in a device's dtype_mask."""
    return [name for name, code in CODE_OF_NAME.items() if mask & (1 << code)]
