"""Capability: the KernelRouter (tiers, caching, manifest constraints, reload, overrides)."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from conftest import REPO, assert_close, run_python

import torch_fl
from torch_fl.dispatch import router


@pytest.fixture(scope="module")
def template_root(tmp_path_factory) -> Path:
    """A plugin root holding a freshly built copy of plugins/template."""
    root = tmp_path_factory.mktemp("plugins")
    out = root / "template"
    out.mkdir()
    subprocess.run(["make", "-s", "-C", str(REPO / "plugins" / "template"), f"OUT={out}"], check=True)
    shutil.copy(REPO / "manifests" / "template.json", out / "manifest.json")
    return root


def _manifest(root: Path) -> Path:
    return root / "template" / "manifest.json"


def _run(root: Path, code: str, **env):
    res = run_python(
        "import torch, torch_fl\nDEV = 'ral:%d' % (torch.ral.device_count() - 1)\n" + code,
        env={"TORCH_FL_PLUGIN_PATH": str(root), **env},
    )
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    return res.stdout


def test_decision_is_cached_per_signature(dev):
    a = torch.randn(8).to(dev)
    router.invalidate()
    a + a
    n = len(router.DECISIONS)
    for _ in range(5):
        a + a
    assert len(router.DECISIONS) == n
    a.view(2, 4) + a.view(2, 4)
    assert len(router.DECISIONS) == n + 1


def test_coverage_counts_tiers(dev):
    a = torch.randn(8, 8).to(dev)
    with torch_fl.coverage() as cov:
        for _ in range(3):
            a + a
    assert cov.counts[("aten::add.Tensor", "vendor")] == 3
    assert cov.tier_shares() == {"vendor": 1.0}


def test_api_override_forces_cpu_and_back(dev):
    a = torch.randn(16).to(dev)
    try:
        torch_fl.set_op_override("aten::add.Tensor", "cpu")
        with torch_fl.coverage() as cov:
            out = a + a
        assert cov.counts[("aten::add.Tensor", "cpu")] == 1
        assert_close(out, a.cpu() * 2)
    finally:
        torch_fl.set_op_override("aten::add.Tensor", None)
    with torch_fl.coverage() as cov:
        a + a
    assert cov.counts[("aten::add.Tensor", "vendor")] == 1


def test_override_unknown_op_or_tier_is_clear():
    with pytest.raises(LookupError, match="unknown operator"):
        torch_fl.set_op_override("aten::not_an_op.Tensor", "cpu")
    with pytest.raises(ValueError, match="tier must be one of"):
        torch_fl.set_op_override("aten::add.Tensor", "gpu")


def test_env_override(template_root):
    out = _run(
        template_root,
        """
        a = torch.ones(4, device=DEV)
        with torch_fl.coverage() as cov:
            b = a + a
        print(dict(cov.counts), b.sum().item())
    """.replace("\n        ", "\n"),
        TORCH_FL_OP_aten_add_Tensor="cpu",
    )
    assert "('aten::add.Tensor', 'cpu'): 1" in out and "8.0" in out


def test_manifest_constraints(template_root):
    out = _run(
        template_root,
        """
        def tier(fn):
            with torch_fl.coverage() as cov:
                r = fn()
            return sorted(t for (op, t) in cov.counts if op == "aten::add.Tensor"), r
        a = torch.randn(6, 5).to(DEV)
        print("f32", tier(lambda: a + a)[0])
        print("f64", tier(lambda: a.double() + a.double())[0])
        t, r = tier(lambda: a.t() + a.t())          # strided: made contiguous on the device
        torch.testing.assert_close(r.cpu(), a.cpu().t() * 2)
        print("strided", t)
        t, r = tier(lambda: a + torch.ones(5, device=DEV))   # broadcast: expanded on the device
        torch.testing.assert_close(r.cpu(), a.cpu() + 1)
        print("bcast", t)
    """.replace("\n        ", "\n"),
    )
    assert "f32 ['vendor']" in out
    assert "f64 ['cpu']" in out
    assert "strided ['vendor']" in out
    assert "bcast ['vendor']" in out


def test_rank_numel_constraints_and_reload(template_root, tmp_path):
    root = tmp_path / "plugins"
    shutil.copytree(template_root, root)
    m = json.loads(_manifest(root).read_text())
    m["kernels"][0]["max_rank"] = 1
    m["kernels"][0]["max_numel"] = 100
    _manifest(root).write_text(json.dumps(m))
    out = _run(
        root,
        f"""
        import json, pathlib
        def tier(fn):
            with torch_fl.coverage() as cov:
                fn()
            return [t for (op, t) in cov.counts if op == "aten::add.Tensor"]
        a1 = torch.ones(50, device=DEV); a2 = torch.ones(5, 5, device=DEV); big = torch.ones(500, device=DEV)
        print("rank1", tier(lambda: a1 + a1), "rank2", tier(lambda: a2 + a2), "big", tier(lambda: big + big))
        p = pathlib.Path({str(_manifest(root))!r})
        m = json.loads(p.read_text()); m["kernels"] = m["kernels"][1:]; p.write_text(json.dumps(m))
        torch_fl.reload_manifests()
        print("reloaded", tier(lambda: a1 + a1), (a1 + a1).sum().item())
    """.replace("\n        ", "\n"),
    )
    assert "rank1 ['vendor'] rank2 ['cpu'] big ['cpu']" in out
    assert "reloaded ['cpu'] 100.0" in out


def test_missing_symbol_degrades_and_falls_back(template_root, tmp_path):
    root = tmp_path / "plugins"
    shutil.copytree(template_root, root)
    m = json.loads(_manifest(root).read_text())
    m["kernels"][0]["kernel"] = "template_no_such_symbol"
    _manifest(root).write_text(json.dumps(m))
    out = _run(
        root,
        """
        p = [p for p in torch_fl.plugins() if p.record.name == "template"][0]
        print(p.status, "|", p.reason)
        a = torch.arange(4.0, device=DEV)
        with torch_fl.coverage() as cov:
            r = a + a
        print(dict(cov.counts), r.tolist())
    """.replace("\n        ", "\n"),
    )
    assert "DEGRADED | 1 manifest entry disabled: aten::add.Tensor" in out
    assert "template_no_such_symbol" in out
    assert "('aten::add.Tensor', 'cpu'): 1" in out and "[0.0, 2.0, 4.0, 6.0]" in out


def test_entries_refuse_dtypes_the_device_lacks():
    from torch_fl.core.dtype_names import CODE_OF_NAME
    from torch_fl.core.manifest import KernelEntry
    from torch_fl.core.registry import refuse_unsupported_dtypes

    entry = KernelEntry(
        "aten::add.Tensor", "k", frozenset({CODE_OF_NAME["float32"], CODE_OF_NAME["float16"]}), 0, 8, False
    )
    no_fp16 = sum(1 << c for n, c in CODE_OF_NAME.items() if n != "float16")
    kept, refused = refuse_unsupported_dtypes(entry, no_fp16)
    assert refused == ["float16"] and kept.dtype_codes == {CODE_OF_NAME["float32"]}
    assert refuse_unsupported_dtypes(entry, (1 << 12) - 1) == (entry, [])


def test_plugin_status_names_refused_dtypes(template_root, tmp_path):
    root = tmp_path / "plugins"
    shutil.copytree(template_root, root)
    m = json.loads(_manifest(root).read_text())
    m["kernels"][0]["dtypes"] = ["float32", "float16"]
    _manifest(root).write_text(json.dumps(m))
    out = _run(
        root,
        """
        p = [p for p in torch_fl.plugins() if p.record.name == "template"][0]
        print(p.status, "|", p.reason)
    """.replace("\n        ", "\n"),
        RAL_TEMPLATE_NO_FP16="1",
    )
    # the device lacks a dtype: LOADED with a note, not DEGRADED (that is for real faults)
    assert "LOADED | float16: not supported by this device" in out, out


def test_forced_tier_that_declines_warns_once_and_the_chain_serves_the_call(dev):
    # atan2 has no vendor kernel on either built-in plugin: forcing vendor cannot work.
    x = torch.rand(8) + 0.5
    rx = x.to(dev)
    try:
        torch_fl.set_op_override("aten::atan2", "vendor")
        with pytest.warns(UserWarning, match=r"aten::atan2 is forced to tier 'vendor'.*cannot run") as caught:
            with torch_fl.coverage() as cov:
                out = torch.atan2(rx, rx)
                again = torch.atan2(rx, rx + 1)
        assert sum("forced to tier" in str(w.message) for w in caught) == 1, "warned more than once"
        atan2_tiers = {tier: n for (op, tier), n in cov.counts.items() if op == "aten::atan2"}
        assert "vendor" not in atan2_tiers and sum(atan2_tiers.values()) == 2, atan2_tiers
        assert_close(out, torch.atan2(x, x))
        assert_close(again, torch.atan2(x, x + 1))
        assert "no manifest entry" in router.VENDOR_MISS[("aten::atan2", int(dev.split(":")[1]))]
    finally:
        torch_fl.set_op_override("aten::atan2", None)


def test_special_op_table_refuses_a_second_handler():
    from torch_fl.dispatch.special import SPECIAL, special

    op = torch.ops.aten.copy_.default
    before = SPECIAL[op]
    with pytest.raises(RuntimeError, match="already has a special handler"):
        special(op)(lambda func, args, kwargs: None)
    assert SPECIAL[op] is before


def test_every_tier_builder_follows_the_protocol(dev):
    # The router owns the chain: a builder either returns a run that names its tier or
    # raises Declined; none of them falls through to another tier on its own.
    from torch_fl.tensor.op_schema import schema_of
    from torch_fl.tiers.protocol import Declined

    a = torch.randn(4).to(dev)
    func = torch.ops.aten.atan2.default
    sch = schema_of(func)
    full = sch.normalize((a, a), {})
    index = int(dev.split(":")[1])
    for tier in router.TIERS:
        try:
            run = router.BUILDERS[tier](sch, (a, a), {}, full, index)
        except Declined as exc:
            assert str(exc), f"{tier} declined without a reason"
            continue
        assert run.tier == tier


# In-place overloads PyTorch does not tag pointwise although their functional twins are:
# their tensor arguments broadcast all the same (a norm's backward calls masked_fill_ with a
# broadcast mask, which the vendor tier once passed unexpanded to a kernel that refused it).
_INPLACE_TWINS = {
    "masked_fill_": lambda a, b: a.masked_fill_(b > 0, 0.5),
    "copysign_": lambda a, b: a.copysign_(b),
    "lt_": lambda a, b: a.lt_(b),
    "ne_": lambda a, b: a.ne_(b),
    "heaviside_": lambda a, b: a.heaviside_(b),
    "true_divide_": lambda a, b: a.true_divide_(b),
}


@pytest.mark.parametrize("dev", ["ral:0", "ral:1"])
@pytest.mark.parametrize("name", list(_INPLACE_TWINS))
def test_inplace_twins_of_pointwise_ops_broadcast(dev, name):
    if torch.ral.device_count() <= int(dev[-1]):
        pytest.skip(f"{dev} is not present")
    fn = _INPLACE_TWINS[name]
    torch.manual_seed(0)
    x = torch.randn(3, 4) * 3
    for other in (torch.randn(4) * 3, torch.randn(3, 1) * 3):  # row and column broadcasts
        expected = fn(x.clone(), other)
        got = fn(x.to(dev), other.to(dev))
        assert_close(got, expected, rtol=0, atol=0)


def test_inplace_twins_count_as_pointwise():
    from torch_fl.tensor.op_schema import schema_of

    aten = torch.ops.aten
    for op in (aten.masked_fill_.Scalar, aten.copysign_.Tensor, aten.lt_.Tensor, aten.true_divide_.Tensor):
        assert torch.Tag.pointwise not in op.tags and schema_of(op).pointwise, op
    assert not schema_of(aten.index_put_.default).pointwise  # its twin is not pointwise either
    assert not schema_of(aten.masked_fill_.Tensor).pointwise  # no tagged twin: BROADCASTING_OPS lists it
