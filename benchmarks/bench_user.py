"""Speed as a user sees it (issue 13): every side in its own fresh process.

Sides named "cpu", "eager" and "empty_mode" never import torch_fl (a plain PyTorch user's
process); "to" runs the model moved with `.to(dev)`; "mode" runs CPU tensors under
`torch_fl.ral_mode(dev)`. Each ral sample ends with `torch.ral.synchronize(DEV)` (its own device: a bare call syncs the current one).
"""

from __future__ import annotations

import contextlib
import os

import torch
from common import Result, autocast
from models import NEW_TOKENS, gpt2, gpt2_small, prompt_ids
from models import gpt2_ids as _ids
from procs import alternate, median_ratio

DEV = os.environ.get("BENCH_DEVICE", "ral:0")


def _ral():
    import torch_fl

    return torch_fl


# ---------------------------------------------------------------- GPT-2-shaped model
def _forward(style: str):
    model, ids = gpt2().eval(), _ids()
    if style == "cpu":

        def fn():
            with torch.no_grad():
                model(ids)

        return fn, 1
    fl = _ral()
    if style == "to":
        model, ids = model.to(DEV), ids.to(DEV)

    def fn():
        if style == "to":
            with torch.no_grad():
                model(ids)
        else:
            with torch.no_grad(), fl.ral_mode(DEV):
                model(ids)
        torch.ral.synchronize(DEV)

    return fn, 1


def _train(style: str, amp: torch.dtype | None = None):
    """GPT-2 training step; under autocast to `amp` when given (`torch.autocast("cpu")` on CPU
    and inside `ral_mode`, `torch.autocast("ral")` for `model.to`)."""
    model, ids = gpt2().train(), _ids()
    if style == "to":
        _ral()
        model, ids = model.to(DEV), ids.to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        opt.zero_grad()
        with autocast("ral" if style == "to" else "cpu", amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()

    if style == "cpu":
        return step, 1
    if style == "to":

        def fn():
            step()
            torch.ral.synchronize(DEV)

        return fn, 1
    fl = _ral()

    def fn_mode():
        with fl.ral_mode(DEV):
            opt.zero_grad()
            with autocast("cpu", amp):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        opt.step()  # CPU parameters: the optimizer runs where they live
        torch.ral.synchronize(DEV)

    return fn_mode, 1


def _decode(style: str):
    """GPT-2 small greedy `generate`, batch 1: NEW_TOKENS new tokens per sample (timed per token)."""
    model, ids = gpt2_small(), prompt_ids()
    if style == "to":
        _ral()
        model, ids = model.to(DEV), ids.to(DEV)
    ctx = _ral().ral_mode(DEV) if style == "mode" else contextlib.nullcontext()
    # No min_new_tokens: its logits processor would add a vocabulary-wide isin and where per
    # token that a user's greedy decoding does not run. Every sample checks its length instead.
    kw = dict(max_new_tokens=NEW_TOKENS, do_sample=False)

    def fn():
        with torch.no_grad(), ctx:
            out = model.generate(ids, **kw)
        if style != "cpu":
            torch.ral.synchronize(DEV)
        if out.shape[-1] != ids.shape[-1] + NEW_TOKENS:
            raise RuntimeError(f"decode stopped early at {out.shape[-1]} tokens: the timing would not be per token")

    return fn, NEW_TOKENS


# ---------------------------------------------------------------- latency and micro cases
def _latency(style: str):
    """Linear(64,64) + sum + .item(): a small model whose every step reads one number back."""
    n = 200
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(64, 64), torch.randn(32, 64)
    if style in ("to", "to_empty_mode"):
        _ral()
        lin, x = lin.to(DEV), x.to(DEV)
    ctx = _ral().ral_mode(DEV) if style == "mode" else contextlib.nullcontext()
    if style == "to_empty_mode":
        # ral_mode's floor: model.to's per-op cost plus a TorchFunctionMode that does nothing
        ctx = _empty_function_mode()

    def fn():
        with torch.no_grad(), ctx:
            for _ in range(n):
                lin(x).sum().item()

    return fn, n


def _empty_function_mode():
    from torch.overrides import TorchFunctionMode

    class Empty(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return Empty()


def _add16(style: str):
    """One 16-float add per op, 2000 ops per sample."""
    n = 2000
    a, b = torch.randn(16), torch.randn(16)
    if style == "eager":

        def fn():
            for _ in range(n):
                torch.add(a, b)

        return fn, n
    if style == "empty_mode":
        from torch.utils._python_dispatch import TorchDispatchMode

        class Empty(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        def fn_empty():
            with Empty():
                for _ in range(n):
                    torch.add(a, b)

        return fn_empty, n
    if style == "empty_subclass":
        # The floor of any wrapper-subclass backend (DESIGN.md's RalTensor): PyTorch's entry
        # into __torch_dispatch__ plus one new output wrapper, and nothing else.
        class Floor(torch.Tensor):
            @staticmethod
            def __new__(cls, like):
                return torch.Tensor._make_wrapper_subclass(cls, like.shape, dtype=like.dtype)

            @classmethod
            def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
                return Floor(args[0])

        fa, fb = Floor(a), Floor(b)

        def fn_floor():
            for _ in range(n):
                torch.add(fa, fb)

        return fn_floor, n
    fl = _ral()
    if style == "to":
        a, b = a.to(DEV), b.to(DEV)

        def fn_to():
            for _ in range(n):
                torch.add(a, b)
            torch.ral.synchronize(DEV)

        return fn_to, n

    def fn_mode():
        with fl.ral_mode(DEV):
            for _ in range(n):
                torch.add(a, b)
        torch.ral.synchronize(DEV)

    return fn_mode, n


def _linear(style: str):
    """nn.Linear(1024, 1024) on batch 2048, 10 calls per sample."""
    n = 10
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(1024, 1024), torch.randn(2048, 1024)
    if style == "to":
        _ral()
        lin, x = lin.to(DEV), x.to(DEV)
    ctx = _ral().ral_mode(DEV) if style == "mode" else None

    def fn():
        with torch.no_grad():
            if ctx is None:
                for _ in range(n):
                    lin(x)
            else:
                with ctx:
                    for _ in range(n):
                        lin(x)
        if style != "cpu":
            torch.ral.synchronize(DEV)

    return fn, n


def _large_add(style: str):
    """4096x4096 float32 add with a fresh output, 3 per sample."""
    n = 3
    a, b = torch.randn(4096, 4096), torch.randn(4096, 4096)
    if style == "to":
        _ral()
        a, b = a.to(DEV), b.to(DEV)
    ctx = _ral().ral_mode(DEV) if style == "mode" else None

    def fn():
        if ctx is None:
            for _ in range(n):
                torch.add(a, b)
        else:
            with ctx:
                for _ in range(n):
                    torch.add(a, b)
        if style != "cpu":
            torch.ral.synchronize(DEV)

    return fn, n


def _sides(make, names):
    return {s: (lambda s=s: make(s)) for s in names}


SIDES = {
    "gpt2_forward": _sides(_forward, ["cpu", "to", "mode"]),
    "gpt2_train": _sides(_train, ["cpu", "to", "mode"]),
    # autocast bfloat16 against CPU's float32 step (what the user runs on this host without it)
    "gpt2_train_bf16": {
        "cpu_fp32": lambda: _train("cpu"),
        **_sides(lambda s: _train(s, torch.bfloat16), ["cpu", "to", "mode"]),
    },
    "decode": _sides(_decode, ["cpu", "to", "mode"]),
    "latency": _sides(_latency, ["cpu", "to", "to_empty_mode", "mode"]),
    "add16": _sides(_add16, ["eager", "empty_mode", "empty_subclass", "to", "mode"]),
    "linear": _sides(_linear, ["cpu", "to", "mode"]),
    "large_add": _sides(_large_add, ["cpu", "to", "mode"]),
}

# case -> (title, baseline side, per-side target (x of baseline) or None, repeats, unit)
SPEC = {
    "gpt2_forward": ("GPT-2 4x256 forward, batch 4x128", "cpu", {"to": 1.05, "mode": 1.05}, 7, "ms"),
    "gpt2_train": ("GPT-2 4x256 train step (AdamW)", "cpu", {"to": 1.10, "mode": 1.05}, 5, "ms"),
    "gpt2_train_bf16": ("GPT-2 4x256 train step, autocast bfloat16", "cpu_fp32", {}, 5, "ms"),
    "decode": ("GPT-2 small greedy decode, batch 1, per token", "cpu", {"to": 0.95, "mode": 0.95}, 3, "ms"),
    "latency": ("Linear(64,64)+sum+.item() loop", "cpu", {"to": 2.5, "mode": 2.5}, 7, "us"),
    "add16": ("16-float add, per op", "eager", {"to": None, "mode": None}, 7, "us"),
    "linear": ("Linear(1024,1024) batch 2048", "cpu", {"to": 1.00, "mode": 1.00}, 5, "ms"),
    "large_add": ("4096^2 add", "cpu", {"to": 0.30, "mode": 0.30}, 7, "ms"),
}
STYLE = {
    "to": "model.to",
    "mode": "ral_mode",
    "to_empty_mode": "model.to + empty TorchFunctionMode",
    "empty_mode": "empty mode",
    "empty_subclass": "empty wrapper subclass",
    "cpu": "CPU, same program",
}
SCALE = {"ms": 1e3, "us": 1e6}
# Targets that differ on the OpenCL device (ral:1), by case: they replace SPEC's targets there.
TARGETS_RAL1 = {
    "latency": {"to": 3.0, "mode": 3.0},
    "cnn_train": {"to": 2.0, "mode": 2.0},
    "decode": {"to": None, "mode": None},
}


def run_case(name: str, dev: str, rounds: int, module: str = "bench_user", sides=None, spec=None) -> list[Result]:
    """Alternating fresh processes for every side of `name`; one Result per non-baseline side.
    `module`, `sides`, `spec`: another case file's SIDES and SPEC (bench_cnn.py)."""
    os.environ["BENCH_DEVICE"] = dev
    title, base, targets, repeats, unit = (spec or SPEC)[name]
    if dev == "ral:1":
        targets = TARGETS_RAL1.get(name, targets)
    sides = list((sides or SIDES)[name])
    times = alternate(module, name, sides, rounds, repeats=repeats)
    med = {s: sorted(v)[len(v) // 2] for s, v in times.items()}
    k = SCALE[unit]
    rows = []
    for s in sides:
        if s == base:
            continue
        note = f"{med[s] * k:.1f} {unit} vs {med[base] * k:.1f} {unit}, {rounds} rounds"
        if name == "add16" and s == "to":
            note += f"; empty-subclass floor {med['empty_subclass'] * k:.1f} {unit}"
        if name == "add16" and s == "mode":
            note += f"; empty-mode floor {med['empty_mode'] * k:.1f} {unit}"
        if name == "latency" and s == "mode":
            note += f"; floor (model.to + empty mode) {med['to_empty_mode'] * k:.1f} {unit}"
        subject = "cpu" if s in ("empty_mode", "empty_subclass", "cpu") else dev
        row = Result(f"{title} [{STYLE[s]}]", subject, med[s], f"{base} (own process)", med[base], targets.get(s))
        row.note, row.rounds_ratio = note, median_ratio(times, s, base)
        rows.append(row)
    return rows


def cases_of(module: str, sides: dict, spec: dict) -> dict:
    """run.py's case table for a case file holding SIDES and SPEC (bench_cnn.py, bench_rnn.py)."""

    def case(name):
        return lambda dev: run_case(name, dev, _rounds(), module=module, sides=sides, spec=spec)

    return {name: case(name) for name in sides}


CASES = cases_of("bench_user", SIDES, SPEC)


def _rounds() -> int:
    import common

    return common.ROUNDS
