"""One section of `ralctl certify`, run in its own interpreter (see certify.py).

    python -m torch_fl.tools.certify_child --plugin-dir DIR --section NAME --samples N --out FILE

Writes {"section", "device", "checks": [{name, passed, skipped, detail, tiers, repro}]} to FILE.
A crash of the vendor's library kills only this child; the parent records it as a failure.
Every numeric check compares with PyTorch on CPU.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback

import torch

import torch_fl
from torch_fl.tools.certify import SECTIONS

# Capped so a max_rank of 8 stays a few thousand elements: every dim is 3.
MAX_RANK_TESTED = 4
DIM = 3
OPINFO_OPS = (
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "abs",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "sigmoid",
    "nn.functional.relu",
    "nn.functional.gelu",
    "softmax",
    "log_softmax",
    "sum",
    "mean",
    "amax",
    "mm",
    "bmm",
    "addmm",
    "matmul",
    "cat",
    "where",
    "clamp",
    "pow",
    "nn.functional.linear",
    "nn.functional.layer_norm",
    "nn.functional.embedding",
)


def _check(name, passed, detail="", tiers=None, repro="", skipped=False) -> dict:
    return {
        "name": name,
        "passed": bool(passed),
        "skipped": bool(skipped),
        "detail": detail,
        "tiers": dict(tiers or {}),
        "repro": repro,
    }


def _tiers(cov) -> dict:
    out: dict = {}
    for (_, tier), n in cov.counts.items():
        out[tier] = out.get(tier, 0) + n
    return out


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def find_plugin(plugin_dir: str):
    """The PluginState whose directory is plugin_dir (through symlinks), or None."""
    want = os.path.realpath(plugin_dir)
    for st in torch_fl.plugins():
        if os.path.realpath(st.record.dir) == want:
            return st
    return None


def device_of(plugin_dir: str) -> str:
    """`ral:N` of the plugin's first device (raises if it has none)."""
    st = find_plugin(plugin_dir)
    if st is None or not st.devices:
        raise RuntimeError(f"plugin at {plugin_dir} has no device")
    return f"ral:{st.devices[0]}"


# ---- abi -------------------------------------------------------------------------------------


def section_abi(plugin_dir: str, samples: int) -> list[dict]:
    """Loader status, ABI, device descriptors, manifest validity and symbol resolution."""
    from torch_fl._native import lib
    from torch_fl.core.manifest import load_manifest

    st = find_plugin(plugin_dir)
    others = ", ".join(f"{p.record.name} ({p.record.dir})" for p in torch_fl.plugins())
    if st is None:
        return [_check("loader found the plugin", False, f"no plugin record for {plugin_dir}; loader saw: {others}")]
    rec = st.record
    out = [_check("loader found the plugin", True, f"{rec.name} {rec.version} from {rec.source}")]
    out.append(
        _check(
            "plugin loaded", rec.status == "LOADED", f"status {rec.status}" + (f": {rec.reason}" if rec.reason else "")
        )
    )
    out.append(
        _check(
            "ABI major matches the runtime",
            rec.abi[0] == lib.RAL_ABI_MAJOR,
            f"plugin ABI {rec.abi[0]}.{rec.abi[1]}, runtime {lib.RAL_ABI_MAJOR}.{lib.RAL_ABI_MINOR}",
        )
    )
    devices = [d for d in torch_fl.devices() if d.index in st.devices]
    out.append(_check("at least one device", bool(devices), f"{len(devices)} device(s)"))
    for d in devices:
        problems = []
        if not d.name.strip():
            problems.append("empty name")
        if not d.vendor.strip():
            problems.append("empty vendor")
        if d.max_rank < 1:
            problems.append(f"max_rank {d.max_rank}")
        if d.dtype_mask == 0:
            problems.append("dtype_mask is empty")
        out.append(
            _check(
                f"device ral:{d.index} descriptor",
                not problems,
                "; ".join(problems)
                or f"{d.name} / {d.vendor} / {d.type}, max_rank {d.max_rank}"
                + ("" if d.total_memory else "; note: total_memory 0 (unknown, allowed by the ABI)"),
            )
        )
    manifest_path = os.path.join(plugin_dir, "manifest.json")
    try:
        m = load_manifest(manifest_path)
        out.append(_check("manifest validates against the schema", True, f"{len(m.entries)} entries"))
        out.append(
            _check(
                "manifest names the loaded plugin", m.plugin == rec.name, f"manifest {m.plugin!r}, plugin {rec.name!r}"
            )
        )
    except Exception as exc:
        out.append(_check("manifest validates against the schema", False, _short(exc)))
        return out
    hard = list(st.disabled)
    for e, why in hard:
        out.append(_check(f"manifest entry {e.op} ({e.kernel}) usable", False, why))
    for note in st.notes:
        # Declared dtypes the device itself says it lacks: refused by design, reported only.
        out.append(_check("manifest dtypes the device declares", True, f"note: {note}"))
    out.append(
        _check(
            "every manifest entry resolves (op known to torch, symbol exported)",
            not hard,
            f"{len(m.entries) - len(hard)}/{len(m.entries)} usable",
        )
    )
    return out


# ---- entries ---------------------------------------------------------------------------------


def _rand(shape, dtype, gen):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    if dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype)
    lo = 0 if dtype == torch.uint8 else -4
    return torch.randint(lo, 5, shape, generator=gen).to(dtype)


def synth_args(op: str, dtype_name: str, rank: int) -> list | None:
    """Seeded CPU arguments for an aten overload: every Tensor (DIM,)*rank, required scalars
    set to small values; None if the schema has a required argument we cannot synthesize."""
    from torch_fl.tensor.op_schema import resolve_op

    overload = resolve_op(op)
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(0)
    args = []
    for a in overload._schema.arguments:
        if a.kwarg_only or a.has_default_value():
            break
        t, name = str(a.type), a.name
        if t == "Tensor":
            args.append(_rand((DIM,) * rank, dtype, gen))
        elif t == "number":  # Scalar
            args.append(0.5 if dtype.is_floating_point else 2)
        elif t == "int" and "dtype" in name:  # a ScalarType argument
            args.append(dtype)
        elif t == "int":
            args.append({"dim": 0, "start": 0, "end": DIM}.get(name, 1))
        elif t == "float":
            args.append(0.5)
        elif t == "bool":
            args.append(False)
        elif t in ("List[int]", "Optional[List[int]]"):
            sizes = "size" in name or "shape" in name
            args.append([DIM] * rank if sizes else ([0] if rank > 0 else []))
        else:
            return None
    return args


def _to_dev(args, dev):
    return [a.to(dev) if isinstance(a, torch.Tensor) else a for a in args]


def _compare(actual, expected, dtype, shapes_only=False):
    from torch_fl.observe.conformance import TOLERANCES

    rtol, atol = TOLERANCES.get(dtype, (None, None))
    actual = torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual)
    if shapes_only:
        meta = torch.utils._pytree.tree_map(lambda t: (t.shape, t.dtype) if isinstance(t, torch.Tensor) else t, actual)
        want = torch.utils._pytree.tree_map(
            lambda t: (t.shape, t.dtype) if isinstance(t, torch.Tensor) else t, expected
        )
        assert meta == want, f"random op: shapes/dtypes {meta} vs {want}"
        return
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_device=False)


def run_entry(plugin_dir: str, op: str, dtype_name: str, rank: int) -> dict:
    """One manifest entry at one dtype and rank, forced to the vendor tier, against CPU."""
    from torch_fl.tensor.op_schema import resolve_op

    name = f"{op} {dtype_name} rank {rank}"
    repro = (
        f'python -c "from torch_fl.tools.certify_child import repro_entry; '
        f'repro_entry({plugin_dir!r}, {op!r}, {dtype_name!r}, {rank})"'
    )
    args = synth_args(op, dtype_name, rank)
    if args is None:
        return _check(name, True, "schema has arguments certify cannot synthesize", skipped=True)
    overload = resolve_op(op)
    dev = device_of(plugin_dir)
    dev_args = _to_dev(args, dev)  # before the CPU call: in-place ops mutate their inputs
    try:
        expected = overload(*args)
    except Exception as exc:
        return _check(name, True, f"CPU rejects the synthesized inputs ({_short(exc)})", skipped=True)
    # RNG-driven ops need not reproduce CPU's random stream: shapes and dtypes only.
    random = torch.Tag.nondeterministic_seeded in overload.tags
    cov = torch_fl.Coverage()
    torch_fl.set_op_override(op, "vendor")
    try:
        with cov:
            actual = overload(*dev_args)
        _compare(actual, expected, getattr(torch, dtype_name), shapes_only=random)
    except Exception as exc:
        return _check(name, False, _short(exc), _tiers(cov), repro)
    finally:
        torch_fl.set_op_override(op, None)
    tiers = _tiers(cov)
    if not tiers.get("vendor"):
        return _check(name, False, f"the vendor kernel did not run (tiers {tiers})", tiers, repro)
    return _check(name, True, "", tiers, repro)


def repro_entry(plugin_dir: str, op: str, dtype_name: str, rank: int) -> None:
    """Re-run one failed entry check and print its outcome (for a certificate's reproducer)."""
    print(json.dumps(run_entry(plugin_dir, op, dtype_name, rank), indent=2))


def entry_ranks(min_rank: int, max_rank: int, spread: bool = True) -> list[int]:
    """The ranks tested for an entry: its minimum, 2 and its maximum, capped at MAX_RANK_TESTED
    (without spread: only the middle one, for quick runs)."""
    hi = min(max_rank, MAX_RANK_TESTED)
    mid = min(max(min_rank, 2), hi)
    if not spread:
        return [mid] if min_rank <= mid <= hi else []
    return sorted({r for r in (min_rank, mid, hi) if min_rank <= r <= hi})


def section_entries(plugin_dir: str, samples: int) -> list[dict]:
    """Every usable manifest entry over its declared dtypes and a spread of its ranks."""
    from torch_fl.device.dtypes import NAME_OF_TORCH, TORCH_OF_CODE

    st = find_plugin(plugin_dir)
    if st is None or not st.devices:
        return [_check("plugin has a device", False, "no device: entries cannot run")]
    out = []
    for op, entries in sorted(st.by_op.items()):
        for e in entries:
            for code in sorted(e.dtype_codes):
                dname = NAME_OF_TORCH[TORCH_OF_CODE[code]]
                for rank in entry_ranks(e.min_rank, e.max_rank, spread=samples >= 3):
                    res = run_entry(plugin_dir, op, dname, rank)
                    res["name"] = f"{res['name']} ({e.kernel})"
                    out.append(res)
    return out


# ---- opinfo / modules / model ----------------------------------------------------------------


def section_opinfo(plugin_dir: str, samples: int) -> list[dict]:
    """A fixed sample of PyTorch's OpInfo database in float32 on the plugin's device."""
    from torch_fl.observe.conformance import load_op_db, opinfo_name, run_case

    dev = device_of(plugin_dir)
    by_name = {opinfo_name(op): op for op in load_op_db()}
    out = []
    for name in OPINFO_OPS:
        op = by_name.get(name)
        if op is None or torch.float32 not in op.supported_dtypes("cpu"):
            out.append(
                _check(f"opinfo {name}", True, f"not in this torch's OpInfo ({torch.__version__})", skipped=True)
            )
            continue
        res = run_case(op, torch.float32, dev, max_samples=samples)
        repro = f"ralctl coverage --opinfo --device {dev} --op {name}"
        out.append(_check(f"opinfo {name} float32", res.passed, res.error, res.tiers, repro))
    return out


def _module_cases():
    nn = torch.nn
    return {
        "Linear": (lambda: nn.Linear(6, 4), lambda: torch.randn(5, 6)),
        "Conv2d": (lambda: nn.Conv2d(3, 4, 3, padding=1), lambda: torch.randn(2, 3, 6, 6)),
        "BatchNorm2d": (lambda: nn.BatchNorm2d(3), lambda: torch.randn(4, 3, 5, 5)),
        "LayerNorm": (lambda: nn.LayerNorm(8), lambda: torch.randn(3, 8)),
        "Embedding": (lambda: nn.Embedding(10, 4), lambda: torch.tensor([[1, 2, 9], [0, 3, 3]])),
        "MultiheadAttention": (
            lambda: _Attn(),
            lambda: torch.randn(2, 5, 8),
        ),
        "GELU+Dropout(eval)": (lambda: nn.Sequential(nn.GELU(), nn.Dropout(0.5)).eval(), lambda: torch.randn(4, 4)),
    }


class _Attn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.m = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        return self.m(x, x, x, need_weights=False)[0]


def _fwd_bwd(module, x, dev):
    """Outputs and parameter gradients of sum(module(x)) on dev, moved to CPU."""
    m = copy.deepcopy(module).to(dev)
    xd = x.to(dev)
    if xd.is_floating_point():
        xd.requires_grad_()
    y = m(xd)
    (y.float() * torch.linspace(0.5, 1.5, y.numel(), device=dev).reshape(y.shape)).sum().backward()
    grads = {k: p.grad.cpu() for k, p in m.named_parameters() if p.grad is not None}
    return y.detach().cpu(), grads


def _compare_modules(name, dev, make, make_x, rtol=1e-4, atol=1e-5):
    torch.manual_seed(0)
    module, x = make(), make_x()
    cov = torch_fl.Coverage()
    repro = f"python -c \"from torch_fl.tools.certify_child import repro_section; repro_section('modules', {name!r})\""
    try:
        y_cpu, g_cpu = _fwd_bwd(module, x, "cpu")
        with cov:
            y_dev, g_dev = _fwd_bwd(module, x, dev)
        torch.testing.assert_close(y_dev, y_cpu, rtol=rtol, atol=atol)
        assert g_dev.keys() == g_cpu.keys(), f"gradients for {sorted(g_dev)} vs {sorted(g_cpu)}"
        for k in g_cpu:
            torch.testing.assert_close(g_dev[k], g_cpu[k], rtol=rtol, atol=atol, msg=lambda m, k=k: f"grad {k}: {m}")
    except Exception as exc:
        return _check(name, False, _short(exc), _tiers(cov), repro)
    return _check(name, True, f"output and {len(g_cpu)} parameter gradients match CPU", _tiers(cov), repro)


def _optimizer_case(name, dev, make_opt):
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    x, target = torch.randn(8, 6), torch.randn(8, 3)
    cov = torch_fl.Coverage()
    repro = f"python -c \"from torch_fl.tools.certify_child import repro_section; repro_section('modules', {name!r})\""
    try:
        results = []
        for d in ("cpu", dev):
            m = copy.deepcopy(ref).to(d)
            opt = make_opt(m.parameters())
            xd, td = x.to(d), target.to(d)
            ctx = cov if d != "cpu" else _Null()
            with ctx:
                for _ in range(3):
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(m(xd), td).backward()
                    opt.step()
            results.append([p.detach().cpu() for p in m.parameters()])
        for a, b in zip(results[1], results[0]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    except Exception as exc:
        return _check(name, False, _short(exc), _tiers(cov), repro)
    return _check(name, True, "3 steps: parameters match CPU", _tiers(cov), repro)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _optimizer_cases():
    optim = torch.optim
    return {
        "SGD(momentum) 3 steps": lambda p: optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
        "Adam 3 steps": lambda p: optim.Adam(p, lr=0.01, foreach=False),
        "AdamW 3 steps": lambda p: optim.AdamW(p, lr=0.01, weight_decay=0.1, foreach=False),
        "RMSprop 3 steps": lambda p: optim.RMSprop(p, lr=0.01, foreach=False),
    }


def section_modules(plugin_dir: str, samples: int, only: str | None = None) -> list[dict]:
    """torch.nn modules (forward + backward) and optimizers (3 steps) against CPU."""
    dev = device_of(plugin_dir)
    out = []
    for name, (make, make_x) in _module_cases().items():
        if only in (None, name):
            out.append(_compare_modules(name, dev, make, make_x))
    for name, make_opt in _optimizer_cases().items():
        if only in (None, name):
            out.append(_optimizer_case(name, dev, make_opt))
    return out


class TinyModel(torch.nn.Module):
    """A conv stem, a transformer encoder layer and a classifier head: the ops of a small model."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x):
        h = torch.relu(self.conv(x))  # (B, 8, 4, 4)
        h = h.flatten(2).transpose(1, 2)  # (B, 16, 8)
        return self.head(self.enc(h).mean(1))


def section_model(plugin_dir: str, samples: int) -> list[dict]:
    """A small model's forward, cross-entropy backward and one SGD step, against CPU."""
    dev = device_of(plugin_dir)
    torch.manual_seed(0)
    ref = TinyModel()
    x, y = torch.randn(3, 1, 4, 4), torch.tensor([0, 3, 4])
    cov = torch_fl.Coverage()
    repro = "python -c \"from torch_fl.tools.certify_child import repro_section; repro_section('model')\""
    try:
        outs = []
        for d in ("cpu", dev):
            m = copy.deepcopy(ref).to(d)
            opt = torch.optim.SGD(m.parameters(), lr=0.1, foreach=False)
            with cov if d != "cpu" else _Null():
                loss = torch.nn.functional.cross_entropy(m(x.to(d)), y.to(d))
                loss.backward()
                grads = [p.grad.detach().cpu() for p in m.parameters()]
                opt.step()
            outs.append((loss.detach().cpu(), grads, [p.detach().cpu() for p in m.parameters()]))
        (l_cpu, g_cpu, p_cpu), (l_dev, g_dev, p_dev) = outs
        torch.testing.assert_close(l_dev, l_cpu, rtol=1e-4, atol=1e-5)
        for a, b in zip(g_dev + p_dev, g_cpu + p_cpu):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    except Exception as exc:
        return [_check("tiny model forward/backward/step", False, _short(exc), _tiers(cov), repro)]
    detail = f"loss {l_cpu.item():.5f}, {len(g_cpu)} gradients and the SGD step match CPU"
    return [_check("tiny model forward/backward/step", True, detail, _tiers(cov), repro)]


# ---- bad input -------------------------------------------------------------------------------


def section_bad_input(plugin_dir: str, samples: int) -> list[dict]:
    """Forged and out-of-range pointers are refused with a specific error; the device survives."""
    from torch_fl.device.memory import Buffer
    from torch_fl.tensor.ral_tensor import wrap

    dev = device_of(plugin_dir)
    idx = torch.device(dev).index
    good = torch.arange(16.0, device=dev)
    out = []
    cases = {
        "forged device pointer": lambda: wrap(Buffer(idx, 0x7F8A12345000, 64), (16,), (1,), 0, torch.float32),
        "view past its allocation": lambda: wrap(good._buf, (16,), (1,), 8, torch.float32),
    }
    for name, make in cases.items():
        try:
            bad = make()
            (bad + bad).cpu()
            out.append(_check(name, False, "no error raised"))
        except torch_fl.InvalidPointerError as exc:
            out.append(_check(name, True, f"InvalidPointerError: {str(exc)[:120]}"))
        except Exception as exc:
            out.append(_check(name, False, f"wrong exception {_short(exc)}"))
    try:
        torch.testing.assert_close((good * 2).cpu(), torch.arange(16.0) * 2)
        out.append(_check("device still works after bad input", True))
    except Exception as exc:
        out.append(_check("device still works after bad input", False, _short(exc)))
    return out


def section_oom(plugin_dir: str, samples: int) -> list[dict]:
    """Under TORCH_FL_MEMORY_LIMIT an oversize allocation raises OutOfMemoryError, live tensors
    survive and memory is usable again once freed."""
    dev = device_of(plugin_dir)
    limit = os.environ.get("TORCH_FL_MEMORY_LIMIT", "")
    keep = torch.arange(1000.0, device=dev)
    chunks = [torch.empty(16 * 2**20, dtype=torch.uint8, device=dev) for _ in range(2)]
    out = []
    try:
        torch.empty(64 * 2**20, dtype=torch.uint8, device=dev)
        out.append(_check(f"64 MiB over TORCH_FL_MEMORY_LIMIT={limit}", False, "no OutOfMemoryError"))
    except torch.OutOfMemoryError as exc:
        out.append(_check(f"64 MiB over TORCH_FL_MEMORY_LIMIT={limit}", True, f"{type(exc).__name__}"))
    except Exception as exc:
        out.append(_check(f"64 MiB over TORCH_FL_MEMORY_LIMIT={limit}", False, f"wrong exception {_short(exc)}"))
    ok = keep.sum().item() == sum(range(1000))
    out.append(_check("live tensors survive the OOM", ok, "" if ok else "sum changed"))
    del chunks
    try:
        torch.empty(40 * 2**20, dtype=torch.uint8, device=dev)
        out.append(_check("memory usable again after freeing", True))
    except Exception as exc:
        out.append(_check("memory usable again after freeing", False, _short(exc)))
    return out


RUNNERS = {
    "abi": section_abi,
    "entries": section_entries,
    "opinfo": section_opinfo,
    "modules": section_modules,
    "model": section_model,
    "bad_input": section_bad_input,
    "oom": section_oom,
}


def repro_section(section: str, only: str | None = None) -> None:
    """Re-run one section (or one named module/optimizer case) in this environment and print it."""
    plugin_dir = os.environ["TORCH_FL_CERTIFY_PLUGIN_DIR"]
    fn = RUNNERS[section]
    res = section_modules(plugin_dir, 4, only) if section == "modules" else fn(plugin_dir, 4)
    print(json.dumps(res, indent=2))


def main(argv=None) -> int:
    """Run the given sections in order, rewriting the JSON after each one (a crash keeps the
    sections already done)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin-dir", required=True)
    ap.add_argument("--section", required=True, action="append", choices=SECTIONS)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        dev = device_of(a.plugin_dir)
    except Exception:
        dev = None
    done = []
    for section in a.section:
        t0 = time.perf_counter()
        try:
            checks = RUNNERS[section](a.plugin_dir, a.samples)
        except Exception as exc:
            checks = [_check(f"{section} section ran", False, _short(exc) + "\n" + traceback.format_exc(limit=4))]
        done.append({"section": section, "device": dev, "torch": torch.__version__, "checks": checks})
        done[-1]["seconds"] = round(time.perf_counter() - t0, 1)
        with open(a.out, "w") as f:
            json.dump(done, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
