"""Autocast and GradScaler on ral: CUDA's cast policy, CPU autocast inside ral_mode, device-side
non-finite checks. Every result is compared with PyTorch CPU at bfloat16/float16 tolerances."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_fl
from tests import model_zoo

BF16 = dict(rtol=2e-2, atol=2e-2)


def _devices():
    n = torch.ral.device_count()
    return [f"ral:{i}" for i in range(min(n, 2))]


@pytest.fixture(params=_devices() or ["none"])
def anydev(request):
    """ral:0 and ral:1 (the OpenCL device), whichever exist."""
    if request.param == "none":
        pytest.skip("no ral device: the plugins were not built")
    return request.param


def _dtypes(dev):
    with torch.ral.device(int(dev.split(":")[1])):
        return torch.ral.get_amp_supported_dtype()


def test_policy_matches_cuda_lists(anydev):
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(6, 8), torch.randn(6)
    low = torch.bfloat16
    with torch.autocast("ral", dtype=low):
        y = F.linear(x.to(anydev), w.to(anydev), b.to(anydev))  # lower precision
        ln = F.layer_norm(y, (6,))  # float32 list
        sm = torch.softmax(y, -1)  # float32 with dtype set
        loss = F.mse_loss(y, torch.zeros(4, 6).to(anydev))  # losses in float32
        pr = torch.addcmul(x.to(anydev), y[:, :1].expand(4, 8), x.to(anydev))  # promote: widest
    assert (y.dtype, ln.dtype, sm.dtype, loss.dtype, pr.dtype) == (
        low,
        torch.float32,
        torch.float32,
        torch.float32,
        torch.float32,
    )
    ref = F.linear(x.to(low), w.to(low), b.to(low))
    torch.testing.assert_close(y.cpu(), ref, rtol=0, atol=0)
    torch.testing.assert_close(ln.cpu(), F.layer_norm(ref.float(), (6,)), **BF16)
    torch.testing.assert_close(sm.cpu(), torch.softmax(ref.float(), -1), **BF16)
    torch.testing.assert_close(loss.cpu(), F.mse_loss(ref.float(), torch.zeros(4, 6)), **BF16)


def test_autocast_off_outside_region_and_float64_untouched(anydev):
    a = torch.randn(3, 3, dtype=torch.float64).to(anydev)
    with torch.autocast("ral", dtype=torch.bfloat16):
        assert (a @ a).dtype == torch.float64
    assert (a.float() @ a.float()).dtype == torch.float32


def test_both_half_types_autocast_natively_on_every_device(anydev):
    """float16 and bfloat16 are autocast dtypes on both devices (the OpenCL one too, without
    cl_khr_fp16): the device's kernels compute them, so a float16 matmul under autocast runs
    in the vendor tier, with no warning and no float32 fallback, and matches CPU's."""
    assert torch_fl.devices()[int(anydev.split(":")[1])].fp16
    assert _dtypes(anydev) == [torch.float16, torch.bfloat16]
    torch.manual_seed(0)
    x, w = torch.randn(8, 64), torch.randn(64, 16)
    for low in (torch.float16, torch.bfloat16):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with torch_fl.coverage() as cov, torch.autocast("ral", dtype=low):
                y = x.to(anydev) @ w.to(anydev)
        assert y.dtype == low
        torch.testing.assert_close(y.cpu(), x.to(low) @ w.to(low), rtol=2e-2, atol=2e-2)
        assert "aten::mm" in cov.ops_in_tier("vendor"), cov.rows()
        assert not cov.fallbacks(), cov.fallbacks()


@pytest.mark.parametrize("name", sorted(model_zoo.MODELS))
def test_zoo_autocast_matches_cpu(name, dev):
    model = model_zoo.build(name).eval()
    batch = model_zoo.inputs(name)
    for low in _dtypes(dev):
        with torch.autocast("cpu", dtype=low), torch.no_grad():
            ref = model(**batch)
        m = copy.deepcopy(model).to(dev)
        with torch.autocast("ral", dtype=low), torch.no_grad():
            out = m(**model_zoo.to(batch, dev))
        # CUDA's policy keeps more ops (norms, softmax) in float32 than CPU's, so the
        # comparison is at low-precision tolerance, on the loss and the logits.
        torch.testing.assert_close(out.loss.cpu().float(), ref.loss.float(), rtol=3e-2, atol=3e-2)
        torch.testing.assert_close(out.logits.cpu().float(), ref.logits.float(), rtol=0.1, atol=0.1)


def test_cpu_autocast_inside_ral_mode_behaves_as_on_cpu(anydev):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))
    x = torch.randn(2, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = m(x)
    with torch_fl.ral_mode(anydev), torch.autocast("cpu", dtype=torch.bfloat16):
        out = m(x)
    assert out.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), ref, **BF16)


def test_non_finite_check_and_unscale_on_device(anydev):
    grads = [torch.tensor([2.0, 4.0]), torch.tensor([[8.0, float("inf")]]), torch.tensor([6.0])]
    found, inv = torch.zeros(1), torch.tensor([0.5])
    ref = [g.clone() for g in grads]
    ref_found = found.clone()
    torch._amp_foreach_non_finite_check_and_unscale_(ref, ref_found, inv)
    dg = [g.to(anydev) for g in grads]
    dfound = found.to(anydev)
    torch._amp_foreach_non_finite_check_and_unscale_(dg, dfound, inv.to(anydev))
    for d, r in zip(dg, ref):
        torch.testing.assert_close(d.cpu(), r, rtol=0, atol=0)
    assert dfound.cpu().item() == ref_found.item() == 1.0


@pytest.mark.parametrize("found_inf, tracker, interval", [(1.0, 3, 4), (0.0, 3, 4), (0.0, 1, 4)])
def test_update_scale_on_device(anydev, found_inf, tracker, interval):
    scale, trk, found = torch.tensor([1024.0]), torch.tensor([tracker], dtype=torch.int32), torch.tensor([found_inf])
    ds, dt = scale.to(anydev), trk.to(anydev)
    torch._amp_update_scale_(scale, trk, found, 2.0, 0.5, interval)
    torch._amp_update_scale_(ds, dt, found.to(anydev), 2.0, 0.5, interval)
    assert ds.cpu().item() == scale.item() and dt.cpu().item() == trk.item()


def test_grad_scaler_skips_inf_steps(anydev):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 4).to(anydev)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("ral", init_scale=2.0**10)
    x = torch.randn(2, 8).to(anydev)
    for step in range(3):
        with torch.autocast("ral", dtype=torch.bfloat16):
            loss = m(x).float().pow(2).mean()
        scaler.scale(loss).backward()
        if step == 1:
            m.weight.grad.fill_(float("inf"))
        before = m.weight.detach().cpu().clone()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        moved = (m.weight.detach().cpu() - before).abs().max().item()
        assert (moved == 0.0) == (step == 1), f"step {step}: weights moved {moved}"
        assert moved < 1.0  # unscaled gradients (a scaled one would move them ~100x further)
    assert scaler.get_scale() == 2.0**9


def test_fp16_gpt2_training_follows_fp32_cpu(anydev):
    dev = anydev
    assert torch.float16 in _dtypes(dev)
    steps = 50
    model = model_zoo.build("gpt2")
    batch = model_zoo.inputs("gpt2")
    dmodel = copy.deepcopy(model).to(dev)
    dbatch = model_zoo.to(batch, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    dopt = torch.optim.AdamW(dmodel.parameters(), lr=3e-3)
    scaler = torch.amp.GradScaler("ral")
    for _ in range(steps):
        loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.autocast("ral", dtype=torch.float16):
            dloss = dmodel(**dbatch).loss
        scaler.scale(dloss).backward()
        scaler.step(dopt)
        scaler.update()
        dopt.zero_grad()
    ref, got = loss.item(), dloss.item()
    assert abs(got - ref) <= 0.02 * abs(ref), f"fp16 loss {got} vs CPU fp32 {ref} after {steps} steps"


def test_is_bf16_supported(anydev):
    """torch.ral.is_bf16_supported() says yes only where a bfloat16 matmul computes what CPU's does."""
    with torch.ral.device(int(anydev.split(":")[1])):
        supported = torch.ral.is_bf16_supported()
    assert supported == (torch.bfloat16 in _dtypes(anydev))
    if supported:
        a, b = torch.randn(8, 16).bfloat16(), torch.randn(16, 4).bfloat16()
        out = a.to(anydev) @ b.to(anydev)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.cpu(), a @ b, rtol=1.6e-2, atol=1e-2)
