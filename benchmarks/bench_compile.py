"""torch.compile(backend="ral") against eager ral:0, each side in its own fresh process.

    python benchmarks/bench_compile.py [--rounds 3]          # driver: alternates, median ratio
    python benchmarks/bench_compile.py --case mlp --mode ral  # one measurement (child)

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
        model, x = _mlp()
        model = model.to("ral:0")
        inputs = dict(x=x.to("ral:0"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fn = torch.compile(model, backend="ral") if mode == "ral" else model

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
    ap.add_argument("--case", choices=["gpt2", "mlp"])
    ap.add_argument("--mode", choices=["eager", "ral"])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    if a.case and a.mode:
        print(f"{child(a.case, a.mode, a.steps):.6f}")
        return
    for case in (a.case,) if a.case else ("mlp", "gpt2"):
        ratios, runs = [], {"eager": [], "ral": []}
        for _ in range(a.rounds):
            got = {}
            for mode in ("eager", "ral"):
                out = subprocess.run(
                    [sys.executable, __file__, "--case", case, "--mode", mode, "--steps", str(a.steps)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                got[mode] = float(out.stdout.strip().splitlines()[-1])
                runs[mode].append(got[mode])
            ratios.append(got["eager"] / got["ral"])
        print(
            f"{case}: eager {statistics.median(runs['eager']) * 1e3:.1f} ms, ral backend "
            f"{statistics.median(runs['ral']) * 1e3:.1f} ms, median speedup {statistics.median(ratios):.2f}x "
            f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})"
        )


if __name__ == "__main__":
    main()
