"""`scaled_dot_product_attention` on ral tensors: the fused ("overrideable") backend when the
call fits, PyTorch's own composite (math path) otherwise.

ATen asks a PrivateUse1 device for its SDPA backend through a C++ DispatchStub
(`_fused_sdp_choice_stub`), which Python cannot fill, so ral always got the math path (about
nine launches per attention). Registering SDPA itself for AutogradPrivateUse1 (it is
CompositeImplicitAutograd, so this replaces its decomposition for ral tensors only) makes
the same choice in Python (under inference_mode the autograd keys are skipped and the op
reaches RalTensor's dispatcher, where dispatch/special.py calls `sdpa` too): `_scaled_dot_product_fused_attention_overrideable` carries
PyTorch's own autograd formula (its `_backward` op), and tiers/attention.py implements both.
"""

from __future__ import annotations

import torch

from torch_fl.device.compat import run_untraced
from torch_fl.tiers.attention import fused_choice

aten = torch.ops.aten
_lib = None
_SDPA = aten.scaled_dot_product_attention.default


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if fused_choice(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        # A bool mask (True = attend) goes to the kernel as is; the backward converts it.
        return aten._scaled_dot_product_fused_attention_overrideable.default(
            query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale
        )[0]
    return _SDPA.decompose(
        query,
        key,
        value,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=is_causal,
        scale=scale,
        enable_gqa=enable_gqa,
    )


def register() -> None:
    """Register the ral SDPA kernel once per process."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    _lib.impl("scaled_dot_product_attention", sdpa, "AutogradPrivateUse1")
    run_untraced(sdpa)  # entered from C++; Dynamo traced it between graph breaks (nn.Transformer)
