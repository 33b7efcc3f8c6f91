"""ral_mode's per-call fast paths (torch_fl/mode.py): a call whose operands are all device
tensors goes straight through, metadata reads return before any placement work, and eval-mode
dropout is the identity. Each case sits at the edge of a fast path (a CPU tensor hidden in a
list, a tuple, a keyword, a Parameter) and must still be placed exactly as without the fast
path: values against plain CPU, on ral:0 and ral:1."""

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from torch_fl.tensor.ral_tensor import RalTensor

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
pytestmark = pytest.mark.parametrize("dev", DEVICES)


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(3, 4), torch.nn.Parameter(torch.randn(3, 4))


_IDX = torch.tensor([0, 2, 3])  # a CPU index tensor (made outside the mode)

# Each call mixes a device tensor `d` (made in the mode) with CPU tensors `c`, `p` in the
# places the fast path's scan looks at: positional lists and tuples, keywords, a Parameter.
CALLS = {
    "cat_list_cpu_last": lambda d, c, p: torch.cat([d, d, c], dim=0),
    "cat_tuple_cpu_first": lambda d, c, p: torch.cat((c, d), 1),
    "stack_parameter_in_list": lambda d, c, p: torch.stack([d, p]),
    "keyword_cpu_tensor": lambda d, c, p: torch.add(d, other=c, alpha=2),
    "where_cpu_keywords": lambda d, c, p: torch.where(d > 0, input=c, other=p),
    "nested_list_cpu": lambda d, c, p: torch.block_diag(*[d, c]),
    "layer_norm_cpu_weight": lambda d, c, p: F.layer_norm(d, (4,), p[0], c[0], 1e-5),
    "device_keyword": lambda d, c, p: torch.full_like(d, 2.0, device=d.device) * c,
    "size_argument": lambda d, c, p: d.view(torch.Size([4, 3])) @ c,
    "index_cpu_tensor_beside_ellipsis": lambda d, c, p: d[..., _IDX] + c[..., 1:],
    "index_slices_only": lambda d, c, p: d[1:, ..., None, :2] * 3,
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_cpu_operands_beside_device_ones_are_placed(dev, name):
    a, c, p = _inputs()
    want = CALLS[name](a.clone(), c, p.detach())
    with torch.no_grad(), torch_fl.ral_mode(dev):
        d = a.clone()  # a device tensor: the mode uploads the clone's CPU operand
        assert type(d) is RalTensor
        got = CALLS[name](d, c, p)
        assert type(got) is RalTensor and got.device == torch.device(dev)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_device_only_calls_match_cpu_and_record_autograd(dev):
    a, c, _ = _inputs()
    ref = a.clone().requires_grad_(True)
    want = torch.cat([ref.view(torch.Size([12])), ref.t().reshape(-1)]).pow(2).sum()
    want.backward()
    with torch_fl.ral_mode(dev):
        d = torch.tensor(a.tolist(), requires_grad=True)
        got = torch.cat([d.view(torch.Size([12])), d.t().reshape(-1)]).pow(2).sum()
        got.backward()
        assert d.grad is not None and type(d.grad) is RalTensor
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(d.grad.cpu(), ref.grad, rtol=1e-5, atol=1e-5)


def test_metadata_reads_and_item_in_the_mode(dev):
    a, _, _ = _inputs()
    with torch_fl.ral_mode(dev):
        d = a.clone()
        assert (d.shape, d.dtype, d.device, d.size(-1), d.dim(), d.numel()) == (
            a.shape,
            a.dtype,
            torch.device(dev),
            4,
            2,
            12,
        )
        assert d[1, 2].item() == a[1, 2].item()
        assert a.shape == torch.Size([3, 4]) and a.device.type == "cpu"  # CPU metadata stays CPU's


@pytest.mark.parametrize("on_device", [False, True])
def test_eval_dropout_is_the_identity_and_training_dropout_matches_cpu(dev, on_device):
    a, _, _ = _inputs()
    with torch_fl.ral_mode(dev):
        x = a.clone() if on_device else a
        assert F.dropout(x, 0.3, False) is x
        assert F.dropout(x, p=0.3, training=False) is x
        torch.manual_seed(7)
        train = F.dropout(x, 0.3, True)
    torch.manual_seed(7)
    want = F.dropout(a, 0.3, True)
    torch.testing.assert_close(train.cpu(), want, rtol=1e-6, atol=1e-6)
