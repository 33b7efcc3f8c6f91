"""What keeps a compiled step's fused kernels few on ral:1 (OpenCL), on both devices against CPU.

- A fused group is cut by the OpenCL argument limit (`fusion.MAX_TENSORS` tensors) counting
  its leaves and only the placeholders still alive: a long chain whose intermediates die (an
  FX graph drops each value after its last use) is one kernel, as GPT-2's tanh-GELU backward
  (13 ops over 3 inputs; it was two kernels and 4 intermediates written and read back). A
  group with more live results than the limit is still cut, and every value is right.
- A float32 tanh fuses on OpenCL (16 lanes, PoCL's vector tanh with the plugin's +-1 rule):
  GPT-2's GELU forward is one kernel; values against CPU at inf, NaN, the saturation and -0.0.
- On OpenCL devices the math calls that stay out of fused kernels (exp, ...; tanh when not
  fused) and a fused tanh are saved for the backward, not recomputed there
  (`compile_backend.save_opencl_math`): GPT-2's backward ran the cube chain's kernel and the
  plugin's tanh again per layer.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import plugin_device

import torch_fl
from torch_fl.jit import compile_backend, fuse, fusion

DEVICES = ["ral:0", "ral:1"]
TOL = dict(rtol=1e-5, atol=1e-5)


def _need(dev: str) -> None:
    if int(dev.split(":")[1]) >= torch.ral.device_count():
        pytest.skip(f"{dev} is not present (ral:1 needs the OpenCL plugin)")


def _gelu_backward(x, g, t):
    """tanh-GELU's gradient from the saved tanh `t`: 13 ops on 3 inputs, one result; each
    intermediate dies at its last use (nested expressions, as an FX graph's `v = None`)."""
    return g * (1.0 + t) * 0.5 + (g * (x * 0.5)) * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * (x * x))


def _inputs():
    torch.manual_seed(0)
    x = torch.randn(4, 64, 96)
    return x, torch.randn(4, 64, 96), torch.tanh(0.8 * x)


def _groups(run) -> tuple[torch.Tensor, int]:
    before = fusion.STATS["groups"]
    out = run()
    return out, fusion.STATS["groups"] - before


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_long_chain_with_dead_intermediates_is_one_kernel(dev, style):
    """A fuse() region: one kernel on both devices (ral:1 cut it in two before)."""
    _need(dev)
    args = _inputs()
    want = _gelu_backward(*args)
    on = [a.to(dev) for a in args]

    def run():
        with fuse():
            return _gelu_backward(*on)

    if style == "mode":
        with torch_fl.ral_mode(dev):
            got, n = _groups(run)
    else:
        got, n = _groups(run)
    assert got.device == torch.device(dev)
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert n == 1, f"{n} fused kernels for one chain on {dev}"


@pytest.mark.parametrize("dev", DEVICES)
def test_compiled_chain_is_one_kernel(dev):
    """backend="ral": the FX graph's chain (values as named temporaries it drops) records one
    fused kernel on its first call and replays it, with CPU's values both times."""
    _need(dev)
    torch._dynamo.reset()
    args = _inputs()
    want = _gelu_backward(*args)

    def chain(x, g, t):
        a = x * 0.5
        b = g * a
        c = 1.0 - t * t
        d = b * c * 0.7978845608028654
        e = 1.0 + 3.0 * 0.044715 * (x * x)
        return g * (1.0 + t) * 0.5 + d * e

    f = torch.compile(chain, backend="ral")
    on = [a.to(dev) for a in args]
    got, n = _groups(lambda: f(*on))
    torch.testing.assert_close(got.cpu(), want, **TOL)
    assert n == 1, f"{n} fused kernels recorded for one chain on {dev}"
    torch.testing.assert_close(f(*on).cpu(), want, **TOL)  # the replay


def test_live_results_past_the_limit_still_cut():
    """More live results than an OpenCL kernel takes: the group is cut where the limit says,
    and every result is right (the count of live values is an upper bound, not a guess)."""
    dev = plugin_device("opencl")
    _need(dev)
    torch.manual_seed(1)
    x, y = torch.randn(1000), torch.randn(1000)
    want = [x * (k + 1) + y for k in range(fusion.MAX_TENSORS + 3)]
    xd, yd = x.to(dev), y.to(dev)
    with fuse():
        before = fusion.STATS["groups"]
        got = [xd * (k + 1) + yd for k in range(fusion.MAX_TENSORS + 3)]
    assert fusion.STATS["groups"] - before >= 2
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, **TOL)


class _NewGELU(torch.nn.Module):
    """GPT-2's gelu_new, written out (transformers' NewGELUActivation)."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


# (device, backend, unfused math saved, float32 tanh fused) -> fused kernels (forward, backward)
MLP_CASES = {
    "ral:0": ("ral:0", "ral", True, True, (1, 1)),
    "ral:1": ("ral:1", "ral", True, True, (1, 1)),
    "ral:1-tanh-apart": ("ral:1", "ral", True, False, (2, 1)),
    "ral:1-tanh-apart-recompute": ("ral:1", "ral", False, False, (2, 2)),
    "ral:1-default-backend": ("ral:1", "inductor", True, True, (1, 1)),
}


@pytest.mark.parametrize("case", sorted(MLP_CASES))
def test_gelu_mlp_training_step_matches_cpu(case, monkeypatch):
    """A GPT-2-style MLP (Linear, gelu_new, Linear) trained one step with backend="ral" (and
    the default backend's extern call on ral:1): loss and AdamW's update against CPU. The
    forward's GELU is one fused kernel and so is the backward: on ral:1 a float32 tanh fuses
    (16 lanes, as the plugin's kernel); kept apart, it is a kernel of its own between two
    fused chains, and its result is saved for the backward, not recomputed (unsaved: the cube
    chain's kernel, the plugin's tanh, then the gradient)."""
    dev, backend, save, vector, (want_fw, want_bw) = MLP_CASES[case]
    _need(dev)
    monkeypatch.setattr(compile_backend, "SAVE_MATH", save)
    monkeypatch.setattr(compile_backend, "VECTOR_MATH", vector)
    torch._dynamo.reset()
    torch.manual_seed(2)
    ref = torch.nn.Sequential(torch.nn.Linear(32, 128), _NewGELU(), torch.nn.Linear(128, 32))
    x = torch.randn(64, 32) * 4.0  # reaches tanh's saturated range
    model = copy.deepcopy(ref).to(dev)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    f = torch.compile(model, backend=backend)
    want = ref(x).pow(2).mean()
    want.backward()
    opt_ref.step()
    before = fusion.STATS["groups"]
    loss = f(x.to(dev)).pow(2).mean()
    mid = fusion.STATS["groups"]
    loss.backward()
    groups = (mid - before, fusion.STATS["groups"] - mid)
    opt.step()
    torch.testing.assert_close(loss.cpu(), want, rtol=1e-5, atol=1e-4)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-4, atol=1e-5)
    assert groups == (want_fw, want_bw), f"fused kernels (forward, backward) {groups} on {case}"


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", ["to", "mode"])
def test_fused_tanh_matches_cpu_at_the_edges(dev, style):
    """A fused float32 tanh chain over infinities, NaN, the +-1 saturation (|x| >= 9.1, where
    PoCL's own tanh stops short of 1), -0.0 and tiny values, in the 16-lane loop and the scalar
    tail (4099 elements), compiled and in a fuse() region."""
    _need(dev)
    torch._dynamo.reset()
    edges = torch.tensor([float("inf"), -float("inf"), float("nan"), 9.1, -9.2, 40.0, -0.0, 1e-8, 3.0])
    x = torch.randn(4099) * 6.0
    x[: len(edges)] = edges
    x[-len(edges) :] = edges

    def chain(t):
        return torch.tanh(t * 0.5) * 2.0 + t * 0.1

    want = chain(x)
    f = torch.compile(chain, backend="ral")

    def run():
        xd = x.to(dev)
        with fuse():
            a = chain(xd)
        return a, f(xd)

    if style == "mode":
        with torch_fl.ral_mode(dev):
            got = run()
    else:
        got = run()
    for g in got:
        torch.testing.assert_close(g.cpu(), want, rtol=1e-5, atol=1e-5, equal_nan=True)
