"""Convolutional cases (issue 37), each side in its own fresh process (procs.py):

- `cnn_train`: a small ResNet-style CNN training step (batch 32, 3x32x32; conv + BatchNorm +
  ReLU + max-pool + two residual blocks; cross-entropy; SGD with momentum 0.9);
- `resnet18_forward`, `resnet18_train`: a ResNet-18-shaped model written here (torchvision
  does not install): the ImageNet stem (7x7/2 conv, 3x3/2 max-pool), BasicBlocks [2, 2, 2, 2]
  of widths 64-512, global average pool, 10 classes; batch 8 of 3x64x64 to keep a sample
  within seconds on a 2-core machine;
- `upsample3d`: trilinear 3-d upsampling x2, forward and backward, on a [4, 8, 16, 32, 32]
  volume;
- `cnn_train_bf16`, `cnn_train_fp16`: `cnn_train` under autocast to bfloat16 / float16
  (`torch.autocast("cpu")` on the CPU side and inside `ral_mode`, `torch.autocast("ral")` for
  `model.to`): mixed-precision training as a user writes it. The baseline is CPU's float32
  step ("cpu_fp32", what the user would run on this host); CPU running the same autocast
  program is a row of its own.

Sides: "cpu" (plain PyTorch), "to" (`model.to(dev)`), "mode" (`ral_mode(dev)`, the optimizer
stepping the CPU parameters where they live).

`python benchmarks/bench_cnn.py --device ral:1` replays each aten call of one `cnn_train` step
alone on CPU and on the device in one process (`replay_ops`): where the step goes, per op.
"""

from __future__ import annotations

import os

import torch
from common import autocast
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


def _train_side(make, batch: int, size: int, amp: torch.dtype | None = None):
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
                with torch_fl.ral_mode(DEV), autocast("cpu", amp):
                    loss_fn(model(x), y).backward()
                opt.step()  # CPU parameters: the optimizer runs where they live
                torch.ral.synchronize(DEV)

            return fn_mode, 1

        def fn():
            opt.zero_grad()
            with autocast("ral" if style == "to" else "cpu", amp):
                loss = loss_fn(model(x), y)
            loss.backward()
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


def _upsample3d_side(mode: str):
    """Forward and backward of `F.interpolate(x, scale_factor=2, mode=mode)` on a float32
    [4, 8, 16, 32, 32] volume (a 3-d decoder's upsampling), the input gradient read back."""

    def side(style: str):
        x0 = torch.randn(4, 8, 16, 32, 32, generator=torch.Generator().manual_seed(0))
        if style == "to":
            import torch_fl  # noqa: F401

            x0 = x0.to(DEV)
        ctx = None
        if style == "mode":
            import torch_fl

            ctx = torch_fl.ral_mode

        def step():
            x = x0.detach().requires_grad_()
            nn.functional.interpolate(x, scale_factor=2, mode=mode).sum().backward()
            return x.grad

        def fn():
            if ctx is None:
                step().cpu()
            else:
                with ctx(DEV):
                    grad = step()
                grad.sum().item()  # a CPU read: the mode's result comes home

        return fn, 1

    return side


def _sides(make, baseline=None):
    sides = {s: (lambda s=s: make(s)) for s in ("cpu", "to", "mode")}
    return sides if baseline is None else {"cpu_fp32": lambda: baseline("cpu"), **sides}


SIDES = {
    "cnn_train": _sides(_train_side(small_cnn, 32, 32)),
    "resnet18_forward": _sides(_forward_side(resnet18, 8, 64)),
    "resnet18_train": _sides(_train_side(resnet18, 8, 64)),
    "upsample3d": _sides(_upsample3d_side("trilinear")),
    "cnn_train_bf16": _sides(_train_side(small_cnn, 32, 32, torch.bfloat16), _train_side(small_cnn, 32, 32)),
    "cnn_train_fp16": _sides(_train_side(small_cnn, 32, 32, torch.float16), _train_side(small_cnn, 32, 32)),
}

# case -> (title, baseline side, per-side target (x of baseline) or None, repeats, unit)
SPEC = {
    "cnn_train": ("small CNN train step, batch 32x3x32x32", "cpu", {"to": 1.0, "mode": 1.0}, 5, "ms"),
    "resnet18_forward": ("ResNet-18 shape forward, batch 8x3x64x64", "cpu", {"to": None, "mode": None}, 5, "ms"),
    "resnet18_train": ("ResNet-18 shape train step, batch 8x3x64x64", "cpu", {"to": None, "mode": None}, 3, "ms"),
    "upsample3d": ("trilinear x2 fwd+bwd, 4x8x16x32x32", "cpu", {"to": None, "mode": None}, 5, "ms"),
    "cnn_train_bf16": ("small CNN train step, autocast bfloat16", "cpu_fp32", {}, 5, "ms"),
    "cnn_train_fp16": ("small CNN train step, autocast float16", "cpu_fp32", {}, 5, "ms"),
}


def replay_ops(dev: str, reps: int = 5, amp: torch.dtype | None = None) -> list[tuple[str, int, float, float]]:
    """Each aten call of one cnn_train step (under CPU autocast to `amp` when given: the calls
    then carry the 16-bit operands) replayed alone on CPU and on `dev`, best of `reps` with a
    synchronize around it: (op, calls, CPU seconds, dev seconds) per op, in one process, so a
    busy machine shifts both sides alike (a load-robust view of where the step goes)."""
    import time

    from torch.utils._python_dispatch import TorchDispatchMode

    import torch_fl  # noqa: F401

    calls = []

    def snap(a):
        if isinstance(a, torch.Tensor):
            return a.detach().clone()
        return type(a)(snap(x) for x in a) if isinstance(a, (list, tuple)) else a

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            calls.append((func, snap(list(args)), {k: snap(v) for k, v in kwargs.items()}))
            return func(*args, **kwargs)

    torch.manual_seed(0)
    model, (x, y) = small_cnn(), _data(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    with Record():
        with autocast("cpu", amp):
            loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    def move(a, d):
        if isinstance(a, torch.Tensor):
            return a.to(d)
        return type(a)(move(v, d) for v in a) if isinstance(a, (list, tuple)) else a

    totals: dict[str, list] = {}
    for func, args, kwargs in calls:
        name = func.overloadpacket.__name__
        best = []
        for d in ("cpu", dev):
            a, k, t = move(args, d), move(kwargs, d), float("inf")
            for _ in range(reps):
                if d != "cpu":
                    torch.ral.synchronize(d)
                t0 = time.perf_counter()
                func(*a, **k)
                if d != "cpu":
                    torch.ral.synchronize(d)
                t = min(t, time.perf_counter() - t0)
            best.append(t)
        e = totals.setdefault(name, [0, 0.0, 0.0])
        e[0], e[1], e[2] = e[0] + 1, e[1] + best[0], e[2] + best[1]
    return sorted(((n, c, a, b) for n, (c, a, b) in totals.items()), key=lambda r: -r[3])


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="cnn_train's ops replayed one by one, CPU vs a ral device")
    ap.add_argument("--device", default=DEV)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--amp", choices=["bf16", "fp16"], help="record the step under CPU autocast to this type")
    ns = ap.parse_args()
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(ns.amp)
    rows = replay_ops(ns.device, ns.reps, amp)
    for name, n, cpu, other in rows[: ns.top]:
        print(f"{name:36s} x{n:<3d} cpu {cpu * 1e3:8.2f} ms  {ns.device} {other * 1e3:8.2f} ms  {other / cpu:5.2f}x")
    cpu_t, dev_t = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"{'all ops':36s}      cpu {cpu_t * 1e3:8.2f} ms  {ns.device} {dev_t * 1e3:8.2f} ms  {dev_t / cpu_t:5.2f}x")
