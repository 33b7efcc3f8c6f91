"""Build the template plugin and the deliberately broken test plugins.

Every helper writes a *plugin directory* (``lib<name>.so`` + ``manifest.json``) under
a root that tests then hand to the runtime as a discovery root.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
INCLUDE = REPO / "torch_fl" / "_native" / "include"
TEMPLATE_DIR = REPO / "plugins" / "template"
MANIFESTS = REPO / "manifests"

# Cases compiled from <source>.c in this folder; "corrupt" and "linked_dep" are special.
SOURCES = ("named", "abi2", "null_entry", "needs_deps", "older_minor", "faulty", "chaos")
# crashing.c built with -DCRASH_AT=n: a witness that logs when its code runs, and plugins
# that segfault in their dlopen constructor, in init() and in device_count().
CRASHING = {"witness": 0, "crash_ctor": 1, "crash_init": 2, "crash_count": 3}
CFLAGS = ["-O2", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall"]


def ensure_runtime() -> None:
    """Build torch_fl._native._ral in place if it is missing."""
    if not list((REPO / "torch_fl" / "_native").glob("_ral*.so")):
        subprocess.run(
            [sys.executable, str(REPO / "torch_fl" / "_native" / "build_runtime.py")],
            check=True,
            cwd=REPO,
        )


def _write_manifest(plugin_dir: Path, name: str, library: str, kernels=()) -> None:
    manifest = {
        "schema_version": 1,
        "plugin": name,
        "version": "1.0.0",
        "library": library,
        "dependencies": [],
        "kernels": list(kernels),
    }
    (plugin_dir / "manifest.json").write_text(json.dumps(manifest, indent=2))


def build_template_plugin(dest_root: Path, name: str = "template") -> Path:
    """Build plugins/template with its Makefile into dest_root/<name>/ with its manifest."""
    plugin_dir = Path(dest_root) / name
    plugin_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["make", "-s", "-C", str(TEMPLATE_DIR), f"OUT={plugin_dir}"],
        check=True,
        capture_output=True,
    )
    shutil.copy(MANIFESTS / "template.json", plugin_dir / "manifest.json")
    return plugin_dir


def _compile(source: Path, out: Path, name: str, extra: list[str] = ()) -> None:
    cmd = [
        "cc",
        *CFLAGS,
        f"-I{INCLUDE}",
        f"-I{TEMPLATE_DIR}",
        "-Dral_plugin_entry_v1=template_entry_v1",
        f'-DTEST_PLUGIN_NAME="{name}"',
        "-o",
        str(out),
        str(source),
        *extra,
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"building {out.name} failed:\n{result.stderr}")


def _build_linked_dep(plugin_dir: Path, name: str) -> None:
    """A plugin linked against libfakedep.so (found through rpath $ORIGIN/deps), which
    is kept aside in deps.off/ so dlopen fails on the dependency. deps/ exists but is
    empty: glibc remembers for the whole process that a search directory is missing,
    while a library that appears in an existing directory is found on the next try,
    which is also how a vendor runtime gets installed into /usr/lib."""
    aside = plugin_dir / "deps.off"
    aside.mkdir(exist_ok=True)
    (plugin_dir / "deps").mkdir(exist_ok=True)
    _compile(HERE / "fakedep.c", aside / "libfakedep.so", name)
    _compile(
        HERE / "named.c",
        plugin_dir / f"lib{name}.so",
        name,
        [f"-L{aside}", "-Wl,--no-as-needed", "-lfakedep", "-Wl,-rpath,$ORIGIN/deps"],
    )


def install_fake_dep(plugin_dir: Path) -> None:
    """Make the linked_dep plugin's dependency appear in deps/."""
    (plugin_dir / "deps.off" / "libfakedep.so").rename(plugin_dir / "deps" / "libfakedep.so")


def build_test_plugin(name: str, dest_root: Path, source: str | None = None) -> Path:
    """Build test plugin `name` into dest_root/<name>/lib<name>.so with a manifest.

    `source` picks the case (default: `name`): one of SOURCES or CRASHING, "corrupt" (a file that
    is not an ELF library) or "linked_dep" (needs a missing libfakedep.so). The plugin
    reports `name` as its plugin_name.
    """
    source = source or name
    plugin_dir = Path(dest_root) / name
    plugin_dir.mkdir(parents=True, exist_ok=True)
    library = plugin_dir / f"lib{name}.so"
    if source == "corrupt":
        library.write_bytes(b"this is not an ELF shared object\n" * 4)
    elif source == "linked_dep":
        _build_linked_dep(plugin_dir, name)
    elif source in SOURCES:
        _compile(HERE / f"{source}.c", library, name)
    elif source in CRASHING:
        _compile(HERE / "crashing.c", library, name, [f"-DCRASH_AT={CRASHING[source]}"])
    else:
        raise ValueError(f"unknown test plugin source {source!r}")
    kernels = [
        {
            "op": "aten::add.Tensor",
            "kernel": k,
            "dtypes": ["float32"],
            "min_rank": 0,
            "max_rank": 8,
            "requires_contiguous": True,
            "broadcast": False,
        }
        for k in {"faulty": ("faulty_kernel", "faulty_sync_kernel"), "chaos": ("chaos_add",)}.get(source, ())
    ]
    _write_manifest(plugin_dir, name, library.name, kernels)
    return plugin_dir
