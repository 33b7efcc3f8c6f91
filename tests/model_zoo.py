"""Tiny, randomly initialised HF transformers models (nothing is downloaded) and their inputs."""

from __future__ import annotations

import torch
import transformers as T

VOCAB = 96
SEQ = 12
BATCH = 2


def _lm(cfg_cls, model_cls, **kw):
    def build():
        return model_cls(cfg_cls(**kw))

    return build


_DEC = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
)

# name -> (builder, input kind)
MODELS = {
    "gpt2": (
        _lm(
            T.GPT2Config,
            T.GPT2LMHeadModel,
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=0,
            eos_token_id=0,
        ),
        "causal",
    ),
    "bert": (
        _lm(T.BertConfig, T.BertForMaskedLM, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **_DEC),
        "mlm",
    ),
    "llama": (
        _lm(T.LlamaConfig, T.LlamaForCausalLM, num_key_value_heads=2, bos_token_id=0, eos_token_id=0, **_DEC),
        "causal",
    ),
    "t5": (
        _lm(
            T.T5Config,
            T.T5ForConditionalGeneration,
            vocab_size=VOCAB,
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            dropout_rate=0.0,
            decoder_start_token_id=0,
        ),
        "seq2seq",
    ),
    "vit": (
        _lm(
            T.ViTConfig,
            T.ViTForImageClassification,
            image_size=16,
            patch_size=4,
            num_channels=3,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            num_labels=5,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        ),
        "image",
    ),
    "roberta": (
        _lm(
            T.RobertaConfig,
            T.RobertaForMaskedLM,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            pad_token_id=1,
            **{**_DEC, "max_position_embeddings": 80},
        ),
        "mlm",
    ),
    "mistral": (
        _lm(T.MistralConfig, T.MistralForCausalLM, num_key_value_heads=2, bos_token_id=0, eos_token_id=0, **_DEC),
        "causal",
    ),
    "opt": (
        _lm(
            T.OPTConfig,
            T.OPTForCausalLM,
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            ffn_dim=64,
            num_attention_heads=4,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
            word_embed_proj_dim=32,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=1,
        ),
        "causal",
    ),
    "gpt_neox": (
        _lm(
            T.GPTNeoXConfig,
            T.GPTNeoXForCausalLM,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            bos_token_id=0,
            eos_token_id=0,
            **_DEC,
        ),
        "causal",
    ),
    "qwen2": (
        _lm(T.Qwen2Config, T.Qwen2ForCausalLM, num_key_value_heads=2, bos_token_id=0, eos_token_id=0, **_DEC),
        "causal",
    ),
}


def build(name: str, seed: int = 0) -> torch.nn.Module:
    """A fresh model in train() mode with deterministic random weights."""
    torch.manual_seed(seed)
    model = MODELS[name][0]()
    model.train()
    return model


def inputs(name: str, seed: int = 1) -> dict:
    """Model kwargs (CPU tensors) including labels, so outputs carry a loss."""
    g = torch.Generator().manual_seed(seed)
    kind = MODELS[name][1]
    if kind == "image":
        return {
            "pixel_values": torch.randn(BATCH, 3, 16, 16, generator=g),
            "labels": torch.randint(0, 5, (BATCH,), generator=g),
        }
    ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=g)
    if kind == "seq2seq":
        return {"input_ids": ids, "labels": torch.randint(2, VOCAB, (BATCH, SEQ // 2), generator=g)}
    return {"input_ids": ids, "attention_mask": torch.ones(BATCH, SEQ, dtype=torch.long), "labels": ids.clone()}


def to(batch: dict, dev) -> dict:
    """Move every tensor of a batch."""
    return {k: v.to(dev) for k, v in batch.items()}
