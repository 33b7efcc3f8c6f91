"""The host plugin's float16/bfloat16 row conversions (plugins/host/copy.c `host_load_float` /
`host_store_float`, the unit-stride loops batch norm, embedding backward and the recurrent
cells widen and round through) give torch's own conversions, bit for bit.

`embedding_dense_backward` on ral:0 widens its gradient rows and rounds the accumulated rows
once: with each row index used once the result is the gradient added to zero, every one of the
65536 bit patterns (-0 becomes +0 as in any sum from zero; NaN compared by position: the
kernel stores the quiet NaN); with each index used
twice it is `(a.float() + b.float())` rounded to the dtype, which tests round-to-nearest-even,
overflow to infinity and subnormals against torch's CPU cast.
"""

from __future__ import annotations

import pytest
import torch
from conftest import plugin_device

HALF = [torch.float16, torch.bfloat16]


def _all_bit_patterns(dtype):
    return torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(dtype)


def _dense_backward(grad, ids, rows):
    return torch.ops.aten.embedding_dense_backward(grad, ids, rows, -1, False)


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_rows_round_trip_every_bit_pattern(dtype):
    dev = plugin_device("host")
    g = _all_bit_patterns(dtype).reshape(-1, 16)  # 4096 rows of 16
    ids = torch.arange(g.shape[0])
    got = _dense_backward(g.to(dev), ids.to(dev), g.shape[0]).cpu()
    want = (torch.zeros(g.shape) + g.float()).to(dtype)  # accumulated from zero: -0 sums to +0
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_accumulated_rows_round_like_torch(dtype):
    dev = plugin_device("host")
    gen = torch.Generator().manual_seed(5)
    a = _all_bit_patterns(dtype)
    b = a[torch.randperm(a.numel(), generator=gen)]
    finite = a.isfinite() & b.isfinite()
    a, b = a[finite][: 4096 * 8], b[finite][: 4096 * 8]
    rows = a.numel() // 8
    grad = torch.cat([a.reshape(rows, 8), b.reshape(rows, 8)])  # row r and row rows + r sum
    ids = torch.cat([torch.arange(rows), torch.arange(rows)])
    got = _dense_backward(grad.to(dev), ids.to(dev), rows).cpu()
    want = (a.float() + b.float()).to(dtype).reshape(rows, 8)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got.view(torch.int16)[~nan], want.view(torch.int16)[~nan])
