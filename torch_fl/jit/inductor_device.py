"""The default `torch.compile` backend (inductor) on ral tensors, through public registration.

ral:0 is host-mappable: its buffers are host memory. Inductor's C++ CPU code generator is
registered for the "ral" device (`register_backend_for_device`, `register_device_op_overrides`;
Dynamo's device interface is the device layer's, device/dynamo_interface.py), so the kernels it generates are ordinary host C++.
The one thing they cannot do is read a RalTensor's memory (a wrapper tensor has no storage;
its `data_ptr()` is a device address), so the wrapper code passes each kernel zero-copy CPU views of its ral
buffers (`inductor_async`); buffers are allocated with `torch.empty_strided(device="ral:N")` and
views with `as_strided`, so every tensor the compiled graph hands out is a RalTensor.

A device that is not host-mappable (ral:1, OpenCL) cannot run host C++ on its memory. For a
graph holding such a tensor, the post-grad pass registered for "ral" (`RalGraphPass`) turns the
graph's computation into one extern call (`inductor_graph`): the `ral` backend's fused jit kernels
and the router run it. The same pass's `uuid()` puts torch_fl's code generation inputs into
inductor's cache keys (`inductor_key`).
"""

from __future__ import annotations

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.jit.inductor_async import not_mappable
from torch_fl.tensor.host_copy import host_mappable
from torch_fl.tensor.ral_tensor import RalTensor, wrap

_torch_reinterpret = torch._C._dynamo.guards._reinterpret_tensor

_REGISTERED = False


def reinterpret_tensor(t, size, stride, offset_increment=0):
    """Inductor's `reinterpret_tensor` (an alias that is not an autograd view) for ral tensors.

    Torch's version builds a plain tensor over `t`'s storage, which a RalTensor does not
    have; `as_strided` would make an autograd view, which a later graph (after a graph
    break) would have to fakeify as a view of a subclass."""
    if type(t) is not RalTensor:
        return _torch_reinterpret(t, size, stride, offset_increment)
    return wrap(t._buf, tuple(size), tuple(stride), t.storage_offset() + offset_increment, t.dtype)


_MODE_NOTES = {
    "triton.cudagraphs": (
        "mode='reduce-overhead' on ral devices: CUDA graphs do not exist there, so inductor skips "
        "them and the graph runs as in the default mode"
    ),
    "max_autotune": (
        "mode='max-autotune' on ral devices: on host-mappable ones inductor tunes its C++ kernels "
        "as on CPU; on the others the graph runs through the ral backend's fused kernels, which "
        "have nothing to tune"
    ),
}
_NOTED: set = set()


def _note_modes() -> None:
    """Warn once per process for each compile mode that means less on ral than on CUDA."""
    import warnings

    import torch._inductor.config as iconfig

    for name, text in _MODE_NOTES.items():
        obj = iconfig
        for part in name.split("."):
            obj = getattr(obj, part)
        if obj and name not in _NOTED:
            _NOTED.add(name)
            warnings.warn(f"torch_fl: {text} (docs/compile.md)", UserWarning, stacklevel=2)


def _graph_devices(gm: torch.fx.GraphModule) -> set:
    out = set()
    for node in gm.graph.nodes:
        for v in torch.utils._pytree.tree_leaves(node.meta.get("val")):
            if isinstance(v, torch.Tensor) and v.device.type == "ral":
                out.add(v.device.index or 0)
    return out


def rewrite_for_device(gm: torch.fx.GraphModule) -> bool:
    """The post-grad pass's work: a graph on a ral device that is not host-mappable becomes one
    extern call through the ral backend's kernels (returns True); on host-mappable devices its
    GEMMs become calls of the vendor's kernels (`inductor_gemm`) and inductor generates the rest."""
    from torch_fl.jit import inductor_graph

    _note_modes()
    devs = _graph_devices(gm)
    if all(host_mappable(d) for d in devs):
        from torch_fl.jit import inductor_variance
        from torch_fl.jit.inductor_gemm import to_vendor_gemms

        to_vendor_gemms(gm)  # the vendor's GEMMs, not the cpu tier's out= forms
        if inductor_variance.enabled():
            inductor_variance.two_step(gm)  # layer norm's statistics as a CPU compile has them
        return False
    inductor_graph.to_extern_call(gm)
    return True


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
        raise UnsupportedError(not_mappable(device.index or 0))


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
    from torch._inductor.custom_graph_pass import CustomGraphModulePass

    from torch_fl.jit import inductor_async, inductor_math

    if get_wrapper_codegen_for_device("ral") is not None:  # someone registered one: keep it
        return

    class RalScheduling(CppScheduling):
        """CppScheduling that refuses, clearly, a kernel for a device the host cannot address
        (extern calls need no kernel: the scheduler is built for every graph on "ral")."""

        def define_kernel(self, src_code, nodes, kernel_args=None):
            from torch._inductor.virtualized import V

            _check_device(getattr(V.graph, "current_device", None))
            wrong = {k: v for k, v in HOST_CONFIG.items() if getattr(iconfig, k) != v}
            if wrong:
                raise UnsupportedError(_config_message(wrong))
            src_code = inductor_math.rewrite(src_code)  # eager ral:0's vector tanh
            raises = inductor_async.may_raise(src_code)
            if raises and inductor_async.checked_enabled():
                src_code = inductor_async.guard(src_code)  # launched too, its exception caught
            name = super().define_kernel(src_code, nodes, kernel_args)
            checked = getattr(V.graph.wrapper_code, "ral_checked", None)
            if checked is not None and raises:
                checked.add(name)
            return name

    class RalWrapper(PythonWrapperCodegen):
        """Python wrapper whose host C++ kernels get CPU views of ral buffers."""

        @staticmethod
        def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
            if is_subgraph:
                return SubgraphPythonWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
            return RalWrapper()

        def __init__(self):
            super().__init__()
            self.ral_checked = set()  # kernels that may raise (inductor_async.may_raise)
            self.ral_async = inductor_async.enabled()
            self.ral_async_checked = inductor_async.checked_enabled()

        def write_header(self) -> None:
            super().write_header()
            # After the header's own `reinterpret_tensor = ...`, which this one replaces.
            self.header.writeline("from torch_fl.jit.inductor_device import reinterpret_tensor")
            self.header.writeline(
                "from torch_fl.jit.inductor_async import call as _ral_async, direct as _ral_direct, guarded as _ral_guarded"
            )
            # Define torch_fl::ral_graph and the GEMM operators, which a wrapper loaded from
            # inductor's cache may call before any pass of this process has imported them.
            self.header.writeline("import torch_fl.jit.inductor_graph, torch_fl.jit.inductor_gemm")

        def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True, **kw):
            device = device or torch._inductor.virtualized.V.graph.get_current_device_or_throw()
            if triton or device.type != "ral":
                return super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kw)
            _check_device(device)
            checked = kernel_name in self.ral_checked
            if self.ral_async and (self.ral_async_checked or not checked):
                # in stream order on the device (inductor_async), no wait for queued GEMMs;
                # a kernel that may raise (opt-in) reports its error at the next sync
                call = "_ral_guarded" if checked else "_ral_async"
                self.writeline(f"{call}({', '.join([kernel_name, *call_args])}){self.ending}")
            else:
                self.writeline(f"_ral_direct({', '.join([kernel_name, *call_args])}){self.ending}")

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

    class RalGraphPass(CustomGraphModulePass):
        """Inductor's post-grad pass for graphs on ral devices; its uuid keys inductor's caches."""

        def __call__(self, gm: torch.fx.GraphModule) -> None:
            rewrite_for_device(gm)

        def uuid(self) -> str:
            from torch_fl.jit.inductor_key import digest

            return digest()

    register_backend_for_device("ral", RalScheduling, RalWrapper, device_custom_pass=RalGraphPass())
    from torch_fl.jit.inductor_joint import install

    install()  # joint-graph pass: a constant causal mask as is_causal (docs/compile.md)
    register_device_op_overrides("ral", CpuDeviceOpOverrides())
    # Dynamo's device interface for "ral" is the device layer's (device/dynamo_interface.py).
