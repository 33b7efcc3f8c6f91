"""torch.compile(backend="ral") against eager ral:0, each side in its own fresh process.

    python benchmarks/bench_compile.py [--rounds 3] [--backends ral,inductor]  # driver: alternates, median ratio
    python benchmarks/bench_compile.py --case mlp --mode ral  # one measurement (child)

Modes: `eager` (no compile), `ral` (torch.compile(backend="ral")), `inductor` (the default
backend: inductor's C++ kernels on ral:0's host-mapped buffers).

Cases: `gpt2` (the benchmark GPT-2, 4 layers x 256, batch 4x128: forward, backward, AdamW) and
`mlp` (a pointwise-heavy MLP block: two linears around a chain of activations, fwd+bwd).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _mlp():
    import torch

    class Block(torch.nn.Module):
        def __init__(self, d=512):
            super().__init__()
            self.l1 = torch.nn.Linear(d, 2 * d)
            self.l2 = torch.nn.Linear(2 * d, d)

        def forward(self, x):
            h = self.l1(x)
            h = torch.nn.functional.gelu(h, approximate="tanh") * torch.sigmoid(h) + 0.5 * h
            h = h * torch.tanh(h) - torch.exp(-h * h) * 0.25 + h.abs() * 0.1
            return self.l2(h) + x

    torch.manual_seed(0)
    return Block(), torch.randn(256, 512)


def _pointwise_mlp():
    import torch

    class GatedBlock(torch.nn.Module):
        """A SwiGLU-style block on narrow features: three small Linears, many tokens, and a
        gating/activation chain on the [tokens, hidden] activations between them."""

        def __init__(self, d=16, hidden=128):
            super().__init__()
            self.gate = torch.nn.Linear(d, hidden)
            self.up = torch.nn.Linear(d, hidden)
            self.down = torch.nn.Linear(hidden, d)

        def forward(self, x):
            g, u = self.gate(x), self.up(x)
            a = torch.nn.functional.silu(g) * u
            a = a * torch.sigmoid(1.702 * a) + 0.1 * torch.tanh(u)
            a = torch.nn.functional.gelu(a, approximate="tanh") * torch.exp(-0.5 * u * u) + a
            return self.down(a) + x

    torch.manual_seed(0)
    return GatedBlock(), torch.randn(8192, 16)


CASES = {"mlp": _mlp, "pointwise_mlp": _pointwise_mlp}


def child(case: str, mode: str, steps: int) -> float:
    """Median seconds per training step of one configuration."""
    import torch

    import torch_fl  # noqa: F401

    if mode == "ral":
        import torch_fl.jit.compile_backend  # noqa: F401
    if case == "gpt2":
        sys.path.insert(0, str(ROOT))
        from benchmarks.bench_user import _ids, gpt2

        model = gpt2().train().to("ral:0")
        model.config.use_cache = False  # training; the KV cache builds tensors with torch.tensor(device=)
        ids = _ids().to("ral:0")
        inputs = dict(input_ids=ids, labels=ids)
    else:
        model, x = CASES[case]()
        model = model.to("ral:0")
        inputs = dict(x=x.to("ral:0"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fn = model if mode == "eager" else torch.compile(model, backend=mode)

    def step():
        opt.zero_grad()
        out = fn(**inputs)
        loss = out.loss if hasattr(out, "loss") else out.pow(2).mean()
        loss.backward()
        opt.step()
        torch.ral.synchronize()
        return loss

    for _ in range(3):
        step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=["gpt2", *CASES])
    ap.add_argument("--mode", choices=["eager", "ral", "inductor"])
    ap.add_argument("--backends", default="ral", help="compiled modes the driver compares with eager")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.case and a.mode:
        print(f"{child(a.case, a.mode, a.steps):.6f}")
        return
    backends = [b for b in a.backends.split(",") if b]
    for case in (a.case,) if a.case else (*CASES, "gpt2"):
        ratios = {b: [] for b in backends}
        runs = {m: [] for m in ["eager", *backends]}
        for _ in range(a.rounds):
            got = {}
            for mode in ("eager", *backends):
                out = subprocess.run(
                    [sys.executable, __file__, "--case", case, "--mode", mode, "--steps", str(a.steps)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                got[mode] = float(out.stdout.strip().splitlines()[-1])
                runs[mode].append(got[mode])
            for b in backends:
                ratios[b].append(got["eager"] / got[b])
        for b in backends:
            print(
                f"{case}: eager {statistics.median(runs['eager']) * 1e3:.1f} ms, {b} backend "
                f"{statistics.median(runs[b]) * 1e3:.1f} ms, median speedup {statistics.median(ratios[b]):.2f}x "
                f"(rounds {', '.join(f'{r:.2f}' for r in ratios[b])})"
            )


if __name__ == "__main__":
    main()
