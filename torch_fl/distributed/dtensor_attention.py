"""DTensor sharding for ral's fused attention, so tensor-parallel attention runs as on CUDA.

On ral, `scaled_dot_product_attention` calls `_scaled_dot_product_fused_attention_overrideable`
(PrivateUse1's fused backend), for which DTensor has no sharding strategy: a model whose q/k/v
are DTensors (pytorch/examples' fsdp_tp_example.py: `ColwiseParallel(use_local_output=False)`)
raised NotImplementedError, while on CUDA DTensor shards flash attention over heads or batch.
This gives the overrideable forward and backward the same strategies as CUDA's flash attention
(all replicated, sharded on the head dimension, sharded on the batch dimension), through DTensor's
documented-experimental `register_sharding`. Installed only once a program imports
`torch.distributed.tensor`.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _bias_placement(bias, query, dim: int):
    """Where a mask goes when q/k/v are sharded on `dim`: sharded alike where it has that axis in
    full, replicated where it broadcasts over it; None when there is no mask."""
    from torch.distributed.tensor import Replicate, Shard

    if bias is None:
        return None
    shape = tuple(bias.shape)
    axis = dim - (len(query.shape) - len(shape))  # bias broadcasts from the right
    if axis >= 0 and shape[axis] == query.shape[dim]:
        return Shard(axis)
    return Replicate()


def _forward_strategies(query, key, value, attn_bias=None, *args, **kwargs):
    """[(outputs, inputs)]: output, logsumexp, cum_seq_q/k (undefined), max_q/k (ints),
    philox seed/offset, debug mask (undefined); inputs q, k, v, mask."""
    from torch.distributed.tensor import Replicate, Shard

    R = Replicate()
    out = [([R, R, None, None, None, None, R, R, None], [R, R, R, None if attn_bias is None else R])]
    for dim in (1, 0):  # heads (tensor parallelism), then batch
        S = Shard(dim)
        out.append(([S, S, None, None, None, None, R, R, None], [S, S, S, _bias_placement(attn_bias, query, dim)]))
    return out


def _backward_strategies(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, *rest, **kwargs):
    """[(outputs, inputs)]: grad q/k/v/mask; inputs grad_out, q, k, v, mask, the saved output and
    logsumexp, then the forward's undefined/int/scalar extras (seed and offset replicated)."""
    from torch.distributed.tensor import Replicate, Shard

    R = Replicate()
    tail = [None, None, None, None, None, None, R, R]  # cum_seq_q/k, max_q/k, dropout, is_causal, seed, offset
    strategies = []
    for S in (R, Shard(1), Shard(0)):
        mask = None if attn_bias is None else (R if S is R else _bias_placement(attn_bias, query, S.dim))
        strategies.append(([S, S, S, mask], [S, S, S, S, mask, None, S, S, *tail]))
    return strategies


def install() -> None:
    """Register the strategies with DTensor (called once `torch.distributed.tensor` is imported)."""
    from torch.distributed.tensor.experimental import register_sharding

    register_sharding(aten._scaled_dot_product_fused_attention_overrideable.default)(_forward_strategies)
    register_sharding(aten._scaled_dot_product_fused_attention_overrideable_backward.default)(_backward_strategies)
