"""Arithmetic on bool tensors stores canonical bools (bytes 0 and 1), as on CPU:
`torch.add(t, t, alpha=True)` is True, not the byte 2. PyTorch's test_booleans
(test_type_promotion.py) found `assertEqual(torch.add(True, True, alpha=True), True)` failing
on ral with "Expected True but got True": the jit tier computed True + True * True in C's int
arithmetic and stored 2 into the bool byte, which prints as True but compares unequal to True
(`==`, `torch.equal`, indexing with it as a mask count). Every result is compared with CPU's
byte for byte (viewed as uint8), on both devices, in both styles and inside a fuse() region."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _program(t, f):
    return [
        torch.add(t, f, alpha=True),
        torch.add(t, t, alpha=True),
        t.clone().add_(f, alpha=True),
        torch.add(t, True, alpha=True),
        torch.add(t[0], f[0], alpha=True),
        t + f,
        t * f,
        t * True,
        torch.maximum(t, f),
        torch.add(t, f, alpha=True) == True,  # noqa: E712 - the comparison the byte 2 broke
    ]


def _inputs(device="cpu"):
    t = torch.tensor([True, True, False, False], device=device)
    f = torch.tensor([True, False, True, False], device=device)
    return t, f


def _check(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype == torch.bool
        assert torch.equal(g.cpu().view(torch.uint8), e.view(torch.uint8)), (g.cpu().view(torch.uint8), e)


@pytest.mark.parametrize("device", DEVICES)
def test_bool_arithmetic_stores_canonical_bools(device):
    _check(_program(*_inputs(device)), _program(*_inputs()))


@pytest.mark.parametrize("device", DEVICES)
def test_bool_arithmetic_under_ral_mode(device):
    expected = _program(*_inputs())
    with torch_fl.ral_mode(device):
        got = _program(*_inputs())
    _check(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_bool_arithmetic_in_a_fuse_region(device):
    def region(t, f):
        s = torch.add(t, f, alpha=True)
        return [s, torch.add(s, t, alpha=True), s * f, torch.logical_not(s)]

    expected = region(*_inputs())
    with torch_fl.fuse():
        got = region(*_inputs(device))
    _check(got, expected)
