"""The one benchmark model every case shares: GPT-2 with 4 layers, 256 wide, batch 4x128."""

from __future__ import annotations

import torch

SHAPE = dict(n_layer=4, n_embd=256, n_head=4, vocab_size=2048, n_positions=256)
BATCH, SEQ = 4, 128


def gpt2(seed: int = 0, *, head: bool = True) -> torch.nn.Module:
    """The benchmark GPT-2, random init from `seed`, dropout off; `head=False` drops the LM head."""
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        **SHAPE, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(cfg) if head else transformers.GPT2Model(cfg)


def gpt2_ids(seed: int = 1) -> torch.Tensor:
    """A fixed batch of token ids for the benchmark GPT-2."""
    return torch.randint(0, SHAPE["vocab_size"], (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))
