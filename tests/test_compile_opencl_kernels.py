"""The OpenCL kernels compiled graphs run on ral:1, against eager CPU float32.

- Generated (jit) kernels walk chunks of elements per work-item (`*_chunks`, a few dozen
  work-items on a CPU runtime) and step 16 lanes at a time where every expression means the
  same on a vector (`torch_fl/jit/vector_cl.py`); strided chunks walk rows, 16 lanes at a
  time when the rows are contiguous or constant (a bias, a [rows, 1] column) in every tensor.
- The plugin's float32 row sums and row max/min (softmax's and layer norm's decomposed
  reductions, a log-softmax over logits) run as 16-lane CPU-shaped kernels.
- A transformer block's training step compiled with the default backend and with
  backend="ral", in both styles, against CPU: values and gradients.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

import torch_fl
from torch_fl.jit import fuse

pytestmark = pytest.mark.skipif(
    torch.ral.device_count() < 2, reason="ral:1 needs the OpenCL plugin (no OpenCL platform)"
)

DEV = "ral:1"
TOL = dict(rtol=1e-5, atol=1e-5)


def _chain(x, y):
    """Arithmetic only: the vector loop."""
    return (x * 0.5 + y) * (1.0 - x * x) - y / 3.0


def _select(x, y):
    """Conditions steering selections (a bool temporary tested against 0): the vector loop."""
    return torch.where(x > 0, y, x * y) + torch.relu(y - 0.25)


def _ints(x, y):
    """A cast to an integer dtype and back: the scalar loop."""
    return (x * 4.0).to(torch.int32).to(torch.float32) + y


def _bias(x, b):
    return (x + b) * 0.5 - b


def _column(x, c):
    return (x - c) * c + x


CASES = {
    "chain": (_chain, lambda: (torch.randn(4, 128, 1024), torch.randn(4, 128, 1024))),
    "chain_tail": (_chain, lambda: (torch.randn(4099), torch.randn(4099))),
    "chain_small": (_chain, lambda: (torch.randn(5), torch.randn(5))),
    "select": (_select, lambda: (torch.randn(70001), torch.randn(70001))),
    "ints": (_ints, lambda: (torch.randn(9000), torch.randn(9000))),
    "bias_rows": (_bias, lambda: (torch.randn(300, 257), torch.randn(257))),
    "column": (_column, lambda: (torch.randn(4, 128, 256), torch.randn(4, 128, 1))),
    "transposed": (_chain, lambda: (torch.randn(513, 130).t(), torch.randn(130, 513))),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("style", ["to", "mode"])
def test_fused_kernels_match_cpu(case, style):
    fn, make = CASES[case]
    torch.manual_seed(0)
    args = make()
    want = fn(*args)
    if style == "to":
        with fuse():
            got = fn(*(a.to(DEV) for a in args))
    else:
        with torch_fl.ral_mode(DEV), fuse():
            got = fn(*(a.to(DEV) for a in args))
    assert got.device == torch.device(DEV)
    torch.testing.assert_close(got.cpu(), want, **TOL)


def _profile(code: str, tmp_path) -> list[tuple[str, int, int]]:
    """(kernel, global size, local size) of every queued kernel `code` ran in a new process."""
    prof = tmp_path / "kernels.tsv"
    env = dict(os.environ, TORCH_FL_OPENCL_PROFILE=str(prof))
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    rows = []
    for line in prof.read_text().splitlines():
        name, g, loc = line.split("\t")[:3]
        rows.append((name, int(g.split("x")[0]), int(loc.split("x")[0])))
    return rows


_PROFILED = """
import torch, torch_fl
from torch_fl.jit import fuse
D = torch.device("ral:1")
x = torch.randn(1 << 19).to(D)
with fuse():
    y = (x * 0.5 + 1.0) * x
torch.ral.synchronize(D)
m = torch.randn(512, 2048).to(D)
torch.ral.synchronize(D)
m.amax(-1); m.amin(-1); m.sum(-1)
torch.ral.synchronize(D)
"""


def test_generated_kernels_walk_chunks_and_reductions_take_cpu_kernels(tmp_path):
    """A fused kernel over 2^19 floats runs as a few dozen work-items, each a chunk of 4096 or
    more (was one work-item per element); row max/min take the CPU-shaped kernel (was one
    work-group per row), row sums the chunked one."""
    rows = _profile(_PROFILED, tmp_path)
    gen = [r for r in rows if r[0].startswith("rlk_")]
    assert gen and all(name.endswith("_chunks") for name, _, _ in gen), gen
    assert all(g <= 128 and loc == 1 for _, g, loc in gen), gen
    names = [r[0] for r in rows]
    assert names.count("reduce_minmax_c") == 2 and "reduce_any" not in names, names
    assert "reduce_sum_c" in names


def test_vector_loop_only_where_lanes_mean_the_same():
    from torch_fl.jit.codegen_opencl import pointwise_cl
    from torch_fl.jit.expr import call, cast, var, where
    from torch_fl.jit.spec import PointwiseSpec
    from torch_fl.jit.vector_cl import vectorizable

    f32 = torch.float32
    a0, a1 = var("a0", f32), var("a1", f32)

    def spec(*lets, ins=(f32, f32), outs=(f32,), scalars=()):
        s = PointwiseSpec(outs=list(outs), ins=list(ins), scalars=list(scalars), lets=list(lets))
        s.stores = [(0, var(lets[-1][0], lets[-1][1].dt))]
        return s

    ctype = {f32: "float", torch.bool: "uchar", torch.int32: "int", torch.float64: "double"}.get
    arith = spec(("v0", a0 * 0.5 + a1 / var("s0", f32)), scalars=[(f32, "f")])
    cond = var("v0", torch.bool)
    chosen = spec(("v0", a0 > a1), ("v1", where(cond.ne(0), a0, call("fabs", a1))))
    assert vectorizable(arith) and vectorizable(chosen)
    src = pointwise_cl(chosen, "k", ctype)
    assert "vload16(0, p1 + off1 + i)" in src and "const int16 v0 = (a0 > a1);" in src
    chosen.inner_steps = (1, 0)  # rows of a1 against a [rows, 1] column a2
    rows = pointwise_cl(chosen, "k", ctype)
    assert "const float16 a1 = (float16)(p2[x2]);" in rows and "vload16(0, p1 + x1 + j)" in rows
    refused = {
        "cast to int": spec(("v0", cast(a0, torch.int32)), outs=(torch.int32,)),
        "bool as a number": spec(("v0", a0 > a1), ("v1", cast(var("v0", torch.bool), f32) * a1)),
        "float64 input": spec(("v0", var("a0", torch.float64) * 2.0), ins=(torch.float64,), outs=(torch.float64,)),
        "sin": spec(("v0", call("sin", a0))),
        "int scalar": spec(("v0", a0 * cast(var("s0", torch.int64), f32)), scalars=[(torch.int64, "i")]),
    }
    for why, s in refused.items():
        assert not vectorizable(s), why
        assert "vload16" not in pointwise_cl(s, "k", ctype), why
    # tanh: PoCL's vector tanh with the plugin's +-1 rule in the 16-lane loop (as its own
    # tanh kernel computes), the scalar rule in the tail
    tanh = spec(("v0", call("tanh", a0) * a1))
    assert vectorizable(tanh)
    src = pointwise_cl(tanh, "k", ctype)
    assert "ral_tanh16(a0)" in src and "ral_tanh(a0)" in src and "vload16" in src


REDUCTIONS = [
    ("sum", (512, 256), -1),
    ("sum", (37, 70), -1),
    ("mean", (4, 128, 256), -1),
    ("sum", (4, 128, 256), 1),  # strided rows: the scalar walk
    ("amax", (512, 2048), -1),
    ("amin", (33, 70), -1),
    ("amax", (64, 8), -1),  # rows shorter than one vector
    ("amax", (40, 50), 0),  # strided
]


@pytest.mark.parametrize(
    "op,shape,dim", REDUCTIONS, ids=[f"{o}-{'x'.join(map(str, s))}-d{d}" for o, s, d in REDUCTIONS]
)
def test_row_reductions_match_cpu(op, shape, dim):
    torch.manual_seed(0)
    x = torch.randn(shape) * 3
    x.view(-1)[7] = float("nan")  # row 0 (dim -1) holds a NaN
    x.view(-1)[shape[-1] * 2 + 1] = float("inf")
    x.view(-1)[-3] = float("-inf")
    want = getattr(x, op)(dim, keepdim=True)
    got = getattr(x.to(DEV), op)(dim, keepdim=True).cpu()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


class _Block(torch.nn.Module):
    """GPT-2's shapes in miniature: layer norms, tanh-GELU MLP, causal softmax attention
    written out (so inductor decomposes it), a cross-entropy head over a wide vocabulary."""

    def __init__(self, d=32, vocab=600):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x, labels):
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        s = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        mask = torch.ones(s.shape[-2:], dtype=torch.bool, device=x.device).tril()
        h = x + self.proj(s.masked_fill(~mask, float("-inf")).softmax(-1) @ v)
        h = h + self.down(torch.nn.functional.gelu(self.up(self.ln2(h)), approximate="tanh"))
        logits = self.head(h)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


@pytest.mark.parametrize("backend", ["inductor", "ral"])
@pytest.mark.parametrize("style", ["to", "mode"])
def test_compiled_block_training_matches_cpu(backend, style):
    torch.manual_seed(0)
    model = _Block()
    x, labels = torch.randn(2, 24, 32), torch.randint(0, 600, (2, 24))
    ref = copy.deepcopy(model)
    loss_ref = ref(x, labels)
    loss_ref.backward()

    torch._dynamo.reset()
    if style == "to":
        dev = model.to(DEV)
        loss = torch.compile(dev, backend=backend)(x.to(DEV), labels.to(DEV))
        loss.backward()
    else:
        with torch_fl.ral_mode(DEV):
            dev = model.to(DEV)
            loss = torch.compile(dev, backend=backend)(x.to(DEV), labels.to(DEV))
            loss.backward()
    torch.testing.assert_close(loss.cpu(), loss_ref, rtol=1e-5, atol=1e-5)
    for (name, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")


class _Norms(torch.nn.Module):
    """Layer norms of every kind of affinity between two Linears (inductor decomposes their
    backward into row sums, products and column sums)."""

    def __init__(self, d=48):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.full = torch.nn.LayerNorm(d)
        self.no_bias = torch.nn.LayerNorm(d, bias=False)
        self.plain = torch.nn.LayerNorm(d, elementwise_affine=False)

    def forward(self, x):
        h = self.full(self.l1(x))
        return self.l2(self.plain(self.no_bias(h) * 1.5 + h)).pow(2).mean()


def test_layer_norm_backward_runs_as_the_device_op():
    """The default backend's decomposed layer norm backward becomes the device's
    native_layer_norm_backward (weighted norms, with or without bias; a norm without weight
    keeps the decomposition): gradients against CPU."""
    torch.manual_seed(0)
    model, x = _Norms(), torch.randn(3, 20, 48)
    ref = copy.deepcopy(model)
    ref(x).backward()
    dev = model.to(DEV)
    torch._dynamo.reset()
    fn = torch.compile(dev)
    fn(x.to(DEV)).backward()  # compiles, partitions the graphs for these inputs
    dev.zero_grad()
    with torch_fl.coverage() as cov:
        loss = fn(x.to(DEV))
        loss.backward()
    torch.testing.assert_close(loss.cpu(), ref(x), rtol=1e-5, atol=1e-6)
    for (name, p), (_, q) in zip(dev.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}")
    calls = {r["op"]: r["calls"] for r in cov.rows() if r["tier"] == "vendor"}
    assert calls.get("aten::native_layer_norm_backward") == 2, calls


def _saved_mask(x):
    """A shape-only mask (cumsum: no device kernel on ral:1) that the backward needs: the
    forward graph returns it (expanded) as a saved tensor."""
    n = x.shape[-1]
    seg = torch.cumsum(torch.arange(n, device=x.device) % 3 != 1, -1)
    mask = ((seg[None, :] == seg[:, None]) | torch.ones(n, n, dtype=torch.bool, device=x.device).tril()).expand(x.shape)
    return torch.where(mask, x, -1.0).softmax(-1) * torch.where(mask, x, 0.5)


@pytest.mark.parametrize("backend", ["inductor", "ral"])
def test_saved_shape_only_mask_is_folded(backend, monkeypatch):
    """The mask is computed once (it depends on no input) even though the graph returns it
    for the backward: later steps wait for the device nowhere (cumsum took the cpu tier
    each step); values and gradients against CPU."""
    from torch_fl.device import sync

    torch._dynamo.reset()
    f = torch.compile(_saved_mask, backend=backend)
    x0 = torch.randn(3, 6, 6).to(DEV).requires_grad_()
    f(x0).sum().backward()
    x = torch.randn(3, 6, 6)
    xd = x.to(DEV).requires_grad_()
    syncs = []
    monkeypatch.setattr(sync, "SYNC_OBSERVERS", [lambda dev, why: syncs.append(why)])
    out = f(xd)
    out.backward(torch.ones_like(out))
    monkeypatch.setattr(sync, "SYNC_OBSERVERS", [])
    assert syncs == [], syncs
    xc = x.clone().requires_grad_()
    want = _saved_mask(xc)
    want.backward(torch.ones_like(want))
    torch.testing.assert_close(out.cpu(), want, **TOL)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
