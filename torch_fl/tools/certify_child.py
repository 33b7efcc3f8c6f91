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
import shlex
import sys
import time
import traceback

import torch

import torch_fl
from torch_fl.tools.certify import SECTIONS, repro_prefix

# Every declared rank up to 16 (certify_inputs.shape_of keeps them small); a quick run
# (--samples below 3) tests up to rank 4.
MAX_RANK_TESTED = 16
QUICK_MAX_RANK = 4
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


def _check(name, passed, detail="", tiers=None, repro="", skipped=False, kernels=None) -> dict:
    """One check's record; a skipped check is never "passed" (its detail says why)."""
    return {
        "name": name,
        "state": "skipped" if skipped else ("passed" if passed else "failed"),
        "passed": bool(passed) and not skipped,
        "skipped": bool(skipped),
        "detail": detail,
        "tiers": dict(tiers or {}),
        "repro": repro,
        "kernels": list(kernels or []),
    }


def _tiers(cov) -> dict:
    out: dict = {}
    for (_, tier), n in cov.counts.items():
        out[tier] = out.get(tier, 0) + n
    return out


def kernels_ran(cov, plugin_dir: str) -> list[str]:
    """'op (kernel)' for every op that ran in the vendor tier under cov: a failure in a
    module or model check names the vendor kernels that took part."""
    st = find_plugin(plugin_dir)
    out = []
    for op in cov.ops_in_tier("vendor"):
        kernels = sorted({e.kernel for e in (st.by_op.get(op, []) if st is not None else [])})
        out.append(f"{op} ({', '.join(kernels) or '?'})")
    return out


def _failed(name, exc, cov, plugin_dir, repro) -> dict:
    """A failed module/model/OpInfo check naming the vendor kernels that ran during it."""
    ran = kernels_ran(cov, plugin_dir)
    detail = _short(exc) if isinstance(exc, BaseException) else str(exc)
    detail += f"\nvendor kernels that ran: {'; '.join(ran) or 'none'}"
    return _check(name, False, detail, _tiers(cov), repro, kernels=ran)


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


def _to_dev(args, dev):
    return [a.to(dev) if isinstance(a, torch.Tensor) else a for a in args]


def _compare(actual, expected, dtype, shapes_only=False, exact=False):
    from torch_fl.observe.conformance import TOLERANCES

    rtol, atol = (0, 0) if exact else TOLERANCES.get(dtype, (None, None))
    actual = torch.utils._pytree.tree_map(lambda t: t.cpu() if isinstance(t, torch.Tensor) else t, actual)
    if shapes_only:
        meta = torch.utils._pytree.tree_map(lambda t: (t.shape, t.dtype) if isinstance(t, torch.Tensor) else t, actual)
        want = torch.utils._pytree.tree_map(
            lambda t: (t.shape, t.dtype) if isinstance(t, torch.Tensor) else t, expected
        )
        assert meta == want, f"random op: shapes/dtypes {meta} vs {want}"
        return
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True, check_device=False)


def repro_command(call: str) -> str:
    """A shell command that re-runs `call` (Python) in this child's environment: absolute
    interpreter and every variable certify set or removed, so it runs as printed."""
    return f"{repro_prefix(os.environ)} -c {shlex.quote(call)}"


def _entry_of(plugin_dir: str, op: str, dtype: torch.dtype, kernel: str | None):
    from torch_fl.device.dtypes import CODE_OF_TORCH

    st = find_plugin(plugin_dir)
    entries = st.by_op.get(op, []) if st is not None else []
    code = CODE_OF_TORCH.get(dtype)
    for e in entries:
        if (kernel is None or e.kernel == kernel) and code in e.dtype_codes:
            return e
    return entries[0] if entries else None


def _dtypes(tree):
    leaves = torch.utils._pytree.tree_leaves(tree)
    return [t.dtype for t in leaves if isinstance(t, torch.Tensor)]


def _as_meta_dtypes(overload, args, kwargs, actual, expected):
    """expected cast to the device's output dtypes where those are what PyTorch's own meta
    kernel gives (native_layer_norm's float16 mean/rstd are float32 there, as on CUDA, and
    float16 on CPU); otherwise expected unchanged, so a dtype mismatch still fails."""
    if _dtypes(actual) == _dtypes(expected):
        return expected
    try:
        meta = overload(*[a.to("meta") if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    except Exception:
        return expected
    if _dtypes(meta) != _dtypes(actual):
        return expected
    want = iter(_dtypes(actual))
    return torch.utils._pytree.tree_map(lambda t: t.to(next(want)) if isinstance(t, torch.Tensor) else t, expected)


def _float64_reference(overload, args, kwargs, dtype):
    """CPU's result on the inputs upcast to float64, cast back to dtype."""

    def up(t):
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    res = overload(*[up(a) for a in args], **kwargs)
    return torch.utils._pytree.tree_map(
        lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float64 else t, res
    )


def _run_forced(
    op, overload, cpu_args, cpu_kwargs, dev_args, dev_kwargs, dtype, bases=(), alt=False, after_cpu=None, exact=False
):
    """Run the overload on CPU and, forced to the vendor tier, on the device; compare the
    results and every re-laid storage (a kernel that writes outside its view changes it).
    With alt, a result that matches CPU's float64 result instead passes too: at nan/inf/-0.0
    CPU's own float16, float32 and float64 paths can disagree (gelu(inf) is nan in float32's
    vectorized path, inf in float64), and either IEEE answer is a correct kernel.
    after_cpu() runs once CPU is done (run_entry copies CPU's results into its storages).
    Returns (passed or None if CPU refuses the inputs, detail, tiers)."""
    try:
        pristine = [a.clone() if isinstance(a, torch.Tensor) else a for a in cpu_args] if alt else None
        expected = overload(*cpu_args, **cpu_kwargs)
    except Exception as exc:
        return None, f"CPU rejects the synthesized inputs ({_short(exc)})", {}
    if after_cpu is not None:
        after_cpu()
    random = torch.Tag.nondeterministic_seeded in overload.tags
    cov = torch_fl.Coverage()
    torch_fl.set_op_override(op, "vendor")
    try:
        with cov:
            actual = overload(*dev_args, **dev_kwargs)
        expected = _as_meta_dtypes(overload, cpu_args, cpu_kwargs, actual, expected)
        try:
            _compare(actual, expected, dtype, shapes_only=random, exact=exact)
        except AssertionError:
            if not alt:
                raise
            _compare(actual, _float64_reference(overload, pristine, cpu_kwargs, dtype), dtype, exact=exact)
        if not random:
            for cpu_base, dev_base in bases:
                _compare(dev_base, cpu_base, dtype, exact=exact)
    except Exception as exc:
        return False, _short(exc), _tiers(cov)
    finally:
        torch_fl.set_op_override(op, None)
    tiers = _tiers(cov)
    if not tiers.get("vendor"):
        return False, f"the vendor kernel did not run (tiers {tiers})", tiers
    return True, "", tiers


def run_entry(plugin_dir: str, op: str, dtype_name: str, rank: int, variant: str = "contiguous", kernel=None) -> dict:
    """One manifest entry at one dtype, rank and input variant (certify_inputs.VARIANTS),
    forced to the vendor tier, against CPU."""
    from torch_fl.tensor.op_schema import resolve_op
    from torch_fl.tools import certify_inputs as ci

    name = f"{op} {dtype_name} rank {rank} {variant}"
    repro = repro_command(
        "from torch_fl.tools.certify_child import repro_entry; "
        f"repro_entry({plugin_dir!r}, {op!r}, {dtype_name!r}, {rank}, {variant!r}, {kernel!r})"
    )
    dtype = getattr(torch, dtype_name)
    case = ci.synth(op, dtype, rank)
    if isinstance(case, str):
        return _check(name, False, case, skipped=True)
    entry = _entry_of(plugin_dir, op, dtype, kernel)
    if entry is not None and variant not in ci.variants_for(op, entry, dtype, rank, case):
        return _check(name, False, f"variant {variant!r} does not apply to this entry", skipped=True)
    case = ci.apply_values(op, variant, dtype, case)
    dev = device_of(plugin_dir)
    layout = {"strided": "strided", "offset": "offset"}.get(variant, "contiguous")
    # CPU computes on contiguous copies: an op's result must not depend on the layout, and
    # CPU's own kernels are not all layout-proof (aten's CPU flash-attention backward reads
    # strided q/k/v wrongly in torch 2.13). Its results are then written into the same
    # strided or offset storage the device used, and both storages compared.
    cpu_args, dev_args, bases, views = list(case.args), list(case.args), [], []
    for p, a in enumerate(case.args):
        if isinstance(a, list) and a and isinstance(a[0], torch.Tensor):
            cpu_args[p] = [t.clone() for t in a]
            dev_args[p] = [t.to(dev) for t in a]
            continue
        if not isinstance(a, torch.Tensor):
            continue
        cb, cv, db, dv = ci.place(a, layout if p in case.data_pos else "contiguous", dev)
        cpu_args[p], dev_args[p] = a.clone(), dv
        if db is not None:
            bases.append((cb, db))
            views.append((cv, p))
    if variant == "aliased":  # the in-place op's other operand is its output
        cpu_args[case.data_pos[1]] = cpu_args[case.data_pos[0]]
        dev_args[case.data_pos[1]] = dev_args[case.data_pos[0]]
    overload = resolve_op(op)

    def to_views():
        for view, p in views:
            view.copy_(cpu_args[p])

    ok, detail, tiers = _run_forced(
        op, overload, cpu_args, case.kwargs, dev_args, case.kwargs, dtype, bases, variant == "special values", to_views
    )
    if ok is None:
        return _check(name, False, detail, skipped=True)
    return _check(name, ok, detail, tiers, "" if ok else repro)


def run_cast(plugin_dir: str, src_name: str, dst_name: str, strided: bool = False, kernel=None) -> dict:
    """copy_ from src to dst dtype with values that truncate, round and saturate differently,
    exact against CPU."""
    from torch_fl.tensor.op_schema import resolve_op
    from torch_fl.tools import certify_inputs as ci

    src, dst = getattr(torch, src_name), getattr(torch, dst_name)
    name = f"aten::copy_ {src_name} -> {dst_name} cast values" + (" strided" if strided else "")
    repro = repro_command(
        "from torch_fl.tools.certify_child import repro_cast; "
        f"repro_cast({plugin_dir!r}, {src_name!r}, {dst_name!r}, {strided!r}, {kernel!r})"
    )
    values = ci.cast_values(src, dst)
    if values is None or not values.numel():
        return _check(name, False, "no values to cast", skipped=True)
    dev = device_of(plugin_dir)
    layout = "strided" if strided else "offset"
    cb, cv, db, dv = ci.place(torch.zeros(values.shape, dtype=dst), layout, dev)
    ok, detail, tiers = _run_forced(
        "aten::copy_",
        resolve_op("aten::copy_"),
        [cv, values],
        {},
        [dv, values.to(dev)],
        {},
        dst,
        [(cb, db)],
        exact=True,
    )
    if ok is None:
        return _check(name, False, detail, skipped=True)
    if not ok:
        detail = f"{detail}; values {values.tolist()}"
    return _check(name, ok, detail, tiers, "" if ok else repro)


def repro_entry(plugin_dir, op, dtype_name, rank, variant="contiguous", kernel=None) -> None:
    """Re-run one entry check and print its outcome (a certificate's reproducer)."""
    print(json.dumps(run_entry(plugin_dir, op, dtype_name, rank, variant, kernel), indent=2))


def repro_cast(plugin_dir, src_name, dst_name, strided=False, kernel=None) -> None:
    """Re-run one copy_ cast check and print its outcome (a certificate's reproducer)."""
    print(json.dumps(run_cast(plugin_dir, src_name, dst_name, strided, kernel), indent=2))


def entry_ranks(min_rank: int, max_rank: int, every: bool = True) -> list[int]:
    """The ranks tested for an entry: every declared one (up to MAX_RANK_TESTED), or for a
    quick run every declared one up to 2 (a rank-1 bias, a 0-d operand) and its maximum
    capped at QUICK_MAX_RANK."""
    if every:
        return list(range(min_rank, min(max_rank, MAX_RANK_TESTED) + 1))
    hi = min(max_rank, QUICK_MAX_RANK)
    return sorted({r for r in (*range(min_rank, min(max_rank, 2) + 1), hi) if min_rank <= r <= hi})


def _kind(dtype_name: str) -> str:
    dtype = getattr(torch, dtype_name)
    if dtype.is_complex or dtype.is_floating_point or dtype == torch.bool:
        return "complex" if dtype.is_complex else ("float" if dtype.is_floating_point else "bool")
    return "int"


def _variant_plan(names: list[str], spread: list[int], every: bool) -> dict:
    """{dtype name: ranks that get every variant}. A full run: each dtype at each spread rank.
    A quick run: the first dtype of each kind (float, int, bool, complex) at the middle rank."""
    if every:
        return {n: set(spread) for n in names}
    firsts = {}
    for n in names:
        firsts.setdefault(_kind(n), n)
    mid = spread[len(spread) // 2] if spread else None
    return {n: ({mid} if n in firsts.values() and mid is not None else set()) for n in names}


def section_entries(plugin_dir: str, samples: int) -> list[dict]:
    """Every usable manifest entry over its declared dtypes and ranks in the contiguous
    layout, and every variant that applies to it (certify_inputs.VARIANTS) at a spread of
    ranks (quick run: at one rank, one dtype per kind); copy_ entries also cast between
    every pair of their dtypes."""
    from torch_fl.device.dtypes import NAME_OF_TORCH, TORCH_OF_CODE
    from torch_fl.tools import certify_inputs as ci

    st = find_plugin(plugin_dir)
    if st is None or not st.devices:
        return [_check("plugin has a device", False, "no device: entries cannot run")]
    every = samples >= 3
    out = []
    for op, entries in sorted(st.by_op.items()):
        for e in entries:
            names = [NAME_OF_TORCH[TORCH_OF_CODE[c]] for c in sorted(e.dtype_codes)]
            spread = entry_ranks(e.min_rank, e.max_rank, every=False)
            plan = _variant_plan(names, spread, every)
            for dname in names:
                for rank in sorted(set(entry_ranks(e.min_rank, e.max_rank, every)) | set(spread)):
                    for variant in ci.VARIANTS if rank in plan[dname] else ("contiguous",):
                        try:
                            res = run_entry(plugin_dir, op, dname, rank, variant, e.kernel)
                        except Exception as exc:  # building the inputs failed: say so, go on
                            res = _check(f"{op} {dname} rank {rank} {variant}", False, _short(exc))
                        if res["skipped"] and "does not apply" in res["detail"]:
                            continue
                        res["name"] = f"{res['name']} ({e.kernel})"
                        out.append(res)
                        if variant == "contiguous" and res["skipped"]:
                            break  # no inputs at this rank: the other variants have none either
            if op == "aten::copy_" and e.min_rank <= 1 <= e.max_rank:
                for src in names:
                    for dst in names:
                        for strided in (False, True) if not e.requires_contiguous else (False,):
                            if src != dst:
                                res = run_cast(plugin_dir, src, dst, strided, e.kernel)
                                res["name"] = f"{res['name']} ({e.kernel})"
                                out.append(res)
    return out


# ---- opinfo / modules / model ----------------------------------------------------------------


def section_opinfo(plugin_dir: str, samples: int) -> list[dict]:
    """A fixed sample of PyTorch's OpInfo database in float32 on the plugin's device."""
    from torch_fl.observe.conformance import load_op_db, opinfo_name

    device_of(plugin_dir)  # no device: the section fails here, once
    db = load_op_db()
    out = []
    for name in OPINFO_OPS:
        # An exact OpInfo name, else every variant of the op ("div" is div.no_rounding_mode,
        # div.trunc_rounding and div.floor_rounding in OpInfo).
        ops = [op for op in db if opinfo_name(op) == name] or [op for op in db if op.name == name]
        ops = [op for op in ops if torch.float32 in op.supported_dtypes("cpu")]
        if not ops:
            out.append(
                _check(f"opinfo {name}", False, f"not in this torch's OpInfo ({torch.__version__})", skipped=True)
            )
        for op in ops:
            out.append(run_opinfo(plugin_dir, opinfo_name(op), samples, op))
    return out


def run_opinfo(plugin_dir: str, name: str, samples: int, op=None) -> dict:
    """One OpInfo entry in float32 on the plugin's device against CPU."""
    from torch_fl.observe.conformance import load_op_db, opinfo_name, run_case

    op = op or next(o for o in load_op_db() if opinfo_name(o) == name)
    cov = torch_fl.Coverage()
    with cov:
        res = run_case(op, torch.float32, device_of(plugin_dir), max_samples=samples)
    repro = repro_command(
        f"from torch_fl.tools.certify_child import repro_opinfo; repro_opinfo({plugin_dir!r}, {name!r}, {samples})"
    )
    if not res.passed:
        return _failed(f"opinfo {name} float32", res.error, cov, plugin_dir, repro)
    return _check(f"opinfo {name} float32", True, "", res.tiers)


def repro_opinfo(plugin_dir: str, name: str, samples: int = 4) -> None:
    """Re-run one OpInfo check and print its outcome (a certificate's reproducer)."""
    print(json.dumps(run_opinfo(plugin_dir, name, samples), indent=2))


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
    repro = repro_command(f"from torch_fl.tools.certify_child import repro_section; repro_section('modules', {name!r})")
    try:
        y_cpu, g_cpu = _fwd_bwd(module, x, "cpu")
        with cov:
            y_dev, g_dev = _fwd_bwd(module, x, dev)
        torch.testing.assert_close(y_dev, y_cpu, rtol=rtol, atol=atol)
        assert g_dev.keys() == g_cpu.keys(), f"gradients for {sorted(g_dev)} vs {sorted(g_cpu)}"
        for k in g_cpu:
            torch.testing.assert_close(g_dev[k], g_cpu[k], rtol=rtol, atol=atol, msg=lambda m, k=k: f"grad {k}: {m}")
    except Exception as exc:
        return _failed(name, exc, cov, os.environ["TORCH_FL_CERTIFY_PLUGIN_DIR"], repro)
    return _check(name, True, f"output and {len(g_cpu)} parameter gradients match CPU", _tiers(cov), repro)


def _optimizer_case(name, dev, make_opt):
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    x, target = torch.randn(8, 6), torch.randn(8, 3)
    cov = torch_fl.Coverage()
    repro = repro_command(f"from torch_fl.tools.certify_child import repro_section; repro_section('modules', {name!r})")
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
        return _failed(name, exc, cov, os.environ["TORCH_FL_CERTIFY_PLUGIN_DIR"], repro)
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
    repro = repro_command("from torch_fl.tools.certify_child import repro_section; repro_section('model')")
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
        return [_failed("tiny model forward/backward/step", exc, cov, plugin_dir, repro)]
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
        for c in checks:  # every failure kind gets a reproducer: at least its whole section
            if c["state"] == "failed" and not c["repro"]:
                c["repro"] = repro_command(
                    f"from torch_fl.tools.certify_child import repro_section; repro_section({section!r})"
                )
        done.append({"section": section, "device": dev, "torch": torch.__version__, "checks": checks})
        done[-1]["seconds"] = round(time.perf_counter() - t0, 1)
        with open(a.out, "w") as f:
            json.dump(done, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
