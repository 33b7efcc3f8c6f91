"""Small modules shared by the torch.compile tests."""

from __future__ import annotations

import torch


def host_waits():
    """A list that receives the reason of every host wait on a device, and its remover."""
    from torch_fl.device import sync

    seen: list = []
    sync.SYNC_OBSERVERS.append(lambda dev, reason: seen.append(reason))
    return seen, lambda: sync.SYNC_OBSERVERS.pop()


class Block(torch.nn.Module):
    """Linear, pointwise chain, layer norm, softmax: small but touches every tier."""

    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.ln = torch.nn.LayerNorm(16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = self.l1(x)
        h = torch.nn.functional.gelu(h) * torch.sigmoid(h) + 0.5 * h
        return self.l2(self.ln(h)).softmax(-1)
