"""The benchmark models: GPT-2 with 4 layers, 256 wide, batch 4x128 (every GPT-2 case but
`decode`), and GPT-2 small (12 layers, 768 wide) for greedy decoding at batch 1."""

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


SMALL = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
PROMPT, NEW_TOKENS, EOS = 16, 16, 50256


def gpt2_small(seed: int = 0) -> torch.nn.Module:
    """GPT-2 small's shape (12x768, vocab 50257) with its LM head, random init from `seed`, eval mode."""
    import transformers

    torch.manual_seed(seed)
    # GPT-2's own end-of-text id: generate() checks it every token (EosTokenCriteria), as a
    # user's decoding does; the fixed prompt and seed never produce it within NEW_TOKENS.
    cfg = transformers.GPT2Config(**SMALL, bos_token_id=EOS, eos_token_id=EOS, pad_token_id=EOS)
    return transformers.GPT2LMHeadModel(cfg).eval()


def prompt_ids(seed: int = 1) -> torch.Tensor:
    """One fixed prompt of PROMPT token ids (batch 1) for the decoding case."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, EOS, (1, PROMPT), generator=g)
