"""The default `torch.compile` backend (inductor) on ral tensors, through public registration.

ral:0 is host-mappable: its buffers are host memory. Inductor's C++ CPU code generator is
registered for the "ral" device (`register_backend_for_device`, `register_device_op_overrides`;
Dynamo's device interface is the device layer's, device/dynamo_interface.py), so the kernels it generates are ordinary host C++.
The one thing they cannot do is read a RalTensor's memory (a wrapper tensor has no storage;
its `data_ptr()` is a device address), so the wrapper code passes each kernel zero-copy CPU views of its ral
buffers (`host_args`); buffers are allocated with `torch.empty_strided(device="ral:N")` and
views with `as_strided`, so every tensor the compiled graph hands out is a RalTensor.

A device that is not host-mappable (ral:1, OpenCL) cannot run host C++ on its memory: the
compile stops with one `UnsupportedError` that names the device and the backends to use.
"""

from __future__ import annotations

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.device.sync import synchronize
from torch_fl.tensor.host_copy import host_mappable, host_view
from torch_fl.tensor.ral_tensor import RalTensor, wrap

_torch_reinterpret = torch._C._dynamo.guards._reinterpret_tensor

_REGISTERED = False


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
                raise UnsupportedError(_not_mappable(dev))
            out[i] = view
    return out


def reinterpret_tensor(t, size, stride, offset_increment=0):
    """Inductor's `reinterpret_tensor` (an alias that is not an autograd view) for ral tensors.

    Torch's version builds a plain tensor over `t`'s storage, which a RalTensor does not
    have; `as_strided` would make an autograd view, which a later graph (after a graph
    break) would have to fakeify as a view of a subclass."""
    if type(t) is not RalTensor:
        return _torch_reinterpret(t, size, stride, offset_increment)
    return wrap(t._buf, tuple(size), tuple(stride), t.storage_offset() + offset_increment, t.dtype)


def _not_mappable(dev: int) -> str:
    return (
        f"RAL_ERROR_UNSUPPORTED: torch.compile's default backend (inductor) generates host C++, and "
        f"ral:{dev} memory is not host-mappable; use torch.compile(model, backend='ral') (the jit "
        "tier's fused kernels) or backend='aot_eager' on this device"
    )


# Inductor settings that name the device type "cpu" where they mean "C++ code generator":
# - cuda_backend: inductor picks the code generator's conventions (dtype bookkeeping,
#   upcasts) by device type, and every type other than cpu/mps/xpu/tpu gets cuda_backend;
# - loop_reindexing_after_fusion: a GPU (SIMD) pass that skips "cpu" nodes by name and
#   misreads the C++ generator's loop groups on any other device.
HOST_CONFIG = {"cuda_backend": "cpp", "loop_reindexing_after_fusion": False}


def _config_message(wrong: dict) -> str:
    return (
        f"RAL_ERROR_UNSUPPORTED: inductor compiles ral tensors with its C++ generator, which needs "
        f"the inductor settings {wrong} (set by torch_fl only in processes without a GPU); compile "
        f"with torch.compile(model, options={wrong!r}) or use backend='ral'"
    )


def _check_device(device: torch.device | None) -> None:
    if device is not None and device.type == "ral" and not host_mappable(device.index or 0):
        raise UnsupportedError(_not_mappable(device.index or 0))


def register() -> None:
    """Register inductor's C++ code generator for the "ral" device (imports torch._inductor)."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    import torch._inductor.config as iconfig
    from torch._inductor.codegen.common import (
        get_wrapper_codegen_for_device,
        register_backend_for_device,
        register_device_op_overrides,
    )
    from torch._inductor.codegen.cpp import CppScheduling
    from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

    if get_wrapper_codegen_for_device("ral") is not None:  # someone registered one: keep it
        return

    class RalScheduling(CppScheduling):
        """CppScheduling that refuses, up front and clearly, a device the host cannot address."""

        def __init__(self, scheduler):
            from torch._inductor.virtualized import V

            if scheduler is not None:  # None: inductor only asks for the backend's features
                _check_device(getattr(V.graph, "current_device", None))
                wrong = {k: v for k, v in HOST_CONFIG.items() if getattr(iconfig, k) != v}
                if wrong:
                    raise UnsupportedError(_config_message(wrong))
            super().__init__(scheduler)

    class RalWrapper(PythonWrapperCodegen):
        """Python wrapper whose host C++ kernels get CPU views of ral buffers."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return RalWrapper()

        def write_header(self) -> None:
            super().write_header()
            # After the header's own `reinterpret_tensor = ...`, which this one replaces.
            self.header.writeline("from torch_fl.jit.inductor_device import host_args as _ral_host, reinterpret_tensor")

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kw):
            device = device or torch._inductor.virtualized.V.graph.get_current_device_or_throw()
            if triton or device.type != "ral":
                return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kw)
            _check_device(device)
            self.writeline(f"{kernel_name}(*_ral_host({', '.join(call_args)})){self.ending}")

        def make_allocation(self, name, device, dtype, shape, stride, allocation_shape=None, is_pinned=False):
            _check_device(device)
            if device.type != "ral":
                return super().make_allocation(name, device, dtype, shape, stride, allocation_shape, is_pinned)
            size = self.codegen_python_shape_tuple(allocation_shape if allocation_shape is not None else shape)
            strides = self.codegen_python_shape_tuple(stride)
            return f"{name} = empty_strided({size}, {strides}, device='ral:{device.index or 0}', dtype={dtype})"

    # In a process without a GPU these settings are read for no device but ral; with a GPU,
    # RalScheduling names them instead of changing what the GPU's compiles do.
    if not (torch.cuda.is_available() or (hasattr(torch, "xpu") and torch.xpu.is_available())):
        for k, v in HOST_CONFIG.items():
            setattr(iconfig, k, v)
    register_backend_for_device("ral", RalScheduling, RalWrapper)
    register_device_op_overrides("ral", CpuDeviceOpOverrides())
    # Dynamo's device interface for "ral" is the device layer's (device/dynamo_interface.py).
