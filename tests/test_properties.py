"""Property tests (hypothesis): random shapes, broadcasts, strides and view chains on ral
match CPU exactly (float32 add/mul/where are exact) or within float32 tolerance."""

import torch
from conftest import DEVICE
from hypothesis import given, settings
from hypothesis import strategies as st

shapes = st.lists(st.integers(min_value=0, max_value=5), min_size=0, max_size=4)
FAST = settings(max_examples=40, deadline=None)


def _broadcastable_pair(shape, mask):
    other = [1 if m else n for n, m in zip(shape, mask)]
    return tuple(shape), tuple(other)


@FAST
@given(
    shape=shapes,
    mask=st.lists(st.booleans(), min_size=4, max_size=4),
    op=st.sampled_from(["add", "mul", "sub", "maximum", "where"]),
    transpose=st.booleans(),
)
def test_binary_ops_with_broadcast_and_strides(shape, mask, op, transpose):
    a_shape, b_shape = _broadcastable_pair(shape, mask)
    g = torch.Generator().manual_seed(len(shape) * 31 + sum(shape))
    a = torch.randn(a_shape, generator=g)
    b = torch.randn(b_shape, generator=g)
    if transpose and a.dim() >= 2:
        a = a.transpose(0, -1).contiguous().transpose(0, -1)  # same values, non-contiguous strides
    fn = {
        "add": lambda x, y: x + 2 * y,
        "mul": torch.mul,
        "sub": torch.sub,
        "maximum": torch.maximum,
        "where": lambda x, y: torch.where(x > 0, x, y),
    }[op]
    expected = fn(a, b)
    actual = fn(a.to(DEVICE), b.to(DEVICE)).cpu()
    torch.testing.assert_close(actual, expected, rtol=1.3e-6, atol=1e-6)


@FAST
@given(
    shape=st.lists(st.integers(min_value=1, max_value=5), min_size=2, max_size=4),
    steps=st.lists(st.sampled_from(["t", "slice", "unsqueeze", "flatten", "narrow"]), max_size=4),
)
def test_view_chains_share_memory_and_metadata(shape, steps):
    cpu = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    ral = cpu.to(DEVICE)
    for step in steps:
        f = {
            "t": lambda x: x.transpose(0, -1),
            "slice": lambda x: x[..., ::2],
            "unsqueeze": lambda x: x.unsqueeze(1),
            "flatten": lambda x: x.flatten() if x.is_contiguous() else x,
            "narrow": lambda x: x.narrow(0, 0, max(1, x.shape[0] // 2)) if x.dim() else x,
        }[step]
        cpu, ral = f(cpu), f(ral)
        assert ral.shape == cpu.shape and ral.stride() == cpu.stride() and ral.storage_offset() == cpu.storage_offset()
    torch.testing.assert_close(ral.cpu(), cpu, rtol=0, atol=0)
    ral.add_(1)  # writes through the view chain into the shared buffer
    cpu.add_(1)
    torch.testing.assert_close(ral.cpu(), cpu, rtol=0, atol=0)


@FAST
@given(
    shape=st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=3),
    dim=st.integers(min_value=0, max_value=2),
    keep=st.booleans(),
)
def test_reductions(shape, dim, keep):
    dim = dim % len(shape)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape) + dim))
    r = x.to(DEVICE)
    torch.testing.assert_close(r.sum(dim, keepdim=keep).cpu(), x.sum(dim, keepdim=keep), rtol=1.3e-5, atol=1e-5)
    torch.testing.assert_close(
        r.mean(dim, keepdim=keep).cpu(), x.mean(dim, keepdim=keep), rtol=1.3e-5, atol=1e-5, equal_nan=True
    )
