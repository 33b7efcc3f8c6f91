"""Smaller holes of the backend contract: opaque handle tensors (the profiler's
record_function handles) pass through ral_mode untouched, on ral:0 and ral:1."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


@pytest.mark.parametrize("device", DEVICES)
def test_record_function_handles_pass_through_the_mode(device):
    x = torch.arange(4.0)
    with torch_fl.ral_mode(device):
        # the old API: a CPU tensor wrapping a C++ RecordFunction, unwrapped by the exit op
        handle = torch.ops.profiler._record_function_enter("old_api", None)
        y = x * 2
        torch.ops.profiler._record_function_exit(handle)
        assert handle.device.type == "cpu"
        with torch.profiler.profile() as prof:
            with torch.autograd.profiler.record_function("inner_block"):
                z = y + 1
    assert z.device == torch.device(device)
    torch.testing.assert_close(z.cpu(), torch.arange(4.0) * 2 + 1)
    assert any(e.name == "inner_block" for e in prof.events())


@pytest.mark.parametrize("device", DEVICES)
def test_named_factories_behave_as_cpu(device):
    """Where CPU accepts `names=` the ral tensor carries the same names; where this torch has
    dropped named factories (2.13 rejects `names=` with TypeError), ral rejects it alike."""
    try:
        want = torch.empty(2, 3, names=("N", "C")).names
    except TypeError as cpu_error:
        with pytest.raises(TypeError) as ral_error:
            torch.empty(2, 3, device=device, names=("N", "C"))
        assert str(ral_error.value) == str(cpu_error)
        return
    assert torch.empty(2, 3, device=device, names=("N", "C")).names == want


@pytest.mark.parametrize("device", DEVICES)
def test_fused_sdp_choice_is_the_overrideable_backend_when_declared(device):
    from torch.nn.attention import SDPBackend

    q = torch.randn(2, 2, 5, 8, device=device)
    assert SDPBackend(torch._fused_sdp_choice(q, q, q)) == SDPBackend.OVERRIDEABLE
    # dropout is not served by the fused kernel: SDPA's math path applies it
    assert SDPBackend(torch._fused_sdp_choice(q, q, q, dropout_p=0.5)) == SDPBackend.MATH


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_backward_in_every_float_type_matches_cpu(device, dtype, causal):
    """Forward and backward of SDPA on ral against CPU's float32 result of the same inputs
    (tolerances: float32 1e-5, float16 2e-3, bfloat16 2e-2 absolute)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8, dtype=dtype) for _ in range(3))
    dev = [t.to(device).requires_grad_() for t in (q, k, v)]
    ref = [t.float().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*dev, is_causal=causal)
    out_ref = torch.nn.functional.scaled_dot_product_attention(*ref, is_causal=causal)
    out.float().sum().backward()
    out_ref.sum().backward()
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu().float(), out_ref, rtol=0, atol=tol)
    for a, b in zip(dev, ref):
        assert a.grad.dtype == dtype
        torch.testing.assert_close(a.grad.cpu().float(), b.grad, rtol=0, atol=tol)
