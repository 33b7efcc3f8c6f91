"""`torch.max(x)` / `torch.min(x)` (the full reductions, `aten::max` / `aten::min`) give CPU's
value and dtype on both devices and in both styles, without the cpu tier: no plugin has a
kernel for them, torch._decomp has no decomposition, so each call was a sync and a CPU
kernel (HF's generate takes one per token). tiers/decomp.py runs them as amax/amin; an empty
input raises CPU's own error, naming max()/min(). Values exactly equal (NaN equal NaN)."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, generator=g)
    return [
        x,
        x.t(),  # strided
        torch.tensor([1.0, float("nan"), 2.0]),
        torch.tensor([float("-inf"), -1.0]),
        torch.tensor(3.5),  # 0-dim
        torch.tensor([3, -9, 7]),
        torch.tensor([200, 3], dtype=torch.uint8),
        torch.tensor([True, False]),
        torch.tensor([False]),
        x.to(torch.bfloat16),
        x.to(torch.float16),
        torch.empty(0),
        torch.empty(2, 0, dtype=torch.int64),
    ]


def _calls(dev):
    on = (lambda t: t) if dev is None else (lambda t: t.to(dev))
    return [lambda t=t, f=f: f(on(t)) for t in _inputs() for f in (torch.max, torch.min, torch.Tensor.max)]


@pytest.mark.parametrize("device", DEVICES)
def test_full_max_min_match_cpu_without_the_cpu_tier(device):
    expected = outcomes(_calls("cpu"))
    with torch_fl.coverage() as cov:
        got = outcomes(_calls(device))
    check_outcomes(got, expected)
    assert sum(1 for k, _ in expected if k is RuntimeError) == 6  # the empty inputs, with max()/min() named
    assert not [k for k in cov.counts if k[1] == "cpu"], cov.counts
    with torch_fl.ral_mode(device):
        check_outcomes(outcomes(_calls(None)), expected)
