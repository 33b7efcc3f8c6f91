"""Where the plugin SDK headers (ral_plugin.h, ral_plugin_sdk.h, ...) of this installation
live, for building a plugin outside the source tree. No torch import: `ralctl sdk` uses it."""

from __future__ import annotations

from pathlib import Path

_INCLUDE = Path(__file__).resolve().parent.parent / "_native" / "include"


def get_include() -> str:
    """The folder holding ral_plugin.h of this torch_fl (wheel or source checkout)."""
    if not (_INCLUDE / "ral_plugin.h").is_file():
        raise FileNotFoundError(f"ral_plugin.h is missing from {_INCLUDE}: a broken torch_fl installation")
    return str(_INCLUDE)
