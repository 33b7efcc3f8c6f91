"""Recurrent case (issue 37), each side in its own fresh process (procs.py):

- `lstm_train`: one training step of pytorch/examples' word_language_model LSTM (Wikitext-2
  vocabulary of 33278 words, embedding and 2 LSTM layers of 200, dropout 0.2, batch 20,
  bptt 35; cross-entropy over the decoder; hidden state detached between batches; gradient
  clipping at 0.25 and the example's plain SGD update, lr 20).
- `gru_train`: the same step with the example's GRU model (`--model GRU`).

`benchmarks/run.py --only lstm_train gru_train [--device ral:1]` runs them on ral:0 (or the
OpenCL device). To time the decomposed cells instead of the fused vendor kernels, force the
four cell ops to the decomp tier in the environment, e.g.
`TORCH_FL_OP_aten_thnn_fused_lstm_cell=decomp TORCH_FL_OP_aten_thnn_fused_lstm_cell_backward_impl=decomp`
(`TORCH_FL_OP_aten_thnn_fused_gru_cell`, `..._gru_cell_backward` for the GRU).

Sides: "cpu" (plain PyTorch), "to" (`model.to(dev)`), "mode" (`ral_mode(dev)`, clipping and
the update on the CPU parameters where they live).
"""

from __future__ import annotations

import os

import torch
from torch import nn

DEV = os.environ.get("BENCH_DEVICE", "ral:0")
VOCAB, WIDTH, LAYERS, BATCH, BPTT = 33278, 200, 2, 20, 35


class LanguageModel(nn.Module):
    """word_language_model's RNNModel('LSTM' or 'GRU', ...) without weight tying."""

    def __init__(self, cell="LSTM"):
        super().__init__()
        self.drop = nn.Dropout(0.2)
        self.encoder = nn.Embedding(VOCAB, WIDTH)
        self.rnn = getattr(nn, cell)(WIDTH, WIDTH, LAYERS, dropout=0.2)
        self.decoder = nn.Linear(WIDTH, VOCAB)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
        return self.decoder(self.drop(out)).view(-1, VOCAB), hidden


def _train_side(style: str, cell: str = "LSTM"):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    model = LanguageModel(cell)
    x, y = torch.randint(0, VOCAB, (BPTT, BATCH), generator=g), torch.randint(0, VOCAB, (BPTT * BATCH,), generator=g)
    zeros = torch.zeros(LAYERS, BATCH, WIDTH)
    hidden = (zeros, zeros.clone()) if cell == "LSTM" else zeros
    loss_fn = nn.CrossEntropyLoss()
    if style == "to":
        import torch_fl  # noqa: F401

        model, x, y = model.to(DEV), x.to(DEV), y.to(DEV)
        hidden = tuple(h.to(DEV) for h in hidden) if cell == "LSTM" else hidden.to(DEV)
    state = {"hidden": hidden}

    def update():
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-20.0)

    def step():
        model.zero_grad()
        h = state["hidden"]
        h = tuple(t.detach() for t in h) if isinstance(h, tuple) else h.detach()
        out, h = model(x, h)
        loss_fn(out, y).backward()
        state["hidden"] = h
        return h

    if style == "mode":
        import torch_fl

        def fn_mode():
            with torch_fl.ral_mode(DEV):
                step()
            update()
            torch.ral.synchronize(DEV)

        return fn_mode, 1

    def fn():
        step()
        update()
        if style == "to":
            torch.ral.synchronize(DEV)

    return fn, 1


SIDES = {
    f"{cell.lower()}_train": {s: (lambda s=s, cell=cell: _train_side(s, cell)) for s in ("cpu", "to", "mode")}
    for cell in ("LSTM", "GRU")
}

# case -> (title, baseline side, per-side target (x of baseline) or None, repeats, unit)
SPEC = {
    "lstm_train": ("LSTM LM train step, 2x200, batch 20, bptt 35", "cpu", {"to": 1.0, "mode": None}, 5, "ms"),
    "gru_train": ("GRU LM train step, 2x200, batch 20, bptt 35", "cpu", {"to": None, "mode": None}, 5, "ms"),
}
