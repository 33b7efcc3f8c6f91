"""Run runtime checks in a fresh interpreter: rt_init is once per process, and each
test needs its own roots and environment. The child imports only torch_fl._native
(through a stub parent package, so torch is never imported)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent

PREAMBLE = f"""
import os, sys, types
sys.path.insert(0, {str(REPO)!r})
if "torch_fl" not in sys.modules:
    _pkg = types.ModuleType("torch_fl")
    _pkg.__path__ = [{str(REPO / "torch_fl")!r}]
    sys.modules["torch_fl"] = _pkg
from torch_fl._native import ffi, lib

F32 = lib.RAL_DTYPE_FLOAT32


def err():
    return ffi.string(lib.rt_last_error()).decode()


def ok(status):
    assert status == 0, err()


def fails(status, expected):
    assert status == getattr(lib, expected), (status, err())
    return err()


def plugins():
    rec = ffi.new("rt_plugin_record*")
    out = []
    for i in range(lib.rt_plugin_count()):
        ok(lib.rt_plugin_get(i, rec))
        out.append(dict(
            name=ffi.string(rec.name).decode(), status=rec.status, source=rec.source,
            reason=ffi.string(rec.reason).decode(), n_devices=rec.n_devices,
            has_compile=rec.has_compile, abi=(rec.abi_major, rec.abi_minor),
            dir=ffi.string(rec.dir).decode()))
    return out


def plugin(name):
    return next(p for p in plugins() if p["name"] == name)


def device(dev):
    rec = ffi.new("rt_device_record*")
    ok(lib.rt_device_get(dev, rec))
    return rec


def malloc(dev, nbytes, stream=0):
    ptr = ffi.new("uint64_t*")
    ok(lib.rt_malloc(dev, nbytes, stream, ptr))
    return ptr[0]


def stats(dev):
    s = ffi.new("rt_memory_stats*")
    ok(lib.rt_memory_stats_get(dev, s))
    return s


def kernel(dev, symbol):
    handle = ffi.new("int64_t*")
    ok(lib.rt_kernel_lookup(dev, symbol.encode(), handle))
    return handle[0]


def tensor(ptr, n, offset=0, dtype=F32, stride=1):
    return [ptr, offset, dtype, 1, n, stride]


def launch(dev, handle, outputs, inputs, scalars=(), floats=(), op="aten::add.Tensor", stream=0):
    packed = [len(outputs), len(inputs), len(scalars)]
    for t in (*outputs, *inputs):
        packed += t
    for s in scalars:
        packed += s
    cpacked = ffi.new("int64_t[]", packed)
    cfloats = ffi.new("double[]", list(floats) or [0.0])
    return lib.rt_launch(dev, stream, handle, cpacked, len(packed), cfloats, ffi.NULL, op.encode())


def h2d(dev, ptr, data, offset=0, stream=0):
    ok(lib.rt_copy_h2d(dev, stream, ptr, offset, ffi.from_buffer(data), len(data)))


def d2h(dev, ptr, nbytes, offset=0, stream=0):
    out = bytearray(nbytes)
    ok(lib.rt_copy_d2h(dev, stream, ffi.from_buffer(out), ptr, offset, nbytes, 1))
    return bytes(out)


def floats32(*values):
    import struct
    return struct.pack(f"{{len(values)}}f", *values)


def unfloats32(data):
    import struct
    return list(struct.unpack(f"{{len(data) // 4}}f", data))
"""


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without torch_fl/plugin settings, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FL_", "RAL_"))}
    env["TORCH_FL_SYSTEM_PLUGIN_DIR"] = "/nonexistent/torch_fl/plugins"
    env.update(extra or {})
    return env


def run_native(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run PREAMBLE + code in a fresh interpreter; fail with its stderr, return stdout."""
    result = subprocess.run(
        [sys.executable, "-c", PREAMBLE + textwrap.dedent(code)],
        env=clean_env(env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(f"native check failed:\n{result.stderr}\n{result.stdout}")
    return result.stdout


def run_on(root: Path, code: str, env: dict[str, str] | None = None) -> str:
    """run_native(code) after rt_init(root) succeeded."""
    return run_native(f"ok(lib.rt_init({str(root)!r}.encode()))\n" + textwrap.dedent(code), env)
