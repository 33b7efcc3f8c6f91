"""What the plugin loader will and will not see, found without running vendor code.

`ignored_folders` lists folders of the plugin roots the loader skips in silence (no
manifest.json; a TORCH_FL_PLUGIN_PATH entry that is itself a plugin folder). `check_plugin_dir`
is `ralctl manifest validate PLUGIN_DIR`: schema, op names against this torch, the library
the loader would pick (read as an ELF file, never dlopen'ed: dlopen runs the vendor's
constructors), its exported entry symbol, and names consistent with the folder. No torch
import here: op names are checked in a child interpreter (`unknown_ops`).
"""

from __future__ import annotations

import json
import os
import platform
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ENTRY_SYMBOL = "ral_plugin_entry_v1"


# ---- folders the loader skips ---------------------------------------------------------------


def ignored_folders(roots: list[tuple[str, str]]) -> list[str]:
    """One line per folder of the given (source, root) pairs that the loader ignores, with
    the reason and the fix."""
    out = []
    for source, root in roots:
        r = Path(root)
        if not r.is_dir():
            continue
        if (r / "manifest.json").is_file():
            out.append(
                f"{root} ({source}) is itself a plugin folder: the loader looks for plugin folders "
                f"inside it; point {source} at the parent folder ({r.parent})"
            )
        for sub in sorted(r.iterdir()):
            if sub.name.startswith(".") or not sub.is_dir() or (sub / "manifest.json").is_file():
                continue
            libs = sorted(p.name for p in sub.glob("lib*.so*"))
            has = f"holds {', '.join(libs)} but " if libs else ""
            out.append(f"{sub} ({source}): ignored, it {has}has no manifest.json")
    return out


# ---- op names against this torch ------------------------------------------------------------

_OP_CHECK = """
import json, sys, torch
out = {}
for name in json.load(sys.stdin):
    ns, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), base)
    except (AttributeError, RuntimeError):
        out[name] = f"no operator {ns}::{base} in torch {torch.__version__}"
        continue
    if (overload or "default") not in packet.overloads():
        known = ", ".join(sorted(packet.overloads()))
        out[name] = f"{ns}::{base} has no overload {overload or 'default'!r} in torch {torch.__version__} (it has {known})"
json.dump(out, sys.stdout)
"""


def unknown_ops(ops: list[str]) -> dict[str, str]:
    """{op: why} for the op names this torch lacks (checked in a child interpreter, so the
    caller stays torch-free). Raises RuntimeError if the check itself cannot run."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")  # torch alone, no plugin loads
    proc = subprocess.run(
        [sys.executable, "-c", _OP_CHECK],
        input=json.dumps(sorted(set(ops))),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"cannot check op names against torch: {proc.stderr.strip()[-300:]}")
    return json.loads(proc.stdout)


def child_op_checker(roots: list[tuple[str, str]]):
    """check_op(op) -> why it is unknown, or None: every manifest op under the roots checked
    once, in one child interpreter, on the first call (plugin-status stays torch-free)."""
    missing: dict | None = None

    def check(op: str) -> str | None:
        nonlocal missing
        if missing is None:
            ops = set()
            for _, root in roots:
                for path in Path(root).glob("*/manifest.json") if Path(root).is_dir() else ():
                    try:
                        ops |= {k["op"] for k in json.loads(path.read_text()).get("kernels", []) if "op" in k}
                    except (OSError, ValueError, TypeError, AttributeError):
                        continue  # an unreadable manifest is reported as INVALID_MANIFEST
            try:
                missing = unknown_ops(sorted(ops))
            except RuntimeError:
                missing = {}
        return missing.get(op)

    return check


# ---- the library, read as an ELF file -------------------------------------------------------

_MACHINES = {"x86_64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21, "riscv64": 243, "s390x": 22}


def loader_library(plugin_dir: Path) -> Path | None:
    """The library the loader opens in a plugin folder: the first lib*.so by name."""
    libs = sorted(p for p in plugin_dir.iterdir() if p.name.startswith("lib") and p.name.endswith(".so"))
    return libs[0] if libs else None


def elf_dynamic_symbols(path: Path) -> tuple[set[str], str | None]:
    """(defined global/weak symbols of the dynamic symbol table, problem or None). A 64-bit
    little-endian ELF shared object of this machine's architecture is expected."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF":
        return set(), "not an ELF file"
    if data[4] != 2 or data[5] != 1:
        return set(), "not a 64-bit little-endian ELF file"
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_type != 3:
        return set(), f"ELF type {e_type} is not a shared object (build with -shared -fPIC)"
    want = _MACHINES.get(platform.machine())
    if want is not None and e_machine != want:
        return set(), f"built for ELF machine {e_machine}, this machine ({platform.machine()}) is {want}"
    (shoff,) = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for sh in sections:
        if sh[1] != 11:  # SHT_DYNSYM
            continue
        strtab = sections[sh[6]]
        str_off = strtab[4]
        for off in range(sh[4], sh[4] + sh[5], sh[9] or 24):
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, off)
            if st_shndx == 0 or (st_info >> 4) not in (1, 2):  # undefined, or not GLOBAL/WEAK
                continue
            end = data.index(b"\0", str_off + st_name)
            names.add(data[str_off + st_name : end].decode(errors="replace"))
    return names, None


# ---- ralctl manifest validate -----------------------------------------------------------------


@dataclass
class Report:
    """Problems (the plugin will not work as declared) and warnings (likely mistakes)."""

    target: str
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    plugin: str | None = None
    entries: int = 0
    ops: list[str] = field(default_factory=list)


def _manifest_and_ops(path: Path, report: Report, check_ops: bool):
    from torch_fl.core.errors import ManifestError
    from torch_fl.core.manifest import load_manifest

    try:
        m = load_manifest(path)
    except ManifestError as exc:
        report.problems.append(str(exc))
        return None
    report.plugin, report.entries = m.plugin, len(m.entries)
    report.ops = sorted({e.op for e in m.entries})
    if check_ops:
        try:
            missing = unknown_ops(report.ops)
        except RuntimeError as exc:
            report.warnings.append(str(exc))
            missing = {}
        for i, e in enumerate(m.entries):
            if e.op in missing:
                report.problems.append(
                    f"manifest {path}: entry kernels[{i}] (op {e.op!r}), field 'op': {missing[e.op]}"
                )
    return m


def check_manifest_file(path: str | Path, check_ops: bool = True) -> Report:
    """Schema and op names of a bare manifest file."""
    report = Report(str(path))
    _manifest_and_ops(Path(path), report, check_ops)
    return report


def check_plugin_dir(plugin_dir: str | Path, check_ops: bool = True) -> Report:
    """Everything about a plugin folder that can be checked without loading it."""
    d = Path(plugin_dir)
    report = Report(str(d))
    path = d / "manifest.json"
    if not path.is_file():
        report.problems.append(f"{d}: no manifest.json; the loader ignores this folder")
        return report
    m = _manifest_and_ops(path, report, check_ops)
    lib = loader_library(d)
    if lib is None:
        report.problems.append(f"{d}: no lib*.so in the folder; the loader has nothing to open")
        return report
    if m is not None and m.library and m.library != lib.name:
        where = "is missing" if not (d / m.library).exists() else f"is not what the loader opens ({lib.name})"
        report.problems.append(
            f"manifest {path}: field 'library': {m.library} {where}; the loader opens the first lib*.so by name"
        )
    symbols, problem = elf_dynamic_symbols(lib)
    if problem:
        report.problems.append(f"{lib}: {problem}")
    elif ENTRY_SYMBOL not in symbols:
        report.problems.append(
            f"{lib}: does not export {ENTRY_SYMBOL} (declare it with RAL_PLUGIN_EXPORT; "
            "with -fvisibility=hidden nothing else is exported)"
        )
    if m is None:
        return report
    if m.plugin != d.name:
        report.warnings.append(
            f"manifest {path}: field 'plugin': {m.plugin!r} differs from the folder name {d.name!r}; "
            "the loader names a plugin by its folder until the library reports its own name"
        )
    if lib.name not in (f"lib{m.plugin}.so", f"libral_{m.plugin}.so"):
        report.warnings.append(f"{lib.name}: expected lib{m.plugin}.so or libral_{m.plugin}.so for plugin {m.plugin!r}")
    # Kernels are looked up through the plugin's get_kernel(), not the symbol table; their
    # names are normally string constants in the library, so a typo shows as a missing string.
    blob = lib.read_bytes()
    for i, e in enumerate(m.entries):
        if b"\0" + e.kernel.encode() + b"\0" not in blob and e.kernel.encode() + b"\0" not in blob:
            report.warnings.append(
                f"manifest {path}: entry kernels[{i}] (op {e.op!r}), field 'kernel': "
                f"{e.kernel!r} does not occur in {lib.name} (a typo?)"
            )
    return report
