"""`torch.compile(model, backend="ral")`: AOT autograd with the jit tier's fusion.

The forward and backward graphs AOT autograd produces are partitioned (torch.fx's
CapabilityBasedPartitioner) into maximal regions of pointwise ops that have jit templates;
each region runs inside a `fuse()` region, so the chain becomes one generated kernel per
shape group, and every other node calls the router directly (vendor kernels first).

Registered with Dynamo when this module is imported, and through the `torch_dynamo_backends`
entry point (pyproject.toml) when torch_fl is installed, so `import torch_fl` stays free of
torch._dynamo's import cost.
"""

from __future__ import annotations

import torch

from torch_fl.jit.fusion import _fusible, fuse


class _FusedRegion(torch.nn.Module):
    """One partition of pointwise nodes, run inside a fusion region."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__()
        self.gm = gm

    def forward(self, *args):
        """Run the partition with its pointwise chain fused."""
        with fuse():
            return self.gm(*args)


def _supported(node) -> bool:
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and _fusible(node.target)


def partition(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Group fusible pointwise nodes into submodules that run as fusion regions."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class _Support(OperatorSupport):
        def is_node_supported(self, submodules, node) -> bool:
            return _supported(node)

    parts = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=False).propose_partitions()
    if not parts:
        return gm
    fused = CapabilityBasedPartitioner(gm, _Support(), allows_single_node_partition=False).fuse_partitions(parts)
    for node in fused.graph.nodes:
        if node.op == "call_module" and node.target.startswith("fused_"):
            setattr(fused, node.target, _FusedRegion(getattr(fused, node.target)))
    fused.recompile()
    return fused


def _compiler(gm: torch.fx.GraphModule, example_inputs):
    from torch._functorch.aot_autograd import make_boxed_func

    return make_boxed_func(partition(gm).forward)


def ral_backend(gm: torch.fx.GraphModule, example_inputs):
    """The Dynamo backend: AOT autograd, fw/bw graphs partitioned into fused pointwise regions."""
    from torch._dynamo.backends.common import aot_autograd

    return aot_autograd(fw_compiler=_compiler, bw_compiler=_compiler)(gm, example_inputs)


def register() -> None:
    """Make backend="ral" known to Dynamo (imports torch._dynamo)."""
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    if "ral" not in _COMPILER_FNS:
        register_backend(ral_backend, name="ral")


register()
