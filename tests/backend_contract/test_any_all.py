"""`any` / `all` in every overload (no dim, one dim, a dim list, None, an empty list, keepdim)
over bool, uint8, int64, float and complex inputs, empty and 0-dim ones included: CPU's values,
dtypes and errors on both devices, in both styles, exactly. An empty dim list reduces nothing
(x != 0), unlike sum's: the OpenCL plugin reduced everything and wrote the result into the
first element of an otherwise unwritten tensor (dispatch/special.py `_reduce_over_no_dims`).
The host plugin runs bool `any` as its own kernels (HF's generate checks each token with one)."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _inputs():
    g = torch.Generator().manual_seed(0)
    return [
        torch.rand(4, 5, generator=g) > 0.7,
        torch.zeros(3, 2, dtype=torch.bool),
        (torch.rand(2, 3, 4, generator=g) > 0.8).transpose(0, 2),  # strided
        torch.ones(3, 4, dtype=torch.bool),
        torch.empty(0, 3, dtype=torch.bool),
        torch.empty(2, 0, dtype=torch.bool),
        torch.tensor(True),
        torch.tensor([[0, 2], [3, 0]], dtype=torch.uint8),
        torch.tensor([[0, -2], [0, 0]]),
        torch.randn(3, 4, generator=g).relu(),
        torch.tensor([0j, 1j]),
    ]


_FORMS = [
    lambda t: t.any(),
    lambda t: t.all(),
    lambda t: t.any(dim=0),
    lambda t: t.all(dim=-1, keepdim=True),
    lambda t: torch.any(t, dim=(0,)),
    lambda t: torch.any(t, dim=None),
    lambda t: torch.any(t, dim=[]),
    lambda t: torch.all(t, dim=()),
    lambda t: torch.any(t, dim=[], keepdim=True),
    lambda t: torch.any(t, dim=(0, -1), keepdim=True),
    lambda t: torch.all(t, dim=(0, -1)),
]


def _calls(dev):
    on = (lambda t: t) if dev is None else (lambda t: t.to(dev))
    return [lambda t=t, f=f: f(on(t)) for t in _inputs() for f in _FORMS]


@pytest.mark.parametrize("device", DEVICES)
def test_any_all_match_cpu(device):
    expected = outcomes(_calls("cpu"))
    check_outcomes(outcomes(_calls(device)), expected)
    with torch_fl.ral_mode(device):
        check_outcomes(outcomes(_calls(None)), expected)


def test_host_plugin_serves_bool_any():
    x = torch.rand(6, 7, generator=torch.Generator().manual_seed(1)) > 0.8
    d = x.to("ral:0")
    with torch_fl.coverage() as cov:
        got = [d.any(), d.any(dim=1), torch.any(d, dim=(0, 1), keepdim=True)]
    assert {k for k in cov.counts} == {
        ("aten::any", "vendor"),
        ("aten::any.dim", "vendor"),
        ("aten::any.dims", "vendor"),
    }
    want = [x.any(), x.any(dim=1), torch.any(x, dim=(0, 1), keepdim=True)]
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and torch.equal(g.cpu(), w)
