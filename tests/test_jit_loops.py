"""The loop shapes of generated host kernels, against CPU on both devices (OpenCL kernels
have neither, so ral:1 checks the same chains through its own kernels):

- staged loops (torch_fl/jit/staging.py): a fused kernel whose math calls depend on each
  other runs as one loop per call depth over blocks, handing call results on through
  temporaries; in each dtype a fused kernel computes, in a fuse() region and under
  torch.compile(backend="ral"), forward and backward;
- unit-stride row loops (codegen_c._unit_rows_kernel): a launch that is not dense (a bias broadcast
  over rows, a [rows, 1] column, rows of a wider tensor) but whose innermost dim is contiguous
  in every tensor or broadcast along it (stride 0) in some inputs loads those once per row and
  vectorises the rest; a transposed input keeps the general row loop."""

from __future__ import annotations

import pytest
import torch
from test_jit import DEVS

import torch_fl.jit as J
from torch_fl.jit import codegen_c, staging
from torch_fl.jit.expr import call, var
from torch_fl.jit.spec import PointwiseSpec
from torch_fl.jit.target import target_of


def _chains():
    """Chains of math calls two to four deep, with shared subexpressions and two outputs."""

    def nested(x, y):
        s = torch.sigmoid(x)
        return torch.tanh(x * s + y) * torch.exp(-0.5 * y * y) + s

    def gated(x, y):  # pointwise_mlp's activation block
        a = torch.nn.functional.silu(x) * y
        a = a * torch.sigmoid(1.702 * a) + 0.1 * torch.tanh(y)
        return torch.nn.functional.gelu(a, approximate="tanh") * torch.exp(-0.5 * y * y) + a

    def deep(x, y):
        return torch.sin(torch.atan(torch.tanh(torch.cos(x) + y) * 2) - y)

    def two_outputs(x, y):
        t = torch.tanh(x)
        u = torch.sigmoid(t * y)
        return u * t, torch.where(u > 0.5, torch.exp(-u), t)

    return {"nested": nested, "gated": gated, "deep": deep, "two_outputs": two_outputs}


CHAINS = _chains()
TOL = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-12, 1e-12), torch.bfloat16: (1.6e-2, 1e-2)}


def _inputs(dtype, dev=None):
    g = torch.Generator().manual_seed(0)
    # 3000 elements: eleven full blocks and a partial one, split across the host's threads
    x, y = (torch.randn(3, 1000, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    return (x, y) if dev is None else (x.to(f"ral:{dev}"), y.to(f"ral:{dev}"))


def _compare(got, want, dtype):
    rtol, atol = TOL[dtype]
    for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(a.cpu(), b, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("dtype", sorted(TOL, key=str), ids=str)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_chained_math_in_a_fuse_region_matches_cpu(dev, dtype, name, sources):
    target = target_of(dev)
    if dtype == torch.bfloat16 and dtype not in target.lowp:
        pytest.skip(f"ral:{dev} does not store bfloat16, so no fused kernel computes it")
    if dtype == torch.float64 and target.lang != "c":
        pytest.skip(
            "OpenCL kernels are not staged: float32 and bfloat16 check the chains there (PoCL compiles cost CI)"
        )
    fn = CHAINS[name]
    with J.fuse():
        got = fn(*_inputs(dtype, dev))
    _compare(got, fn(*_inputs(dtype)), dtype)
    assert sources, "the chain compiled no fused kernel"
    if target.lang == "c":  # the host stages it: "blk_n" is the block loop's length
        assert any("blk_n" in s for s in sources), "the chain's host kernel was not staged"


class _GatedBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 32)

    def forward(self, x):
        h = self.lin(x)
        return CHAINS["gated"](h, h * 0.5)


def _train(model, x, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("dev", DEVS)
def test_staged_training_under_compile_matches_cpu(dev, sources):
    """pointwise_mlp's activation block trained with backend="ral" (its forward and backward
    kernels are both staged on the host) against the same steps on CPU."""
    torch.manual_seed(0)
    block, x = _GatedBlock(), torch.randn(256, 8)
    dev_block = _GatedBlock().to(f"ral:{dev}")
    dev_block.load_state_dict(block.state_dict())
    try:
        got = _train(torch.compile(dev_block, backend="ral"), x.to(f"ral:{dev}"))
    finally:
        torch._dynamo.reset()
    for a, b in zip(got, _train(block, x)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    if target_of(dev).lang == "c":
        assert sum("blk_n" in s for s in sources) >= 2, "forward and backward kernels should both be staged"


def test_stages_follow_call_depth_and_hand_on_only_call_results():
    f32 = torch.float32
    a0, a1 = var("a0", f32), var("a1", f32)
    v0 = call("tanh", a0) * a1  # depth 1
    v1 = call("exp", v0 * 2.0) + v0  # depth 2
    lets = [("v0", v0), ("v1", v1), ("v2", call("tanh", a0) + call("sin", v1))]
    stores = [(0, var("v2", f32)), (1, var("v0", f32))]
    ctype = lambda dt: "float"  # noqa: E731
    lets, stores, calls = staging.hoist_calls(lets, stores, codegen_c._MATH_CALLS.__contains__, ctype)
    assert len(calls) == 3, "tanh(a0) appears twice and is bound once"
    parts = staging.stages(lets, stores, calls)
    assert [[n for n, _ in st.lets if n in calls] for st in parts] == [["call0"], ["call1"], ["call2"]]
    assert parts[2].reads == ["call0", "call1"], "later stages read call results, not v0 or v1"
    assert [st.writes for st in parts] == [["call0"], ["call1"], []]
    assert [i for i, _ in parts[0].stores] == [1] and [i for i, _ in parts[2].stores] == [0]
    assert parts[1].inputs == {1}, "stage 1 recomputes v0 from call0 and a1"


def test_independent_calls_stay_in_one_loop():
    f32 = torch.float32
    a0 = var("a0", f32)
    spec = PointwiseSpec(outs=[f32], ins=[f32], lets=[("v0", call("exp", a0) + call("tanh", a0))])
    spec.stores = [(0, var("v0", f32))]
    assert "blk_n" not in codegen_c.pointwise_c(spec, "k", lambda dt: "float")
    assert codegen_c._staged_loops(spec, lambda dt: "float", lambda k: "i", "i", "begin", "end") is None


def _broadcasts():
    """name -> (function, input shapes, takes the unit-stride row loop): row and column
    broadcasts in a fused chain, rows of a wider tensor (contiguous inner dim, strided rows),
    and a transposed input that must take the general row loop."""
    act = lambda x: torch.tanh(x * torch.sigmoid(x))  # noqa: E731

    return {
        "bias_row": (lambda x, b: act(x) * b + b, [(64, 96), (96,)], True),
        "column": (lambda x, c: act(x + c) - c, [(64, 96), (64, 1)], True),
        "two_rows": (lambda x, b, s: act(x * s) + b, [(8, 16, 96), (96,), (16, 96)], True),
        "sliced_rows": (lambda x, y: act(x[:, :96]) + y, [(64, 128), (64, 96)], True),
        "transposed": (lambda x, y: act(x) + y.t(), [(64, 96), (96, 64)], False),
    }


BROADCASTS = _broadcasts()


@pytest.mark.parametrize("dev", DEVS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(BROADCASTS))
def test_broadcast_operands_in_fused_chains_match_cpu(dev, dtype, name, sources):
    target = target_of(dev)
    if dtype not in target.lowp and dtype != torch.float32:
        pytest.skip(f"ral:{dev} does not store {dtype}, so no fused kernel computes it")
    fn, shapes, unit = BROADCASTS[name]
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    with J.fuse():
        got = fn(*[x.to(f"ral:{dev}") for x in xs])
    _compare(got, fn(*xs), dtype)
    assert sources, "the chain compiled no fused kernel"
    if target.lang == "c":
        assert any("_unit_rows" in s for s in sources) == unit, (
            "a row or column broadcast takes the vectorised row loop; a transposed input does not"
        )
        # its chained calls are staged inside each row like the dense loop's
        assert not unit or any("_unit_rows" in s and "const int64_t j = blk + q;" in s for s in sources)
