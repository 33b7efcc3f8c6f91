"""A small, ordinary PyTorch training script: nothing in it knows about torch_fl.

It learns to tell whether a token sequence contains more 'up' than 'down' tokens, with a
tiny transformer encoder, a DataLoader, AdamW, a training loop and an evaluation.

    python examples/train_small.py                          # plain CPU
    python -m torch_fl.run --device ral:0 examples/train_small.py   # same file, on ral:0
"""

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VOCAB, SEQ = 16, 24


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    y = ((x == 1).sum(1) > (x == 2).sum(1)).long()
    return TensorDataset(x, y)


class Classifier(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, d)
        self.pos = nn.Parameter(torch.randn(SEQ, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        h = self.enc(self.emb(x) + self.pos)
        return self.head(h.mean(1))


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            pred = model(x).argmax(-1)
            correct += (pred == y).sum().item()
            total += y.numel()
    model.train()
    return correct / total


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    train = DataLoader(make_data(512, 1), batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(2))
    test = DataLoader(make_data(256, 3), batch_size=128)
    model = Classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(args.epochs):
        total = 0.0
        for x, y in train:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            total += loss.item()
        print(f"epoch {epoch} loss {total / len(train):.6f} test_acc {evaluate(model, test):.4f}")
    print(f"final_weight_checksum {sum(p.double().sum().item() for p in model.parameters()):.6f}")


if __name__ == "__main__":
    main()
