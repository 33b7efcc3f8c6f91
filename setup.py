"""Build hook: compile the native runtime (cffi) and the built-in plugins with the package.

`pip install -e .` (or `pip install .`) runs this. Each plugin is built with its own Makefile,
exactly as a vendor would build theirs, into torch_fl/_plugins/<name>/ beside its manifest.
"""

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# Built-in plugins, in discovery order. cuda builds only where nvcc exists.
BUILTIN_PLUGINS = ("host", "opencl", "cuda")


def _plugin_buildable(name: str) -> tuple[bool, str]:
    if not (ROOT / "plugins" / name / "Makefile").exists():
        return False, "not in this source tree"
    if name == "cuda" and shutil.which("nvcc") is None:
        return False, "nvcc not found"
    if name == "opencl" and not Path("/usr/include/CL/cl.h").exists():
        return False, "OpenCL headers not installed (apt-get install opencl-headers ocl-icd-opencl-dev)"
    return True, ""


def build_native(package_dir: Path) -> None:
    """Build runtime + plugins into package_dir (the torch_fl package directory)."""
    sys.path.insert(0, str(ROOT / "torch_fl" / "_native"))
    import build_runtime

    build_runtime.build(str(package_dir.parent))
    plugins_dir = package_dir / "_plugins"
    plugins_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "manifests" / "schema.json", plugins_dir / "schema.json")
    for name in BUILTIN_PLUGINS:
        ok, why = _plugin_buildable(name)
        out = plugins_dir / name
        if not ok:
            print(f"torch_fl: skipping plugin {name}: {why}", file=sys.stderr)
            shutil.rmtree(out, ignore_errors=True)
            continue
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["make", "-s", "-C", str(ROOT / "plugins" / name), f"OUT={out}"], check=True)
        shutil.copy2(ROOT / "manifests" / f"{name}.json", out / "manifest.json")


class BuildNative(build_ext):
    """build_ext that also builds the cffi runtime and the plugins."""

    def run(self):
        inplace = self.inplace or getattr(self, "editable_mode", False)
        # build_lib is relative to the cwd; make needs an absolute OUT (it runs with -C).
        target = ROOT / "torch_fl" if inplace else Path(self.build_lib).resolve() / "torch_fl"
        build_native(target)
        super().run()


class NativeDistribution(Distribution):
    """Always run build_ext (the native parts are not setuptools Extensions)."""

    def has_ext_modules(self):
        return True


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "native":
    # Developer shortcut: `python setup.py native` rebuilds everything in place.
    build_native(ROOT / "torch_fl")
else:
    setup(cmdclass={"build_ext": BuildNative}, distclass=NativeDistribution)
