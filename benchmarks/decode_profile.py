"""Where a GPT-2 small greedy decoding token goes on a ral device (the `decode` case's model).

One process, so only load-robust quantities are printed: routed ops per token by tier (an
op observer, which turns the fast paths off, so it counts without timing), the dispatching
thread's CPU time per token (time.thread_time: kernels queued on the plugin's worker are not
in it; host work, inline kernels and the caller's share of copies are), every thread's CPU
and run-queue wait per token (/proc schedstat: how much the kernels' threads and the Python
thread took cores from each other), ral_mode's uploads
per `generate` block, its per-call cost alone (thread CPU of a second generate in one block,
and its calls per token), and the GEMV sequence of one token (48 addmm + the LM head) timed
alone. Wall-clock ratios come from `benchmarks/run.py --only decode` (fresh processes).

    PYTHONPATH=. .venv/bin/python benchmarks/decode_profile.py [--device ral:0] [--style to|mode]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import time

import torch
from common import thread_times
from models import NEW_TOKENS, gpt2_small, prompt_ids


def _generate(model, ids, style, dev):
    import torch_fl

    ctx = torch_fl.ral_mode(dev) if style == "mode" else contextlib.nullcontext()
    with torch.no_grad(), ctx:
        out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
    torch.ral.synchronize()
    return out


def _op_counts(run) -> collections.Counter:
    from torch_fl.dispatch import entry

    counts = collections.Counter()

    def observe(op, tier, dev, t0, t1, args):
        counts[(op, tier)] += 1

    entry.OBSERVERS.append(observe)
    try:
        run()
    finally:
        entry.OBSERVERS.remove(observe)
    return counts


def _gemv_sequence(model, dev, reps=5):
    """ms for one token's 48 projections and the LM head, queued back to back, each side."""
    mats = [
        (c.bias, c.weight)
        for b in model.transformer.h
        for c in (b.attn.c_attn, b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj)
    ]
    head = model.lm_head.weight
    out = {}
    for side in ("cpu", dev):
        ms = [(b.to(side), w.to(side)) for b, w in mats] if side != "cpu" else mats
        hd, x = head.to(side), torch.randn(1, 3072).to(side)
        times = []
        with torch.no_grad():
            for _ in range(reps + 1):
                t = time.perf_counter()
                for b, w in ms:
                    torch.addmm(b, x[:, : w.shape[0]], w)
                torch.nn.functional.linear(x[:, :768], hd)
                if side != "cpu":
                    torch.ral.synchronize()
                times.append((time.perf_counter() - t) * 1e3)
        out[side] = statistics.median(times[1:])
    return out


def _thread_times() -> dict:
    """{thread name: [CPU s, run-queue wait s]}, threads of one name summed; the Python
    thread is "main"."""
    import threading

    me, out = str(threading.get_native_id()), {}
    for (tid, name), (cpu, queued) in thread_times().items():
        acc = out.setdefault("main" if tid == me else name, [0.0, 0.0])
        acc[0] += cpu
        acc[1] += queued
    return out


def _print_thread_times(before: dict, after: dict, tokens: int) -> None:
    """Per token, each thread's CPU and its wait in the run queue (runnable, no core free):
    on a 2-core machine the Python thread's queue wait is time the kernels' threads took."""
    rows = []
    for name, (cpu, queued) in after.items():
        c0, q0 = before.get(name, (0, 0))
        cpu_ms, queued_ms = (cpu - c0) / tokens * 1e3, (queued - q0) / tokens * 1e3
        if cpu_ms + queued_ms >= 0.2:
            rows.append(f"{name} {cpu_ms:.1f} / {queued_ms:.1f}")
    if rows:
        print("per token, thread CPU / run-queue wait (ms): " + ", ".join(rows))


def _mode_without_uploads(model, ids, dev):
    """(median thread CPU ms per token, ral_mode __torch_function__ calls per token) of
    generates after the first in one ral_mode block: the mode's per-call cost without the
    uploads every block starts with."""
    import torch_fl
    from torch_fl.mode import ral_mode

    calls = [0]
    inner = ral_mode.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        calls[0] += 1
        return inner(self, func, types, args, kwargs)

    cpu_ms = []
    with torch.no_grad(), torch_fl.ral_mode(dev):
        model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)  # the block's uploads
        for _ in range(3):
            torch.ral.synchronize()
            t = time.thread_time()
            model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
            torch.ral.synchronize()
            cpu_ms.append((time.thread_time() - t) / NEW_TOKENS * 1e3)
        ral_mode.__torch_function__ = counted
        try:
            model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        finally:
            ral_mode.__torch_function__ = inner
    return statistics.median(cpu_ms), calls[0] / NEW_TOKENS


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="ral:0")
    p.add_argument("--style", choices=["to", "mode"], default="to")
    a = p.parse_args()
    import torch_fl.mode as mode

    model, ids = gpt2_small(), prompt_ids()
    if a.style == "to":
        model, ids = model.to(a.device), ids.to(a.device)

    def run():
        return _generate(model, ids, a.style, a.device)

    run()
    counts = _op_counts(run)
    total = sum(counts.values())
    print(f"routed ops per token: {total / NEW_TOKENS:.1f} (views not counted)")
    for (op, tier), n in counts.most_common(12):
        print(f"  {n / NEW_TOKENS:7.2f}  {op}  [{tier}]")
    cpu_ms = []
    before = _thread_times()
    for _ in range(3):
        t = time.thread_time()
        run()
        cpu_ms.append((time.thread_time() - t) / NEW_TOKENS * 1e3)
    print(f"dispatching thread CPU per token: {statistics.median(cpu_ms):.2f} ms (median of 3 generates)")
    _print_thread_times(before, _thread_times(), 3 * NEW_TOKENS)
    if a.style == "mode":
        before = mode.stats["uploads"]
        run()
        print(f"ral_mode uploads per generate block: {mode.stats['uploads'] - before}")
        in_block, calls = _mode_without_uploads(model, ids, a.device)
        print(
            f"dispatching thread CPU per token, a second generate in the same block (no weight uploads): {in_block:.2f} ms"
        )
        print(f"ral_mode calls per token: {calls:.1f}")
    if a.style == "to":
        model = model.cpu()
    seq = _gemv_sequence(model, a.device)
    print(f"one token's GEMVs alone: cpu {seq['cpu']:.1f} ms, {a.device} {seq[a.device]:.1f} ms")


if __name__ == "__main__":
    main()
