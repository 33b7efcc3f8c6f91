"""Kernel manifests: load, validate against manifests/schema.json, and expose typed entries.

No torch import: `ralctl manifest validate` uses this module directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from torch_fl.core.dtype_names import CODE_OF_NAME
from torch_fl.core.errors import ManifestError

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_PACKAGE_SCHEMA = _PACKAGE_ROOT / "_plugins" / "schema.json"
_REPO_SCHEMA = _PACKAGE_ROOT.parent / "manifests" / "schema.json"


def schema_path() -> Path:
    """Where the manifest JSON schema lives (installed copy first, then the source tree)."""
    return _PACKAGE_SCHEMA if _PACKAGE_SCHEMA.exists() else _REPO_SCHEMA


@lru_cache(maxsize=1)
def _validator():
    import jsonschema

    schema = json.loads(schema_path().read_text())
    return jsonschema.Draft202012Validator(schema)


@dataclass(frozen=True)
class KernelEntry:
    """One manifest row: an aten overload the plugin implements, and its constraints."""

    op: str
    kernel: str
    dtype_codes: frozenset[int]
    min_rank: int
    max_rank: int
    requires_contiguous: bool
    broadcast: bool = False
    max_numel: int | None = None
    priority: int = 0


@dataclass
class Manifest:
    """A validated manifest file."""

    path: Path
    plugin: str
    version: str
    library: str | None
    dependencies: list[str]
    entries: list[KernelEntry] = field(default_factory=list)


def _where(path: Path, doc: dict, error_path) -> str:
    parts = list(error_path)
    if len(parts) >= 2 and parts[0] == "kernels" and isinstance(parts[1], int):
        kernels = doc.get("kernels") or []
        entry = kernels[parts[1]] if parts[1] < len(kernels) else {}
        op = entry.get("op", "?") if isinstance(entry, dict) else "?"
        fld = ".".join(str(p) for p in parts[2:]) or "(entry)"
        return f"manifest {path}: entry kernels[{parts[1]}] (op {op!r}), field {fld!r}"
    fld = ".".join(str(p) for p in parts) or "(top level)"
    return f"manifest {path}: field {fld!r}"


def parse_manifest(doc, path: Path) -> Manifest:
    """Validate a decoded manifest document and build typed entries; raises ManifestError."""
    errors = sorted(_validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        raise ManifestError(
            f"{_where(path, doc if isinstance(doc, dict) else {}, first.absolute_path)}: {first.message}"
        )
    entries = []
    for i, row in enumerate(doc["kernels"]):
        if row["min_rank"] > row["max_rank"]:
            raise ManifestError(
                f"{_where(path, doc, ['kernels', i, 'min_rank'])}: min_rank {row['min_rank']} > max_rank {row['max_rank']}"
            )
        entries.append(
            KernelEntry(
                op=row["op"],
                kernel=row["kernel"],
                dtype_codes=frozenset(CODE_OF_NAME[d] for d in row["dtypes"]),
                min_rank=row["min_rank"],
                max_rank=row["max_rank"],
                requires_contiguous=row["requires_contiguous"],
                broadcast=row.get("broadcast", False),
                max_numel=row.get("max_numel"),
                priority=row.get("priority", 0),
            )
        )
    return Manifest(
        path=path,
        plugin=doc["plugin"],
        version=doc["version"],
        library=doc.get("library"),
        dependencies=list(doc.get("dependencies", [])),
        entries=entries,
    )


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate one manifest file; raises ManifestError naming file, entry and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ManifestError(f"manifest {path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(
            f"manifest {path}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return parse_manifest(doc, path)
