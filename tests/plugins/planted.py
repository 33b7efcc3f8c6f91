"""Build planted.c with one kernel bug (or none) into a plugin directory for certify tests."""

from __future__ import annotations

import json
from pathlib import Path

from plugins.build import HERE, _compile

# bug -> (a kernel certify must name when it fails the plugin, words of the failing check).
BUGS = {
    "ROUND_CAST": ("planted_copy", "float32 -> int64 cast values"),
    "IGNORE_STRIDES": ("planted_add_f32", "strided"),
    "IGNORE_OFFSET": ("planted_add_f32", "offset"),
    "IGNORE_ALPHA": ("planted_add_f32", "alpha/beta"),
    "RANK1_BIAS": ("planted_addmm_f32", "rank 1"),
}


def _entry(op, kernel, dtypes, lo, hi, broadcast=False):
    return {
        "op": op,
        "kernel": kernel,
        "dtypes": dtypes,
        "min_rank": lo,
        "max_rank": hi,
        "requires_contiguous": False,
        "broadcast": broadcast,
    }


KERNELS = [
    _entry("aten::add.Tensor", "planted_add_f32", ["float32"], 0, 4),
    _entry("aten::copy_", "planted_copy", ["float32", "int64"], 0, 4),
    _entry("aten::addmm", "planted_addmm_f32", ["float32"], 0, 2, broadcast=True),
]


def build_planted_plugin(dest_root: Path, bug: str | None) -> Path:
    """dest_root/planted_<bug>/ holding libplanted_<bug>.so (built with -DBUG_<bug>) and its manifest."""
    name = f"planted_{(bug or 'none').lower()}"
    plugin_dir = Path(dest_root) / name
    plugin_dir.mkdir(parents=True, exist_ok=True)
    library = plugin_dir / f"lib{name}.so"
    _compile(HERE / "planted.c", library, name, [f"-DBUG_{bug}"] * bool(bug) + ["-lm"])
    manifest = {"schema_version": 1, "plugin": name, "version": "1.0.0", "library": library.name}
    manifest |= {"dependencies": [], "kernels": KERNELS}
    (plugin_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return plugin_dir
