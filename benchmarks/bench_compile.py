"""torch.compile(backend="ral") against eager ral:0, each side in its own fresh process.

    python benchmarks/bench_compile.py [--rounds 3] [--backends ral,inductor]  # driver: alternates, median ratio
    python benchmarks/bench_compile.py --case mlp --mode ral  # one measurement (child)
    python benchmarks/bench_compile.py --case pointwise_mlp --shares  # kernel time per kind
    python benchmarks/bench_compile.py --case gpt2 --shares --backends inductor  # same, default backend
    python benchmarks/bench_compile.py --case gpt2 --shares --backends "" --amp bf16 --device ral:1  # eager autocast
    python benchmarks/bench_compile.py --case pointwise_mlp --amp bf16  # forward under autocast
    python benchmarks/bench_compile.py --case gpt2 --floor  # the most any backend could gain
    python benchmarks/bench_compile.py --case gpt2 --counts ral:1 --steps 2  # launches/syncs per step
    python benchmarks/bench_compile.py --case gpt2 --breakdown ral:0  # where a compiled step's time goes
    python benchmarks/bench_compile.py --case gpt2 --device ral:1 --backends inductor  # driver on ral:1
    python benchmarks/bench_compile.py --case gpt2 --kernels ral:1  # OpenCL kernel time per step, by kernel
    python benchmarks/bench_compile.py --case gpt2 --threads ral:1  # CPU per thread, plugin counters, per step

Modes: `eager` (no compile), `ral` (torch.compile(backend="ral")), `inductor` (the default
backend: inductor's C++ kernels on ral:0's host-mapped buffers; on ral:1 the graph as one
extern call through the ral backend's fused kernels).

Cases (each a training step: forward, backward, eager AdamW):
- `gpt2`: the benchmark GPT-2, 4 layers x 256, batch 4x128.
- `mlp`: two Linears (512 -> 1024 -> 512, 256 rows) around a chain of activations. Matmul-bound:
  of eager ral:0's kernel time, GEMMs are 68%, pointwise 19%, reductions 2%, AdamW 11%.
- `pointwise_mlp`: a SwiGLU-style block on narrow features (16 -> 128 -> 16, 8192 rows: gate,
  up, silu gate, sigmoid gate, tanh, gelu, gaussian; 5 transcendentals per element). Of eager
  ral:0's kernel time, pointwise ops are 76%, GEMMs 21%, reductions 3%, AdamW 0.4%.
Shares from `--shares` (every launch timed between two device syncs, min over 8 steps). Both
MLPs are checked against CPU float32 in tests/test_compile_ral_backend.py.
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


def _setup(case: str, device: str = "ral:0"):
    """(model on the device, its inputs, AdamW over its parameters) of a case."""
    import torch

    import torch_fl  # noqa: F401
    import torch_fl.jit.compile_backend  # noqa: F401 (registers backend="ral")

    if case == "gpt2":
        sys.path.insert(0, str(ROOT))
        from benchmarks.bench_user import _ids, gpt2

        model = gpt2().train().to(device)
        model.config.use_cache = False  # training; the KV cache builds tensors with torch.tensor(device=)
        ids = _ids().to(device)
        inputs = dict(input_ids=ids, labels=ids)
    else:
        model, x = CASES[case]()
        model = model.to(device)
        inputs = dict(x=x.to(device))
    return model, inputs, torch.optim.AdamW(model.parameters(), lr=1e-4)


_AMP = {"bf16": "bfloat16", "fp16": "float16"}


def _warm_step(case: str, device: str, mode: str):
    """A fresh model's training step, eager or compiled with backend `mode`, after 3 warm-up
    steps (compilation and first-call costs paid)."""
    import torch

    torch._dynamo.reset()
    model, inputs, opt = _setup(case, device)
    fn = model if mode == "eager" else torch.compile(model, backend=mode)
    step = _stepper(fn, inputs, opt)
    for _ in range(3):
        step()
    return step


def _stepper(fn, inputs, opt, between=None, amp=None):
    """One training step of `fn`, synchronized at its end (and before AdamW: `between`); the
    forward under torch.autocast("ral") when `amp` names a dtype."""
    import contextlib

    import torch

    def step():
        opt.zero_grad()
        with torch.autocast("ral", dtype=getattr(torch, _AMP[amp])) if amp else contextlib.nullcontext():
            out = fn(**inputs)
        loss = out.loss if hasattr(out, "loss") else out.pow(2).mean()
        loss.backward()
        if between is not None:
            between()
        opt.step()
        torch.ral.synchronize(loss.device)  # the step's device (a bare call syncs the current one)
        return loss

    return step


def child(case: str, mode: str, steps: int, amp: str | None = None, device: str = "ral:0") -> tuple[float, float]:
    """Median seconds per training step of one configuration: wall clock, and CPU time of the
    whole process (Python thread, stream worker and pool: what the step costs a loaded machine)."""
    import torch

    model, inputs, opt = _setup(case, device)
    fn = model if mode == "eager" else torch.compile(model, backend=mode)
    step = _stepper(fn, inputs, opt, amp=amp)
    for _ in range(3):
        step()
    walls, cpus = [], []
    for _ in range(steps):
        t, c = time.perf_counter(), time.process_time()
        step()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
_REDUCTIONS = ("sum", "mean", "softmax", "norm", "amax", "nll_loss", "layer_norm")


def _kind(name: str, phase: str) -> str:
    if phase == "opt":
        return "AdamW"
    if name.split(".")[0] in _GEMMS:
        return "GEMM"
    if name == "torch_fl.fused":
        return "fused"
    if name == "torch_fl::inductor_cpp":  # inductor's C++ kernels launched in stream order (ral:0)
        return "inductor C++"
    op = name.split("::")[-1].split(".")[0]
    return "reduction/norm" if any(r in op for r in _REDUCTIONS) else "pointwise/other"


def _time_launches() -> dict:
    """Install a timer around every device launch (before any launch plan captures rt_launch):
    while `record["on"]` is a list, each launch runs between two device syncs and appends
    (kernel name, `record["phase"]`, seconds)."""
    from torch_fl._native import ffi, lib
    from torch_fl.tiers import launch, vendor

    record, real = {"on": None, "phase": "model"}, lib.rt_launch

    def timed(dev, *args):
        if record["on"] is None:
            return real(dev, *args)
        lib.rt_device_synchronize(dev)
        t = time.perf_counter()
        status = real(dev, *args)
        lib.rt_device_synchronize(dev)
        record["on"].append((ffi.string(args[-1]).decode(), record["phase"], time.perf_counter() - t))
        return status

    class _Lib:
        def __getattr__(self, name):
            return timed if name == "rt_launch" else getattr(lib, name)

    vendor.rt_launch, launch.lib = timed, _Lib()
    return record


def shares(case: str, steps: int, amp: str | None = None, backends=("ral",), device: str = "ral:0") -> None:
    """Kernel time per kind of launch, eager against each compile backend (`--backends`,
    default "ral"; "" for eager alone) in one process: every launch timed between two device
    syncs (rt_launch wrapped), min over steps per launch. Load-independent enough to say what
    share of a step is GEMM, pointwise, inductor's C++ kernels or AdamW."""
    import torch

    record = _time_launches()
    model, inputs, opt = _setup(case, device)

    def between():
        torch.ral.synchronize(device)
        record["phase"] = "opt"

    fns = {"eager": model, **{b: torch.compile(model, backend=b) for b in backends if b}}
    steppers = {m: _stepper(f, inputs, opt, between, amp) for m, f in fns.items()}
    runs = {m: [] for m in fns}
    for i in range(steps + 2):  # two warm-up steps each (compiles, replays recorded)
        for m, step in steppers.items():
            record["on"], record["phase"] = [], "model"
            step()
            if i >= 2:
                runs[m].append(record["on"])
            record["on"] = None
    for m, rs in runs.items():
        kinds: dict = {}
        for i, (name, phase, _) in enumerate(rs[0]):
            k = kinds.setdefault(_kind(name, phase), [0, 0.0])
            k[0] += 1
            k[1] += min(r[i][2] for r in rs)
        total = sum(v[1] for v in kinds.values())
        print(f"{case} {m}: {len(rs[0])} launches, kernel time {total * 1e3:.2f} ms per step")
        for kind, (n, t) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
            print(f"  {kind:16s} {n:4d} launches {t * 1e3:8.2f} ms {100 * t / total:5.1f}%")


def _run_child(case: str, mode: str, steps: int, amp: str | None = None, device: str = "ral:0") -> list[float]:
    """(wall, CPU) seconds per step of one configuration, measured in a fresh process."""
    extra = (["--amp", amp] if amp else []) + ["--device", device]
    out = subprocess.run(
        [sys.executable, __file__, "--case", case, "--mode", mode, "--steps", str(steps), *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(v) for v in out.stdout.strip().splitlines()[-1].split()]


def floor(case: str, steps: int) -> None:
    """What no compile backend removes from a training step: its GEMMs and attention kernels
    (the same vendor and cpu-tier kernels serve eager and compiled steps) replayed back to
    back on fresh tensors of the recorded geometries, plus the eager AdamW step. Set against
    eager's wall time (its own process, like `--mode eager`), it bounds the speedup."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model, inputs, opt = _setup(case)
    step = _stepper(model, inputs, opt)
    calls = []

    class _Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name in _GEMMS or "attention" in func._schema.name:
                calls.append((func, [_geometry(a) for a in args], dict(kwargs or {})))
            return func(*args, **(kwargs or {}))

    step()
    with _Record():
        step()
    replay = [(f, [_fresh(a) for a in args], kw) for f, args, kw in calls]

    def kernels():
        for f, args, kw in replay:
            f(*args, **kw)
        torch.ral.synchronize()

    def adamw():
        opt.step()
        torch.ral.synchronize()

    got = {name: _median_time(fn, steps) for name, fn in (("kernels", kernels), ("adamw", adamw))}
    eager = _run_child(case, "eager", steps)[0]
    bound = eager / (got["kernels"] + got["adamw"])
    kinds = sorted({f._schema.name.split("::")[-1] for f, _, _ in calls})
    print(
        f"{case}: {len(calls)} GEMM/attention calls ({', '.join(kinds)}) {got['kernels'] * 1e3:.1f} ms + AdamW "
        f"{got['adamw'] * 1e3:.1f} ms per step; eager step {eager * 1e3:.1f} ms (own process): a compiled step "
        f"that spent nothing else would be {bound:.2f}x faster"
    )


def _median_time(fn, steps: int, warm: int = 3) -> float:
    """Median wall seconds of `fn()` over `steps` calls, after `warm` calls."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _geometry(a):
    import torch

    return (tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor) else a


def _fresh(a):
    """A device tensor of a recorded (shape, strides, dtype), or the argument as it was."""
    import torch

    if not (isinstance(a, tuple) and len(a) == 3 and isinstance(a[2], torch.dtype)):
        return a
    shape, stride, dt = a
    n = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 1
    base = torch.randn(n).to(dt) if dt.is_floating_point else torch.zeros(n, dtype=dt)
    return base.to("ral:0").as_strided(shape, stride)


def counts(case: str, device: str, steps: int, modes=("eager", "inductor", "ral")) -> None:
    """Per training step, counted (not timed, so a loaded machine gives the same answer):
    kernel launches by kind and host waits on the device by reason; eager against the default
    backend (inductor) and backend="ral"."""
    import collections

    import torch

    from torch_fl._native import ffi, lib
    from torch_fl.device import sync
    from torch_fl.tiers import launch, vendor

    rec = {"on": None, "phase": "model"}
    real_launch = lib.rt_launch

    def counted_launch(dev, *args):
        if rec["on"] is not None:
            rec["on"]["launch " + _kind(ffi.string(args[-1]).decode(), rec["phase"])] += 1
        return real_launch(dev, *args)

    class _Lib:
        def __getattr__(self, name):
            return counted_launch if name == "rt_launch" else getattr(lib, name)

    vendor.rt_launch, launch.lib = counted_launch, _Lib()  # before any plan captures rt_launch

    def on_sync(dev, reason):
        if rec["on"] is not None:
            rec["on"][f"sync ({reason})"] += 1

    sync.SYNC_OBSERVERS.append(on_sync)

    for mode in modes:
        torch._dynamo.reset()
        model, inputs, opt = _setup(case, device)
        fn = (
            model
            if mode == "eager"
            else torch.compile(model)
            if mode == "inductor"
            else torch.compile(model, backend="ral")
        )
        step = _stepper(fn, inputs, opt, amp=None)
        for _ in range(2):
            step()
        totals = collections.Counter()
        for _ in range(steps):
            rec["on"] = collections.Counter()
            step()
            totals.update(rec["on"])
            rec["on"] = None
        per = {k: v / steps for k, v in sorted(totals.items())}
        print(f"{case} on {device}, {mode}: " + ", ".join(f"{k} {v:g}" for k, v in per.items()))


_GEMM_CALLS = (*_GEMMS, "aten::_scaled_dot_product", "aten::scaled_dot_product")
_REGIONS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup", "CompiledFunctionBackward")


def _outermost(event, names: tuple) -> bool:
    """`event` is named by one of `names` and no event around it is."""
    return event.name.startswith(names) and not _inside(event, names)


def _inside(event, names) -> bool:
    """Some event around `event` starts with `names` (a prefix or a tuple of them)."""
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(names):
            return True
        parent = parent.cpu_parent
    return False


class _Timers:
    """Seconds and counts per label, summed over the calls they wrap."""

    def __init__(self):
        import collections

        self.on, self.t, self.n = False, collections.Counter(), collections.Counter()

    def wrap(self, label: str, fn, keep=lambda *a: True):
        """`fn`, timed under `label` while `on` (and `keep(*args)`)."""

        def timed(*args):
            if not (self.on and keep(*args)):
                return fn(*args)
            t = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.t[label] += time.perf_counter() - t
                self.n[label] += 1

        return timed


def breakdown(case: str, device: str, steps: int, mode: str = "inductor") -> None:
    """Where a compiled training step's time goes, in three passes over the same compiled step
    (one process): (1) its wall time; (2) torch.profiler's host intervals: Dynamo's guard check
    and its compiled region, AOT's forward/backward functions and the compiled graphs inside
    them (Dynamo/AOT host work = the first minus the last), inductor's C++ kernels (ral:0,
    `cpp.enable_kernel_profile`), the host's waits on the device (timed in torch_fl's sync
    calls); (3) every device launch timed between two syncs, by kind (GEMM/attention, fused,
    other pointwise, reductions, AdamW): kernel time with nothing overlapping it."""
    import torch
    import torch._inductor.config as iconfig
    from torch.profiler import ProfilerActivity, profile

    from torch_fl.device import sync

    waits = _Timers()
    real_sync = sync.lib

    class _SyncLib:
        def __getattr__(self, name):
            fn = getattr(real_sync, name)
            if name in ("rt_stream_synchronize", "rt_device_synchronize", "rt_event_synchronize"):
                return waits.wrap("wait", fn)
            if name == "rt_copy_d2h":
                return waits.wrap("wait", fn, keep=lambda *a: a[-1] == 1)
            return fn

    sync.lib = _SyncLib()
    kernels = _time_launches()
    torch._dynamo.reset()
    model, inputs, opt = _setup(case, device)
    with iconfig.patch({"cpp.enable_kernel_profile": True}):
        fn = model if mode == "eager" else torch.compile(model, backend=mode)

        def between():
            kernels["phase"] = "opt"

        step = _stepper(fn, inputs, opt, between=between)
        for _ in range(3):
            step()
    wall = _median_time(step, steps, warm=0)

    host: dict = {}
    for _ in range(steps):
        waits.on = True
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        waits.on = False
        got = {"dynamo_aot": 0.0, "graphs": 0.0, "cpp": 0.0, "gemm": 0.0, "n_graphs": 0}
        for e in prof.events():
            if _outermost(e, _REGIONS):  # graph breaks nest regions: each interval once
                got["dynamo_aot"] += e.cpu_time_total
            elif e.name.startswith("## Call CompiledFxGraph") and _outermost(e, ("## Call CompiledFxGraph",)):
                got["graphs"] += e.cpu_time_total
                got["n_graphs"] += 1e6
            elif "cpp_fused" in e.name:  # graph_<i>_cpp_fused_...
                got["cpp"] += e.cpu_time_total
            elif _outermost(e, _GEMM_CALLS) and _inside(e, "## Call CompiledFxGraph"):
                got["gemm"] += e.cpu_time_total
        got["dynamo_aot"] -= got["graphs"]
        for k, v in got.items():
            host.setdefault(k, []).append(v / 1e6)
    host = {k: statistics.median(v) for k, v in host.items()}
    n_waits, t_waits = waits.n["wait"] / steps, waits.t["wait"] / steps

    runs = []
    for _ in range(steps):
        kernels["on"], kernels["phase"] = [], "model"
        step()
        by_kind: dict = {}
        for name, phase, t in kernels["on"]:
            by_kind[_kind(name, phase)] = by_kind.get(_kind(name, phase), 0.0) + t
        runs.append(by_kind)
        kernels["on"] = None
    dev_kinds = {k: min(r.get(k, 0.0) for r in runs) for k in runs[0]}

    ms = lambda v: f"{v * 1e3:.1f} ms"  # noqa: E731
    print(f"{case} on {device}, {mode}: step {ms(wall)} (wall, median of {steps})")
    print(
        f"  host, Dynamo guards + AOT wrappers (compiled regions less their graphs, and what Dynamo left "
        f"to run eagerly between graph breaks): {ms(host['dynamo_aot'])}"
    )
    print(
        f"  host, inside the {host['n_graphs']:g} compiled graph calls (op dispatch, launches, C++ kernels): "
        f"{ms(host['graphs'])}"
    )
    print(f"    of which GEMM/attention calls (host time of the calls): {ms(host['gemm'])}")
    if host["cpp"]:
        print(f"    of which inductor's C++ kernels (run on the host): {ms(host['cpp'])}")
    print(f"  host waits on the device: {n_waits:g} per step, {ms(t_waits)} blocked (profiled pass)")
    total = sum(dev_kinds.values())
    print(f"  device kernels, each timed alone (min over {steps} steps): {ms(total)}")
    for kind, v in sorted(dev_kinds.items(), key=lambda kv: -kv[1]):
        print(f"    {kind:16s} {ms(v):>10s} {100 * v / wall:5.1f}% of the step")


def kernels(case: str, device: str, steps: int, modes=("eager", "inductor", "ral")) -> None:
    """Device time of a training step on an OpenCL device, by kernel, from the plugin's own
    event timing (TORCH_FL_OPENCL_PROFILE; it queues every command, so no inline execution):
    each launch's minimum over `steps` steps, summed. Counts and minimums move far less with
    the machine's load than wall times do."""
    import collections
    import os
    import tempfile

    import torch

    prof = os.path.join(tempfile.mkdtemp(), "kernels.tsv")
    os.environ["TORCH_FL_OPENCL_PROFILE"] = prof  # read at the plugin's first launch
    dev = torch.device(device)
    for mode in modes:
        step = _warm_step(case, device, mode)
        runs = []
        for _ in range(steps):
            torch.ral.synchronize(dev)
            open(prof, "w").close()
            step()
            torch.ral.synchronize(dev)
            with open(prof) as f:
                runs.append([(ln.split("\t")[0], float(ln.split("\t")[4])) for ln in f])
        n = min(len(r) for r in runs)
        by: dict = collections.defaultdict(lambda: [0, 0.0])
        for i in range(n):
            name = "generated (jit)" if runs[0][i][0].startswith("rlk_") else runs[0][i][0]
            by[name][0] += 1
            by[name][1] += min(r[i][1] for r in runs) / 1e3
        gemm = sum(t for k, (_, t) in by.items() if k.startswith("gemm"))
        total = sum(t for _, t in by.values())
        print(
            f"{case} on {device}, {mode}: {n} kernels, {total:.1f} ms ({total - gemm:.1f} ms outside GEMMs and "
            f"their packing), min over {steps} steps per launch"
        )
        for k, (c, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:10]:
            print(f"  {k:24s} {c:4d} {t:8.2f} ms")


def _opencl_counters():
    """A function returning the OpenCL plugin's counters ({name: count}), or None without it."""
    import ctypes

    import torch_fl

    rec = next((p.record for p in torch_fl.plugins() if p.record.name == "opencl"), None)
    if rec is None:
        return None
    so = ctypes.CDLL(rec.library)
    so.ral_opencl_counter_name.restype = ctypes.c_char_p
    n = so.ral_opencl_counters(None, 0)
    names = [so.ral_opencl_counter_name(i).decode() for i in range(n)]

    def read():
        out = (ctypes.c_uint64 * n)()
        so.ral_opencl_counters(out, n)
        return dict(zip(names, out))

    return read


def threads(case: str, device: str, steps: int, modes=("eager", "inductor", "ral")) -> None:
    """Per training step, in one process: CPU time of the Python thread, of autograd's device
    thread (the backward) and of every other thread (the device's: PoCL's workers, the host
    plugin's stream and pool), and the OpenCL plugin's counters (kernels queued, commands run
    inline on the calling thread, buffers created, waits). CPU time moves far less with the
    machine's load than wall time: on 2 cores the device's threads and the host's share them."""
    import threading

    from common import thread_times  # here: tests load this file without benchmarks/ on the path

    counters = _opencl_counters()
    me = str(threading.get_native_id())
    for mode in modes:
        step = _warm_step(case, device, mode)
        c0, t0, w0 = counters() if counters else {}, thread_times(), time.perf_counter()
        for _ in range(steps):
            step()
        wall = (time.perf_counter() - w0) / steps
        c1, t1 = counters() if counters else {}, thread_times()
        cpu: dict = {}
        for (tid, name), v in t1.items():
            group = "python" if tid == me else "autograd" if name.startswith("pt_autograd") else "device/other"
            cpu[group] = cpu.get(group, 0.0) + (v[0] - t0.get((tid, name), (0.0, 0.0))[0]) / steps
        per = {k: (c1[k] - c0[k]) / steps for k in c1 if c1[k] != c0[k]}
        print(
            f"{case} on {device}, {mode}: wall {wall * 1e3:.1f} ms/step; CPU ms/step: "
            + ", ".join(f"{k} {cpu.get(k, 0.0) * 1e3:.1f}" for k in ("python", "autograd", "device/other"))
        )
        if per:
            print("  OpenCL plugin per step: " + ", ".join(f"{k} {v:g}" for k, v in per.items()))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=["gpt2", *CASES])
    ap.add_argument("--mode", choices=["eager", "ral", "inductor"])
    ap.add_argument("--backends", default="ral", help="compiled modes the driver compares with eager")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shares", action="store_true", help="kernel time per kind of launch (one process)")
    ap.add_argument("--amp", choices=sorted(_AMP), help="forward under torch.autocast('ral', dtype)")
    ap.add_argument("--floor", action="store_true", help="GEMM + attention + AdamW time: the bound on any speedup")
    ap.add_argument("--counts", metavar="DEVICE", help="launches/syncs per step on DEVICE (ral:0, ral:1)")
    ap.add_argument("--breakdown", metavar="DEVICE", help="a compiled step's time by kind of work on DEVICE")
    ap.add_argument("--device", default="ral:0", help="device of the driver and --mode runs")
    ap.add_argument("--kernels", metavar="DEVICE", help="OpenCL kernel time per step by kernel on DEVICE")
    ap.add_argument("--threads", metavar="DEVICE", help="CPU time per thread and plugin counters per step")
    a = ap.parse_args()
    if a.threads:
        threads(a.case or "gpt2", a.threads, a.steps if a.steps != 8 else 10, *([(a.mode,)] if a.mode else []))
        return
    if a.kernels:
        kernels(a.case or "gpt2", a.kernels, a.steps if a.steps != 8 else 4, *([(a.mode,)] if a.mode else []))
        return
    if a.counts:
        for case in (a.case,) if a.case else (*CASES, "gpt2"):
            counts(case, a.counts, a.steps, *([(a.mode,)] if a.mode else []))
        return
    if a.breakdown:
        breakdown(a.case or "gpt2", a.breakdown, a.steps, a.mode or "inductor")
        return
    if a.floor:
        for case in (a.case,) if a.case else (*CASES, "gpt2"):
            floor(case, a.steps)
        return
    if a.shares:
        for case in (a.case,) if a.case else (*CASES, "gpt2"):
            shares(case, a.steps, a.amp, a.backends.split(","), a.device)
        return
    if a.case and a.mode:
        wall, cpu = child(a.case, a.mode, a.steps, a.amp, a.device)
        print(f"{wall:.6f} {cpu:.6f}")
        return
    backends = [b for b in a.backends.split(",") if b]
    for case in (a.case,) if a.case else (*CASES, "gpt2"):
        ratios = {b: [] for b in backends}
        cpu_ratios = {b: [] for b in backends}
        runs = {m: [] for m in ["eager", *backends]}
        for _ in range(a.rounds):
            got = {}
            for mode in ("eager", *backends):
                got[mode] = _run_child(case, mode, a.steps, a.amp, a.device)
                runs[mode].append(got[mode][0])
            for b in backends:
                ratios[b].append(got["eager"][0] / got[b][0])
                cpu_ratios[b].append(got["eager"][1] / got[b][1])
        for b in backends:
            print(
                f"{case} on {a.device}: eager {statistics.median(runs['eager']) * 1e3:.1f} ms, {b} backend "
                f"{statistics.median(runs[b]) * 1e3:.1f} ms, median speedup {statistics.median(ratios[b]):.2f}x "
                f"(rounds {', '.join(f'{r:.2f}' for r in ratios[b])}); CPU/step ratio "
                f"{statistics.median(cpu_ratios[b]):.2f}x (rounds {', '.join(f'{r:.2f}' for r in cpu_ratios[b])})"
            )


if __name__ == "__main__":
    main()
