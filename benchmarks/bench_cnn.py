"""Convolutional cases (issue 37), each side in its own fresh process (procs.py):

- `cnn_train`: a small ResNet-style CNN training step (batch 32, 3x32x32; conv + BatchNorm +
  ReLU + max-pool + two residual blocks; cross-entropy; SGD with momentum 0.9);
- `resnet18_forward`, `resnet18_train`: a ResNet-18-shaped model written here (torchvision
  does not install): the ImageNet stem (7x7/2 conv, 3x3/2 max-pool), BasicBlocks [2, 2, 2, 2]
  of widths 64-512, global average pool, 10 classes; batch 8 of 3x64x64 to keep a sample
  within seconds on a 2-core machine.

Sides: "cpu" (plain PyTorch), "to" (`model.to(dev)`), "mode" (`ral_mode(dev)`, the optimizer
stepping the CPU parameters where they live).
"""

from __future__ import annotations

import os

import torch
from torch import nn

DEV = os.environ.get("BENCH_DEVICE", "ral:0")


class Block(nn.Module):
    """A ResNet BasicBlock: two 3x3 conv + BN, ReLU, identity or 1x1/stride shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + self.short(x))


def small_cnn() -> nn.Module:
    """The issue's small ResNet-style CNN for 3x32x32 inputs."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 1, 1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        Block(32, 32),
        nn.MaxPool2d(2),
        Block(32, 64, 2),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )


def resnet18(classes: int = 10) -> nn.Module:
    """ResNet-18's shape: ImageNet stem, BasicBlocks [2, 2, 2, 2] of 64/128/256/512."""
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


def _data(batch: int, size: int):
    g = torch.Generator().manual_seed(1)
    return torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g)


def _train_side(make, batch: int, size: int):
    def side(style: str):
        torch.manual_seed(0)
        model, (x, y) = make(), _data(batch, size)
        if style == "to":
            import torch_fl  # noqa: F401

            model, x, y = model.to(DEV), x.to(DEV), y.to(DEV)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        loss_fn = nn.CrossEntropyLoss()
        if style == "mode":
            import torch_fl

            def fn_mode():
                opt.zero_grad()
                with torch_fl.ral_mode(DEV):
                    loss_fn(model(x), y).backward()
                opt.step()  # CPU parameters: the optimizer runs where they live
                torch.ral.synchronize(DEV)

            return fn_mode, 1

        def fn():
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if style == "to":
                torch.ral.synchronize(DEV)

        return fn, 1

    return side


def _forward_side(make, batch: int, size: int):
    def side(style: str):
        torch.manual_seed(0)
        model, (x, _) = make().eval(), _data(batch, size)
        ctx = None
        if style == "to":
            import torch_fl  # noqa: F401

            model, x = model.to(DEV), x.to(DEV)
        elif style == "mode":
            import torch_fl

            ctx = torch_fl.ral_mode

        def fn():
            with torch.no_grad():
                if ctx is None:
                    model(x)
                else:
                    with ctx(DEV):
                        model(x)
            if style != "cpu":
                torch.ral.synchronize(DEV)

        return fn, 1

    return side


def _sides(make):
    return {s: (lambda s=s: make(s)) for s in ("cpu", "to", "mode")}


SIDES = {
    "cnn_train": _sides(_train_side(small_cnn, 32, 32)),
    "resnet18_forward": _sides(_forward_side(resnet18, 8, 64)),
    "resnet18_train": _sides(_train_side(resnet18, 8, 64)),
}

# case -> (title, baseline side, per-side target (x of baseline) or None, repeats, unit)
SPEC = {
    "cnn_train": ("small CNN train step, batch 32x3x32x32", "cpu", {"to": 1.0, "mode": 1.0}, 5, "ms"),
    "resnet18_forward": ("ResNet-18 shape forward, batch 8x3x64x64", "cpu", {"to": None, "mode": None}, 5, "ms"),
    "resnet18_train": ("ResNet-18 shape train step, batch 8x3x64x64", "cpu", {"to": None, "mode": None}, 3, "ms"),
}
