"""Shape and parameter errors with CPU's exception and message: broadcasting mismatches ("The
size of tensor a (3) must match the size of tensor b (2) at non-singleton dimension 0", where
ral said torch._refs' "Attempting to broadcast a dimension..."), index_add's source shape (ral
broadcast a source CPU refuses and added it), embedding's weight rank (ral: AssertionError),
convolution's stride/padding/dilation/groups and cat's ranks (ral: other errors first), and the
random ops' parameters (ral:0 and ral:1 drew from normal_ with std < 0, uniform_ with from > to or
an infinite bound, bernoulli_ with p > 1). Calls that are right still run. Both devices, both
styles (dispatch/shape_checks.py, dispatch/value_checks.py)."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
F = torch.nn.functional


def _calls(dev):
    def r(*shape, seed=0):
        g = torch.Generator().manual_seed(seed)
        return torch.rand(*shape, generator=g).to(dev)

    idx = torch.tensor([0, 2], device=dev)
    w = r(4, 2, 3)
    return [
        lambda: r(3) + r(2),
        lambda: r(2, 3) * r(2, 2),
        lambda: r(10, 2, 3) - r(10, 2, 2),
        lambda: torch.where(r(3) > 0.5, r(2), 0.0),
        lambda: torch.addcmul(r(4, 1), r(3), r(2, 1, 1)),  # runs
        lambda: r(3).pow(r(2)),
        lambda: r(3).add_(r(2, 3)),
        lambda: F.gaussian_nll_loss(r(10, 2, 3), r(10, 2, 2), r(10, 2, 3)),
        lambda: r(4, 1) + r(3),  # broadcasts
        lambda: r(3, 2).index_add(0, idx, r(2)),
        lambda: r(3, 2).index_add(0, idx, r(2, 1)),
        lambda: r(3).index_add(0, idx[:1], torch.tensor(5.0, device=dev)),
        lambda: r(3, 2).index_add_(0, idx, r(2, 2)),  # runs
        lambda: F.embedding(torch.tensor([[0, 1]], device=dev), r(3, 2, 2)),
        lambda: F.embedding(torch.tensor([[0, 1]], device=dev), r(3, 2)),  # runs
        lambda: F.conv1d(r(1, 2, 5), w, stride=0),
        lambda: F.conv1d(r(1, 2, 5), w, padding=-1),
        lambda: F.conv1d(r(1, 2, 5), w, dilation=0),
        lambda: F.conv1d(r(1, 2, 5), r(4, 2)),
        lambda: F.conv1d(r(2, 6, 5), w, groups=3),
        lambda: F.conv1d(r(2, 10, 5), r(5, 2, 3), groups=5),  # runs
        lambda: F.conv1d(r(1, 6, 5), r(4, 2, 3), groups=6),
        lambda: F.conv2d(r(1, 2, 5, 5), r(4, 2, 3, 3), stride=(1, -1)),
        lambda: F.conv_transpose1d(r(1, 4, 5), w, output_padding=-1),
        lambda: torch.cat([r(2, 3), r(2, 3, 1)]),
        lambda: torch.cat([torch.tensor(1.0, device=dev), r(2)]),
        lambda: torch.cat([r(2, 3), torch.empty(0, device=dev), r(1, 3)]),  # runs: legacy empty 1-d skipped
        lambda: torch.hstack([r(2), r(2, 3, 1)]),
        lambda: r(3).normal_(0, -1),
        lambda: r(3).normal_(0, -0.5),
        lambda: torch.normal(0.0, -1.0, (3,), device=dev),
        lambda: r(3).uniform_(3, -1),
        lambda: r(3).uniform_(0, float("inf")),
        lambda: r(3).half().uniform_(0, 1e6),
        lambda: r(3).bernoulli_(1.5),
        lambda: r(3).uniform_(-1, 1).abs().le(1),  # runs
        lambda: torch.arange(0, 10, 0, device=dev),
        lambda: torch.ones(3, 4, dtype=torch.long, device=dev).mean(),
        lambda: r(3, 4).mean(1, dtype=torch.long),
    ]


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_shape_and_parameter_errors_match_cpu(device, style):
    expected = outcomes(_calls("cpu"))
    assert sum(k == "value" for k, _ in expected) == 7
    if style == "to":
        got = outcomes(_calls(device))
    else:
        with torch_fl.ral_mode(device):
            got = outcomes(_calls("cpu"))
    check_outcomes(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_factory_with_a_cpu_out_inside_ral_mode_writes_it(device):
    """`torch.arange(n, out=cpu_buffer)` inside the mode fills the CPU buffer, as without the
    mode (the mode placed the call on the device and failed on out='s device)."""
    buf, want = torch.empty(4), torch.arange(4.0)
    with torch_fl.ral_mode(device):
        got = torch.arange(4, out=buf)
        full = torch.full((2,), 7.0, out=torch.empty(2, device=device))
    assert got is buf and torch.equal(buf, want)
    assert full.device == torch.device(device) and torch.equal(full.cpu(), torch.full((2,), 7.0))
