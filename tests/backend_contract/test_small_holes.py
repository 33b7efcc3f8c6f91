"""Smaller holes of the backend contract: opaque handle tensors (the profiler's
record_function handles) pass through ral_mode untouched, on ral:0 and ral:1."""

import pytest
import torch
from conftest import host_device_present, launch_count

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
        with torch_fl.ral_mode(device), pytest.raises(TypeError) as mode_error:  # the mode style
            torch.empty(2, 3, names=("N", "C"))
        assert str(mode_error.value) == str(cpu_error)
        return
    assert torch.empty(2, 3, device=device, names=("N", "C")).names == want
    with torch_fl.ral_mode(device):
        assert torch.empty(2, 3, names=("N", "C")).names == want


def _declares(device, dtype, op):
    """Whether the device's plugin manifest declares a kernel for `op` in `dtype`."""
    from torch_fl.core.registry import REGISTRY
    from torch_fl.device.dtypes import CODE_OF_TORCH

    idx = torch.device(device).index
    return any(
        CODE_OF_TORCH[dtype] in e.dtype_codes and e.min_rank <= 4 <= e.max_rank for e in REGISTRY.entries(idx, op)
    )


FLOATS = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_fused_sdp_choice_is_the_overrideable_backend_when_declared(device, dtype):
    """OVERRIDEABLE exactly where the device's manifest declares the fused forward in the
    dtype (the host plugin, ral:0, declares float32, float16 and bfloat16), MATH elsewhere and
    for dropout, which the fused kernel does not serve."""
    from torch.nn.attention import SDPBackend

    from torch_fl.tiers.attention import FUSED_FORWARD

    q = torch.randn(2, 2, 5, 8, device=device, dtype=dtype)
    declared = _declares(device, dtype, FUSED_FORWARD)
    if device == "ral:0" and host_device_present():
        assert declared, "the host plugin declares its fused attention in every float type"
    want = SDPBackend.OVERRIDEABLE if declared else SDPBackend.MATH
    assert SDPBackend(torch._fused_sdp_choice(q, q, q)) == want
    assert SDPBackend(torch._fused_sdp_choice(q, q, q, dropout_p=0.5)) == SDPBackend.MATH
    c = q.cpu()
    with torch_fl.ral_mode(device):  # the mode style: CPU tensors, the device's answer
        assert SDPBackend(torch._fused_sdp_choice(c, c, c)) == want
        assert SDPBackend(torch._fused_sdp_choice(c, c, c, dropout_p=0.5)) == SDPBackend.MATH


def _sdpa_grads(device, dtype, q, k, v, m, mask_grad, causal, gout):
    """SDPA's output and gradients (q, k, v and a float mask that wants one) on `device` in
    `dtype`, on CPU in float32, and the kernel launches of the backward on a ral device."""
    ts = [t.to(device, dtype).requires_grad_() for t in (q, k, v)]
    mask = None
    if m is not None:
        mask = m.to(device, dtype if m.is_floating_point() else m.dtype).requires_grad_(mask_grad)
        ts.append(mask)
    out = torch.nn.functional.scaled_dot_product_attention(*ts[:3], attn_mask=mask, is_causal=causal)
    idx = torch.device(device).index if device != "cpu" else None
    before = launch_count(idx) if idx is not None else 0
    grads = torch.autograd.grad(out, [t for t in ts if t.requires_grad], gout.to(device, dtype))
    launches = launch_count(idx) - before if idx is not None else 0
    return [t.detach().cpu().float() for t in (out, *grads)], launches


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mask", [None, "causal", "bool", "float", "float_grad"])
def test_sdpa_backward_in_every_float_type_matches_cpu(device, dtype, mask):
    """Forward and backward of SDPA on ral against CPU's float32 result of the same (rounded)
    inputs: within float32 1e-5, float16 2e-3, bfloat16 2e-2 absolute, and no further from it
    than twice CPU's own computation in that dtype (plus a quarter of the tolerance). Where
    the manifest declares the fused backward in the dtype it is the one kernel launch; a mask
    that wants its gradient takes the math backward after the fused forward (in float32 for
    float16/bfloat16, as CPU's math path)."""
    from torch_fl.tiers.attention import FUSED_BACKWARD

    torch.manual_seed(0)
    # the [B, L, H, E] -> [B, H, L, E] transposes a transformer hands SDPA, rounded to dtype
    q, k, v = (torch.randn(2, 37, 2, 8).to(dtype).float().transpose(1, 2) for _ in range(3))
    m = {None: None, "causal": None, "bool": torch.rand(37, 37) > 0.3}.get(mask, torch.randn(37, 37).to(dtype).float())
    gout = torch.randn(2, 2, 37, 8).to(dtype).float()
    args = (q, k, v, m, mask == "float_grad", mask == "causal", gout)
    want, _ = _sdpa_grads("cpu", torch.float32, *args)
    cpu, _ = _sdpa_grads("cpu", dtype, *args)
    got, launches = _sdpa_grads(device, dtype, *args)
    if mask != "float_grad" and _declares(device, dtype, FUSED_BACKWARD):
        assert launches == 1, f"{launches} launches: the fused backward did not run"
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    names = ["out", "grad_q", "grad_k", "grad_v", "grad_mask"]
    for name, g, c, w in zip(names, got, cpu, want):
        err, cpu_err = (g - w).abs().max().item(), (c - w).abs().max().item()
        assert err <= tol and err <= 2 * cpu_err + tol / 4, (
            f"{name}: {err:.2e} from float32 (CPU {dtype}: {cpu_err:.2e})"
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_backward_in_half_types_under_the_mode(device, dtype):
    """The same under ral_mode on CPU tensors (causal, the transformer layout): output and
    gradients within CPU's own error in that dtype of CPU's float32 result (x2 + tol/4)."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 37, 2, 8).to(dtype).transpose(1, 2) for _ in range(3))

    def run(compute_dtype, mode):
        ts = [t.detach().to(compute_dtype).requires_grad_() for t in (q, k, v)]
        with torch_fl.ral_mode(device) if mode else torch.enable_grad():
            out = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=True)
            out.float().sum().backward()
        return [out.detach().cpu().float()] + [t.grad.cpu().float() for t in ts]

    want, cpu, got = run(torch.float32, False), run(dtype, False), run(dtype, True)
    tol = {torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    for name, g, c, w in zip(["out", "grad_q", "grad_k", "grad_v"], got, cpu, want):
        err, cpu_err = (g - w).abs().max().item(), (c - w).abs().max().item()
        assert err <= 2 * cpu_err + tol / 4, f"{name}: {err:.2e} from float32 (CPU {dtype}: {cpu_err:.2e})"


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_kernel_restricting_to_math_is_respected(device):
    """`with sdpa_kernel(SDPBackend.MATH)` rules the overrideable backend out, as it rules out
    CUDA's fused kernels: _fused_sdp_choice says MATH and SDPA runs the math path (several
    launches, not the one fused kernel), with CPU's values."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from torch_fl.tiers.attention import FUSED_FORWARD

    if not _declares(device, torch.float32, FUSED_FORWARD):
        pytest.skip(f"{device} declares no fused attention: nothing to rule out")
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 9, 8) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    qd, kd, vd = (t.to(device) for t in (q, k, v))
    idx = torch.device(device).index
    with sdpa_kernel([SDPBackend.MATH]):
        assert SDPBackend(torch._fused_sdp_choice(qd, kd, vd)) == SDPBackend.MATH
        before = launch_count(idx)
        got = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd)
        assert launch_count(idx) - before > 1
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    assert SDPBackend(torch._fused_sdp_choice(qd, kd, vd)) == SDPBackend.OVERRIDEABLE


_PIN_FACTORIES = {
    "empty": lambda d: torch.empty(3, device=d, pin_memory=True),
    "zeros": lambda d: torch.zeros(2, 3, device=d, pin_memory=True),
    "empty_strided": lambda d: torch.empty_strided((2, 3), (1, 2), device=d, pin_memory=True),
    "arange": lambda d: torch.arange(4, device=d, pin_memory=True),
    "randn": lambda d: torch.randn(3, device=d, pin_memory=True),
    "empty_like": lambda d: torch.empty_like(torch.ones(3, device=d), pin_memory=True),
    "new_empty": lambda d: torch.ones(3, device=d).new_empty(2, pin_memory=True),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("style", ["to", "ral_mode"])
def test_pinning_a_ral_tensor_raises_as_on_cuda(device, style):
    """`t.pin_memory()` of a ral tensor and a ral factory with pin_memory=True raise CUDA's
    RuntimeError (they returned an unpinned tensor); the device and its other tensors keep
    working. In ral_mode, a factory the mode places (no device given) and `.pin_memory()` of
    the program's host tensors keep working: pinned memory only speeds up a later copy."""
    import contextlib

    mode = torch_fl.ral_mode(device) if style == "ral_mode" else contextlib.nullcontext()
    kept = torch.arange(6.0, device=device)
    with mode:
        t = torch.ones(2, 3).to(device)
        if style == "to":  # in the mode, the program's tensors made on the device look like its host tensors
            with pytest.raises(RuntimeError, match=r"cannot pin 'torch\.ral\.FloatTensor' only dense CPU"):
                t.pin_memory()
        for make in _PIN_FACTORIES.values():
            with pytest.raises(RuntimeError, match=rf"Only dense CPU tensors can be pinned.*{device}"):
                make(device)
        assert not t.is_pinned()
        host = torch.arange(4.0, device="cpu").pin_memory()  # a CPU tensor still pins
        assert host.is_pinned() and host.device.type == "cpu"
        if style == "ral_mode":
            made = torch.empty(3, pin_memory=True)  # the program's host tensor, placed on the device
            assert made.device == torch.device(device)
            assert made.pin_memory() is made
            y = (torch.arange(3.0) * 2).pin_memory().cpu()
    if style == "ral_mode":
        torch.testing.assert_close(y, torch.arange(3.0) * 2, rtol=0, atol=0)
    torch.testing.assert_close((kept + 1).cpu(), torch.arange(6.0) + 1, rtol=0, atol=0)


@pytest.mark.parametrize("style", ["plain", "ral_mode"])
def test_dataloader_pin_memory_with_ral_as_the_accelerator(style):
    """DataLoader(pin_memory=True) pins CPU batches for the current accelerator (ral) as it
    does for CUDA; the batches match the dataset, and under ral_mode too."""
    import contextlib

    assert torch.accelerator.current_accelerator().type == "ral"
    xs, ys = torch.arange(24.0).reshape(8, 3), torch.arange(8)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=4, pin_memory=True)
    mode = torch_fl.ral_mode(DEVICES[-1]) if style == "ral_mode" else contextlib.nullcontext()
    got = []
    with mode:
        for x, y in loader:
            if style == "plain":
                assert x.is_pinned() and y.is_pinned()
            got.append((x.to(DEVICES[-1]) * 2).cpu())
    torch.testing.assert_close(torch.cat(got), xs * 2, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_tensor_of_ral_scalars_reads_them_as_cuda_scalars_are_read(device):
    # torch.tensor([t, ...]) reads each 0-d tensor with the Python key excluded, reaching
    # aten::_local_scalar_dense for PrivateUse1 itself (it raised "Could not run" before)
    vals = [(1.5, torch.float32), (-3, torch.int64), (True, torch.bool), (2.5, torch.bfloat16), (0.25, torch.float16)]
    cpu = [torch.tensor(v, dtype=dt) for v, dt in vals]
    ral = [t.to(device) for t in cpu]
    for c, r in zip(cpu, ral):
        got = torch.tensor([r, r])
        assert got.device.type == "cpu" and got.dtype == c.dtype
        torch.testing.assert_close(got, torch.tensor([c, c]), rtol=0, atol=0)
    mixed = torch.tensor([ral[0], 2.0, ral[1]])  # a list mixing numbers and ral scalars
    torch.testing.assert_close(mixed, torch.tensor([cpu[0], 2.0, cpu[1]]), rtol=0, atol=0)
    placed = torch.tensor([[ral[0]]], device=device)
    assert placed.device == torch.device(device)
    torch.testing.assert_close(placed.cpu(), torch.tensor([[1.5]]), rtol=0, atol=0)
    element = torch.arange(6.0, device=device).view(2, 3)[1, 2]  # a 0-d view with an offset
    assert torch.tensor([element]).tolist() == [5.0]
