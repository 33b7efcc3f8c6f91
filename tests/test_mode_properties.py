"""Property test (hypothesis): under ral_mode, chains of views and in-place ops on CPU
tensors leave the CPU tensors (values and version counters) exactly as the same chain run
without the mode, on ral:0 (host) and ral:1 (OpenCL)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]

# View steps: (name, fn(tensor) -> view of it, or None when the view does not apply).
VIEWS = {
    "tail": lambda t: t[1:] if t.dim() and t.shape[0] > 1 else None,
    "col0": lambda t: t[:, 0] if t.dim() >= 2 else None,
    "step2": lambda t: t[::2] if t.dim() else None,
    "diagonal": lambda t: t.diagonal() if t.dim() >= 2 else None,
    "transpose": lambda t: t.transpose(0, -1) if t.dim() >= 2 else None,
    "t": lambda t: t.t() if t.dim() == 2 else None,
    "narrow": lambda t: t.narrow(-1, 1, t.shape[-1] - 1) if t.dim() and t.shape[-1] > 1 else None,
    "select": lambda t: t.select(0, 0) if t.dim() and t.shape[0] else None,
    "unsqueeze": lambda t: t.unsqueeze(0),
    "view_flat": lambda t: t.view(-1) if t.is_contiguous() else None,
    "chunk0": lambda t: t.chunk(2)[0] if t.dim() else None,
    "unbind_last": lambda t: t.unbind(0)[-1] if t.dim() and t.shape[0] else None,
}
# In-place steps on the current view; some take a right-hand side computed inside the
# mode (so it lives on the device) to check device operands reach CPU targets.
INPLACE = {
    "zero_": lambda t: t.zero_(),
    "mul_": lambda t: t.mul_(5),
    "add_": lambda t: t.add_(1.5),
    "fill_": lambda t: t.fill_(7),
    "clamp_": lambda t: t.clamp_(max=2),
    "neg_": lambda t: t.neg_(),
    "add_computed": lambda t: t.add_(t * 2 + 1),
    "copy_computed": lambda t: t.copy_(torch.ones_like(t) * 3),
    "setitem": lambda t: t.__setitem__(..., 4.0),
    "iadd": lambda t: t.__iadd__(t.abs() + 1),
    "foreach_mul_": lambda t: torch._foreach_mul_([t], 0.5),
    "foreach_add_list": lambda t: torch._foreach_add_([t], [torch.ones_like(t)]),
}

steps = st.lists(
    st.tuples(st.sampled_from(sorted(VIEWS) + ["reset"]), st.sampled_from(sorted(INPLACE))),
    min_size=1,
    max_size=6,
)


def _run(chain, shape, device=None):
    """Run a chain on a fresh CPU tensor (under ral_mode(device) if given); its final state."""
    base = torch.arange(1.0, 1.0 + torch.Size(shape).numel()).reshape(shape)
    ctx = torch_fl.ral_mode(device) if device else torch.autograd.grad_mode.no_grad()
    with ctx, torch.no_grad():
        cur = base
        for view, op in chain:
            if view == "reset":
                cur = base
            else:
                nxt = VIEWS[view](cur)
                if nxt is not None:
                    cur = nxt
            INPLACE[op](cur)
    return base, base._version


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(chain=steps, shape=st.sampled_from([(4,), (3, 4), (4, 4), (2, 3, 4)]))
def test_view_and_inplace_chains_land_on_cpu_tensor(device, chain, shape):
    expected, expected_version = _run(chain, shape)
    actual, actual_version = _run(chain, shape, device)
    assert actual.device.type == "cpu"
    # float32 arithmetic on small integers and halves: exact on every device
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)
    assert actual_version == expected_version
