"""Inductor's C++ kernels on a host-mappable ral device, run in stream order on the device.

Inductor's wrapper calls each C++ kernel from the Python thread. Their inputs are often written
by vendor kernels (GEMMs, attention) still queued on the device's stream, so the direct call
(`host_args`) first drains the stream: the host waits for every GEMM, the
stream idles while the C++ kernel runs, and a GPT-2 step alternates the two 37 times.

Here the kernel is launched on the stream instead, as a call of a small generated C kernel
(`_TRAMPOLINE`, compiled by the host plugin's compile entry) that calls inductor's compiled
function with the tensors' host addresses: it runs on the stream's worker after the work
queued before it, and the Python thread goes on to queue the next GEMM, as in eager. Inductor's
OpenMP loops get the caller's thread count (what they would get on the Python thread: PyTorch's
`torch.get_num_threads()`), restored afterwards (the worker keeps OpenBLAS single-threaded).

Kernels that can raise (inductor's index bounds checks, integer division by zero: `may_raise`)
are launched through `ral_guarded_kernel`, a C++ function `guard` adds to their source that
calls the kernel and catches its exception (a C++ exception cannot cross the C trampoline).
The trampoline returns the exception's message as the launch's failure: the stream reports it
at the next sync as a `torch_fl.KernelError` (a RuntimeError), as CUDA reports a device-side
assert, and marks the stream so that later inductor kernels queued on it are skipped (their
inputs may be the failed kernel's unwritten outputs: a garbage index must not reach another
bounds check) until the Python side has seen the error (`_settle`). A check inside an OpenMP
parallel region cannot be caught (its exception ends the process, as with a direct call and on
CPU). `TORCH_FL_INDUCTOR_ASYNC_CHECKED=0` (part of inductor's cache key) gives them the direct
call, whose error is a Python exception at the call, and which drains the stream first.
With every kernel on the worker, libgomp's helper of the worker's team would spin after each
kernel on the core the next GEMM needs, so the first launch gives the launching thread an
OpenMP team too (`throttle_openmp_spin`). A call with any argument other than tensors of one
ral device whose plugin compiles C, and Python ints, takes the direct call.
`TORCH_FL_INDUCTOR_ASYNC=0` turns the path off (the switch is part of inductor's cache key).
"""

from __future__ import annotations

import ctypes
import os
import re

import torch

from torch_fl._native import ffi
from torch_fl.core.errors import UnsupportedError
from torch_fl.device.stream_state import current
from torch_fl.device.sync import synchronize, synchronize_stream
from torch_fl.tensor.host_copy import host_mappable, host_view
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tiers.launch import launch
from torch_fl.tiers.packing import TAG_INT, TAG_INT_LIST, pack_tensor

# The most arguments an inductor kernel may take on this path (more take the direct call).
MAX_ARGS = 64
OP = "torch_fl::inductor_cpp"
_OP_C = ffi.new("char[]", OP.encode())


def enabled() -> bool:
    """Whether wrappers generated now launch inductor's C++ kernels on the stream."""
    return os.environ.get("TORCH_FL_INDUCTOR_ASYNC", "1") != "0"


def checked_enabled() -> bool:
    """Whether wrappers generated now launch kernels that may raise too (`guard`; the default)."""
    return enabled() and os.environ.get("TORCH_FL_INDUCTOR_ASYNC_CHECKED", "1") != "0"


# Constructs of inductor's C++ kernels that throw a C++ exception: TORCH_CHECK (index bounds
# asserts) and the integer division helpers of cpp_prefix.h (they flag division by zero and the
# kernel throws after its loops).
_RAISES = re.compile(r"\b(?:AOTI_)?TORCH_CHECK\b|\bfloor_divide_integral\b|\bremainder_integral\b|\bmod\s*\(")


def may_raise(src_code: str) -> bool:
    """Whether an inductor C++ kernel's source can throw (direct call, or `guard`ed launch)."""
    return bool(_RAISES.search(src_code))


GUARDED = "ral_guarded_kernel"
ERROR_CAP = 512  # bytes of an exception's message the trampoline reports
_PREFIX = "#include <torch/csrc/inductor/cpp_prefix.h>"
_KERNEL = re.compile(r'extern "C"\s+void\s+([\w.]+)\s*\(([^)]*)\)')


def guard(src_code: str) -> str:
    """`src_code` (an inductor C++ kernel that may raise) with `ral_guarded_kernel(char* error,
    <the kernel's parameters>)`, which calls the kernel and writes a caught C++ exception's
    message into `error`; the source unchanged where its kernel is not found."""
    found = list(_KERNEL.finditer(src_code))
    if not found or _PREFIX not in src_code or GUARDED in src_code:
        return src_code
    name, params = found[-1].group(1), " ".join(found[-1].group(2).split())
    names = [re.search(r"(\w+)\s*$", p).group(1) for p in params.split(",") if p.strip()]
    sig = f"{GUARDED}(char* ral_error{', ' + params if params else ''})"
    # Declared before the kernel (inductor takes the source's last `extern "C"` as the
    # kernel's definition); the definition at the end inherits C linkage from it.
    decl = f'\n#include <cstdio>\nextern "C" __attribute__((visibility("default"))) void {sig};\n'
    body = f"""
// torch_fl.jit.inductor_async: the kernel for the stream's trampoline, its C++ exceptions caught
void {sig} {{
  try {{
    {name}({", ".join(names)});
  }} catch (const std::exception& e) {{
    std::snprintf(ral_error, {ERROR_CAP}, "%s", e.what());
  }} catch (...) {{
    std::snprintf(ral_error, {ERROR_CAP}, "%s", "inductor kernel: unknown C++ exception");
  }}
}}
"""
    return src_code.replace(_PREFIX, _PREFIX + decl, 1) + body


def _trampoline() -> str:
    """C source of the kernel that calls an inductor kernel: scalars are (function address,
    OpenMP threads, address of the stream's failure flag, guarded, argument plan, int
    arguments...); the plan names, per argument in order, a tensor (index >= 0: its address)
    or an int scalar (-1 - j: scalar 5 + j). A guarded function takes an error buffer first."""
    cases = []
    for n in range(MAX_ARGS + 2):
        params = ", ".join(["intptr_t"] * n) or "void"
        args = ", ".join(f"a[{i}]" for i in range(n))
        cases.append(f"    case {n}: ((void (*)({params}))fn)({args}); break;")
    body = "\n".join(cases)
    return f"""/* generated by torch_fl.jit.inductor_async */
#include <stdint.h>
#include <omp.h>
#include "ral_plugin.h"
/* set by the host plugin's compile entry: makes a message this thread's last error */
RAL_PLUGIN_EXPORT ral_status (*ral_jit_fail)(ral_status status, const char* message);
static ral_status fail(const char* message) {{
  return ral_jit_fail ? ral_jit_fail(RAL_ERROR_KERNEL_FAILED, message) : RAL_ERROR_KERNEL_FAILED;
}}
RAL_PLUGIN_EXPORT ral_status {{name}}(const ral_kernel_call* c) {{
  if (c->n_scalars < 5 || c->scalars[4].tag != {TAG_INT_LIST}) return RAL_ERROR_INVALID_ARGUMENT;
  const int n = c->scalars[4].count;
  const int64_t* plan = c->scalars[4].v.list;
  const int guarded = c->scalars[3].v.i != 0;
  int32_t* failed = (int32_t*)(intptr_t)c->scalars[2].v.i;
  if (n > {MAX_ARGS}) return RAL_ERROR_INVALID_ARGUMENT;
  if (failed && __atomic_load_n(failed, __ATOMIC_ACQUIRE))
    return fail("skipped: an earlier inductor kernel on this stream failed");
  char error[{ERROR_CAP}];
  error[0] = 0;
  intptr_t a[{MAX_ARGS} + 2];
  if (guarded) a[0] = (intptr_t)error;
  for (int i = 0; i < n; i++) {{
    const int64_t k = plan[i];
    if (k >= 0) {{
      if (k >= c->n_outputs + c->n_inputs) return RAL_ERROR_INVALID_ARGUMENT;
      a[guarded + i] = (intptr_t)((char*)c->tensors[k].data + c->tensors[k].byte_offset);
    }} else {{
      if (5 - 1 - k >= c->n_scalars) return RAL_ERROR_INVALID_ARGUMENT;
      a[guarded + i] = (intptr_t)c->scalars[5 - 1 - k].v.i;
    }}
  }}
  const intptr_t fn = (intptr_t)c->scalars[0].v.i;
  const int saved = omp_get_max_threads();
  omp_set_num_threads((int)c->scalars[1].v.i);
  switch (guarded + n) {{
{body}
  }}
  omp_set_num_threads(saved);
  if (error[0]) {{
    error[{ERROR_CAP} - 1] = 0;
    if (failed) __atomic_store_n(failed, 1, __ATOMIC_RELEASE);
    return fail(error);
  }}
  return RAL_OK;
}}
"""


# Counters for tests and benchmarks: kernels launched on the stream, and direct calls.
STATS = {"launched": 0, "guarded": 0, "direct": 0}
_HANDLES: dict = {}  # dev -> trampoline handle, or None
_ADDRESS: dict = {}  # (inductor's kernel callable, symbol) -> its C function's address, or None
_PLUGIN: dict = {}  # dev -> plugin name (for errors)


def _handle(dev: int):
    """The trampoline's launch handle on ral:dev, or None where its plugin does not compile C."""
    if dev in _HANDLES:
        return _HANDLES[dev]
    from torch_fl.jit.kernel_cache import compile_kernel, kernel_name
    from torch_fl.jit.target import target_of

    h = None
    target = target_of(dev)
    if target is not None and target.lang == "c" and host_mappable(dev):
        src = _trampoline()
        name = kernel_name(src)
        h = compile_kernel(target, src.replace("{name}", name), name)
        _PLUGIN[dev] = target.plugin
        throttle_openmp_spin()
    _HANDLES[dev] = h
    return h


def throttle_openmp_spin() -> None:
    """Give this (the launching) thread an OpenMP team as large as the one the trampoline gives
    inductor's kernels on the stream worker, so that libgomp counts more OpenMP threads than
    CPUs and idles its threads in its short, throttled spin (1,000 rounds, not 300,000).

    libgomp reads GOMP_SPINCOUNT once, when it loads (before torch_fl can set it); after each
    parallel region its threads spin that many rounds before they sleep, unless the process's
    OpenMP threads outnumber its CPUs (libgomp's documented throttled mode). The worker's team
    alone does not: its helper then spins after every inductor kernel on the core the host
    plugin's pool needs for the next GEMM (GPT-2 on 2 cores: the helper 100-250 ms of CPU per
    step, the step 2-4x slower). A team on the launching thread, as any parallel PyTorch CPU op
    makes, tips the count; one parallel fill makes it (a few microseconds, once per process)."""
    n = torch.get_num_threads()
    if n > 1:
        torch.zeros(n * _TORCH_GRAIN, device="cpu")  # at::parallel_for: a GRAIN_SIZE chunk per thread


_TORCH_GRAIN = 32768  # at::internal::GRAIN_SIZE: PyTorch's CPU loops split into chunks of this


def _address(kernel, symbol: str = "kernel"):
    """Address of C function `symbol` inside the module inductor compiled for `kernel`, or None."""
    try:
        return _ADDRESS[kernel, symbol]
    except KeyError:
        pass
    addr = None
    path = getattr(getattr(kernel, "__self__", None), "__file__", None)
    if path and getattr(kernel, "__name__", "") == "kernel":
        try:
            addr = ctypes.cast(getattr(ctypes.CDLL(path), symbol), ctypes.c_void_p).value
        except (OSError, AttributeError):
            addr = None
    _ADDRESS[kernel, symbol] = addr
    return addr


_FAILED: dict = {}  # (dev, stream) -> int32 flag the trampoline sets when a guarded kernel fails


def _failed_flag(dev: int, stream: int):
    """The failure flag of a stream (cffi int32_t[1], kept alive here)."""
    flag = _FAILED.get((dev, stream))
    if flag is None:
        flag = _FAILED[dev, stream] = ffi.new("int32_t[1]")
    return flag


def _settle(dev: int, stream: int, flag) -> None:
    """After a guarded kernel failed on the stream: wait for it, so that its error (if no sync
    has reported it yet) is raised here, and let later kernels run again."""
    try:
        synchronize_stream(dev, stream, "inductor kernel failed")
    finally:
        flag[0] = 0


def call(kernel, *args) -> None:
    """Run inductor's C++ `kernel` on `args` (ral tensors and ints) in stream order on their
    device; arguments this path cannot carry take the direct call (`host_args`)."""
    _launch(kernel, args, guarded=False)


def guarded(kernel, *args) -> None:
    """`call` for a kernel that may raise (`guard`ed source): its exception becomes the launch's
    failure, reported at the next sync; the direct call where the guarded function is missing."""
    _launch(kernel, args, guarded=True)


def _launch(kernel, args, guarded: bool) -> None:
    if len(args) <= MAX_ARGS:
        dev = None
        tensors: list = []
        ints: list = []
        plan: list = []
        for a in args:
            ta = type(a)
            if ta is RalTensor:
                if dev is None:
                    dev = a._dev
                elif a._dev != dev:
                    break
                plan.append(len(tensors))
                tensors.append(a)
            elif ta is int:
                plan.append(-1 - len(ints))
                ints.append(a)
            else:
                break
        else:
            handle = _handle(dev) if dev is not None else None
            addr = _address(kernel, GUARDED if guarded else "kernel") if handle is not None else None
            if addr is not None:
                stream = current(dev)
                flag = _failed_flag(dev, stream)
                if flag[0]:
                    _settle(dev, stream, flag)
                packed = [0, len(tensors), 5 + len(ints)]
                for t in tensors:
                    pack_tensor(packed, t)
                packed += (TAG_INT, addr, TAG_INT, torch.get_num_threads(), TAG_INT, int(ffi.cast("intptr_t", flag)),
                           TAG_INT, int(guarded), TAG_INT_LIST, len(plan), *plan)  # fmt: skip
                for v in ints:
                    packed += (TAG_INT, v)
                launch(dev, stream, handle, ffi.new("int64_t[]", packed), len(packed), ffi.NULL, ffi.NULL,
                       _OP_C, _PLUGIN[dev], OP)  # fmt: skip
                STATS["guarded" if guarded else "launched"] += 1
                return
    direct(kernel, *args)


def direct(kernel, *args) -> None:
    """Call inductor's C++ `kernel` on this thread, on zero-copy views (after a drain)."""
    STATS["direct"] += 1
    kernel(*host_args(*args))


def host_args(*args):
    """Kernel arguments with RalTensors replaced by zero-copy CPU views of their buffers.

    The device's stream is drained first: vendor kernels (extern calls such as mm) may
    still be writing the inputs on the host plugin's worker thread."""
    out = list(args)
    synced = set()
    for i, a in enumerate(out):
        if type(a) is RalTensor:
            dev = a._dev
            if dev not in synced:
                synchronize(dev, "inductor kernel")
                synced.add(dev)
            view = host_view(a)
            if view is None:
                raise UnsupportedError(not_mappable(dev))
            out[i] = view
    return out


def not_mappable(dev: int) -> str:
    """The error of a host C++ kernel asked for on a device the host cannot address."""
    return (
        f"RAL_ERROR_UNSUPPORTED: inductor was asked for a host C++ kernel on ral:{dev}, whose memory "
        "is not host-mappable (torch_fl's post-grad pass for ral did not run: was the 'ral' device "
        "pass replaced?); use torch.compile(model, backend='ral') on this device"
    )
