"""Inductor's joint-graph pre-pass for ral graphs (`joint_custom_pre_pass`): what runs on the
joint forward+backward graph before inductor's partitioner cuts it, keyed like the device pass.

It holds `causal_mask` (a constant causal mask as `is_causal=True`) and
`compile_backend.save_opencl_math` (OpenCL's unfused math calls saved for the backward, not
recomputed: a no-op on host devices).
Installed by `inductor_device.register()`; the pass's `uuid()` is `inductor_key.digest()`, so
inductor's FX-graph and AOT caches see its sources and switch (`TORCH_FL_CAUSAL_MASK`).
"""

from __future__ import annotations

import torch

from torch_fl.jit import causal_mask, compile_backend


def install() -> bool:
    """Make `causal_mask.rewrite` inductor's `joint_custom_pre_pass` (next to a user's own
    where this torch takes a list of passes; a user's single pass is kept and ours left out).
    Its `uuid()` is torch_fl's cache key component (jit sources, `TORCH_FL_CAUSAL_MASK`)."""
    import torch._inductor.config as iconfig
    from torch._inductor import custom_graph_pass as cgp

    class RalCausalMaskPass(cgp.CustomGraphPass):
        """Inductor's joint-graph pass for ral graphs: constant causal masks as is_causal."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            causal_mask.rewrite(graph)
            compile_backend.save_opencl_math(graph)

        def uuid(self) -> str:
            from torch_fl.jit.inductor_key import digest

            return digest()

    current = iconfig.joint_custom_pre_pass
    if current is None:
        iconfig.joint_custom_pre_pass = RalCausalMaskPass()
        return True
    if not hasattr(cgp, "get_custom_graph_passes"):
        return False  # this torch runs one joint pass: the user's
    passes = cgp.get_custom_graph_passes(current)
    if any(type(p).__name__ == "RalCausalMaskPass" for p in passes):
        return True
    iconfig.joint_custom_pre_pass = [*passes, RalCausalMaskPass()]
    return True
