"""Inductor's decomposed ops respelled for device kernels (torch_fl/jit/inductor_lower.py).

The default compile backend on a device without host-mappable memory runs inductor's
decomposed graph as one extern call; `var_mean`, advanced `index` and the embedding
backward's `_unsafe_masked_index_put_accumulate` have no OpenCL kernel and took the cpu tier
(a host copy and a wait each). Each is checked against the same graph on CPU float32 and for
leaving the cpu tier unused, on both devices (the rewrite runs wherever the extern call does),
and end to end through `torch.compile` on ral:1."""

from __future__ import annotations

import pytest
import torch

import torch_fl

aten = torch.ops.aten
TOL = dict(rtol=1e-5, atol=1e-5)


def _dev(name: str):
    have = torch.ral.device_count() > int(name.split(":")[1])
    return pytest.param(name, marks=pytest.mark.skipif(not have, reason=f"{name} is not present"), id=name)


DEVICES = [_dev("ral:0"), _dev("ral:1")]


def _graph(x, a, b, i32, idx, mask, values, dest):
    v, m = aten.var_mean.correction(x, [1], correction=0, keepdim=True)
    picked = aten.index.Tensor(x, [a, b])  # two broadcast index tensors, negative entries
    rows = aten.index.Tensor(values, [i32])  # one int32 index: the embedding forward's spelling
    zeros = aten.new_zeros.default(dest, [6, 5])  # the fill inductor's graphs start from
    grad = aten._unsafe_masked_index_put_accumulate.default(zeros, mask, [idx], values)
    onto = aten._unsafe_masked_index_put_accumulate.default(dest, mask, [idx], values)
    return v, m, picked, rows, grad, onto


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, generator=g)
    a = torch.tensor([[0], [3], [-1]])
    b = torch.tensor([1, -2, 6, 0])
    i32 = torch.tensor([2, 0, -1], dtype=torch.int32)
    idx = torch.tensor([[0, 5, 5], [-1, 2, 5], [3, 0, 9], [1, 1, 4]])  # repeats, negative, 9 out of range
    mask = ((idx >= 0) & (idx < 6) & (idx != 4)).unsqueeze(-1)  # valid and not the padding row 4
    values = torch.randn(4, 3, 5, generator=g)
    dest = torch.randn(6, 5, generator=g)
    return [x, a, b, i32, idx, mask, values, dest]


@pytest.mark.parametrize("device", DEVICES)
def test_lowered_graph_matches_cpu_without_cpu_tier(device):
    from torch_fl.jit.inductor_graph import _partitioned

    gm = torch.fx.symbolic_trace(_graph)
    cpu_args = _inputs()
    want = _graph(*cpu_args)
    args = [t.to(device) for t in cpu_args]
    part = _partitioned(gm, args)
    with torch_fl.coverage() as cov:
        got = part(*args)
    for w, o in zip(want, got):
        assert o.device == torch.device(device)
        torch.testing.assert_close(o.cpu(), w, **TOL)
    assert cov.ops_in_tier("cpu") == []


def test_compiled_embedding_layer_norm_step_on_ral1_uses_no_cpu_tier():
    if torch.ral.device_count() < 2:
        pytest.skip("ral:1 is not present (the OpenCL plugin)")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16, padding_idx=3)
            self.norm = torch.nn.LayerNorm(16)

        def forward(self, ids):
            return self.norm(self.emb(ids)).tanh()

    torch.manual_seed(0)
    ref = M()
    ids = torch.tensor([[1, 3, 7, 7], [49, 0, 3, 2]])
    model = M().to("ral:1")
    model.load_state_dict(ref.state_dict())
    torch._dynamo.reset()
    fn = torch.compile(model)
    fn(ids.to("ral:1")).sum().backward()  # compiles (the first call partitions per geometry)
    model.zero_grad()
    with torch_fl.coverage() as cov:
        out = fn(ids.to("ral:1"))
        out.pow(2).sum().backward()
    want = ref(ids)
    want.pow(2).sum().backward()
    torch.testing.assert_close(out.cpu(), want, **TOL)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL, msg=name)
    assert cov.ops_in_tier("cpu") == []


def _layer_norm_graph(x, w):
    v, m = aten.var_mean.correction(x, [-1], correction=0, keepdim=True)  # layer norm's decomposition
    out = aten.mul.Tensor(aten.mul.Tensor(aten.sub.Tensor(x, m), aten.rsqrt.default(aten.add.Tensor(v, 1e-5))), w)
    v2, m2 = aten.var_mean.correction(x, [-1], correction=0, keepdim=True)  # variance used as is
    return out, m, v2 * 2, m2


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_statistics_take_the_layer_norm_kernel(device):
    """var_mean whose variance only meets `+ eps` (layer norm) runs as native_layer_norm's mean
    and rstd; one whose variance is used as is stays var + mean. Constant rows (variance 0)
    included."""
    from torch_fl.jit.inductor_graph import _partitioned

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g) * 3 + 1
    x[1, 2] = 0.25
    w = torch.randn(16, generator=g)
    want = _layer_norm_graph(x, w)
    args = [x.to(device), w.to(device)]
    part = _partitioned(torch.fx.symbolic_trace(_layer_norm_graph), args)
    with torch_fl.coverage() as cov:
        got = part(*args)
    for o, ref in zip(got, want):
        torch.testing.assert_close(o.cpu(), ref, **TOL)
    ran = set(cov.ops_in_tier("vendor")) | set(cov.ops_in_tier("jit")) | set(cov.ops_in_tier("decomp"))
    assert "aten::native_layer_norm" in ran
    assert cov.ops_in_tier("cpu") == []
