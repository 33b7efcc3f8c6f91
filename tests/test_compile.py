"""torch.compile on ral tensors: eager, aot_eager and the ral backend, forward and training, in
both styles, on ral:0 and ral:1; results against the same steps in eager CPU float32; graph
breaks and graph counts against the same model compiled on CPU."""

from __future__ import annotations

import copy

import pytest
import torch
from compile_models import Block

import torch_fl

TOL = dict(rtol=1e-4, atol=1e-5)


def _devices():
    return [f"ral:{i}" for i in range(min(torch.ral.device_count(), 2))]


def _train(model, x, steps, compile_backend=None, to=None):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    fn = torch.compile(model, backend=compile_backend) if compile_backend else model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        out = fn(x if to is None else x.to(to))
        out.pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    return out, sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


@pytest.fixture(scope="module", autouse=True)
def _ral_backend():
    import torch_fl.jit.compile_backend  # noqa: F401 (registers backend="ral")


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "ral"])
def test_compile_training_matches_eager(device, backend):
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    ref, cpu_breaks, cpu_graphs = _train(copy.deepcopy(model), x, 2, "eager")
    out, breaks, graphs = _train(copy.deepcopy(model).to(device), x.to(device), 2, backend)
    assert out.device.type == "ral"
    torch.testing.assert_close(out.cpu(), ref, **TOL)
    assert breaks <= cpu_breaks and graphs <= cpu_graphs, (breaks, graphs, cpu_breaks, cpu_graphs)


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("style", ["cpu_model", "to_device"])
def test_compile_inside_ral_mode(device, style):
    """An unmodified CPU training script compiled inside ral_mode: the mode's placement is
    traced into the graph (uploads are graph ops), with no graph break. An eager call comes
    first, so the mode's upload cache holds the CPU parameters; `to_device` then moves the
    model inside the mode, which must not trip over the cache's weak references."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    ref, _, _ = _train(copy.deepcopy(model), x, 2)
    m = copy.deepcopy(model)
    with torch_fl.ral_mode(device):
        m(x)
        if style == "to_device":
            m.to(device)
        out, breaks, graphs = _train(m, x, 2, "aot_eager")
    assert out.device == torch.device(device)
    torch.testing.assert_close(out.cpu(), ref, **TOL)
    assert (breaks, graphs) == (0, 1)
    # cpu_model: the parameters stay the user's CPU tensors, trained through the uploads' backward
    assert m.l1.weight.device.type == ("cpu" if style == "cpu_model" else "ral")


def test_no_recompile_for_new_input_buffers():
    """Guards look at geometry and dtype, never at the device buffer."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(lambda a, b: (a * b).sum(), backend="aot_eager")
    for _ in range(3):
        f(torch.randn(5).to("ral:0"), torch.randn(5).to("ral:0"))
    assert counters["stats"]["unique_graphs"] == 1


def test_ral_backend_fuses_pointwise_chains():
    from torch_fl.jit.compile_backend import partition

    gm = torch.fx.symbolic_trace(lambda x: (x.sin() * 2 + 1).relu().sum())
    from torch._functorch.aot_autograd import aot_function

    seen = {}

    def compiler(g, _):
        seen["gm"] = partition(g)
        return seen["gm"]

    aot_function(gm, fw_compiler=compiler)(torch.randn(4))
    assert any(n.op == "call_module" for n in seen["gm"].graph.nodes)


def _host_mappable_devices():
    from torch_fl.tensor.host_copy import host_mappable

    return [d for d in _devices() if host_mappable(int(d.split(":")[1]))]


@pytest.mark.parametrize("device", _host_mappable_devices())
def test_inductor_on_host_mappable_device(device):
    """The default backend: inductor's host C++ kernels run on ral:0's host-mapped buffers."""
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: (a.sin() + 1) * b.exp() - a.sum())
    a, b = torch.randn(6, 5), torch.randn(6, 5)
    out = f(a.to(device), b.to(device))
    assert type(out) is torch_fl.RalTensor and out.device == torch.device(device)
    torch.testing.assert_close(out.cpu(), (a.sin() + 1) * b.exp() - a.sum(), **TOL)


@pytest.mark.parametrize("device", _host_mappable_devices())
def test_inductor_training_matches_eager(device):
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    ref, cpu_breaks, cpu_graphs = _train(copy.deepcopy(model), x, 2, "inductor")
    dmodel = copy.deepcopy(model).to(device)
    out, breaks, graphs = _train(dmodel, x.to(device), 2, "inductor")
    assert type(out) is torch_fl.RalTensor
    torch.testing.assert_close(out.cpu(), ref, **TOL)
    assert type(dmodel.l1.weight) is torch_fl.RalTensor
    assert breaks == cpu_breaks and graphs == cpu_graphs, (breaks, graphs, cpu_breaks, cpu_graphs)


# inductor's C++ compiles of the forward and backward take seconds: -m slow
@pytest.mark.slow
@pytest.mark.parametrize("device", _host_mappable_devices())
def test_inductor_inside_ral_mode(device):
    """The default backend on a CPU model compiled inside ral_mode (uploads in the graph)."""
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8)
    ref, _, _ = _train(copy.deepcopy(model), x, 2)
    m = copy.deepcopy(model)
    with torch_fl.ral_mode(device):
        out, breaks, graphs = _train(m, x, 2, "inductor")
    assert type(out) is torch_fl.RalTensor
    torch.testing.assert_close(out.cpu(), ref, **TOL)
    assert (breaks, graphs) == (0, 1) and m.l1.weight.device.type == "cpu"


# inductor's GPT-2 step (22 s of C++ compiles) and aot_eager's (~8 s) run with -m slow; CI keeps
# their training checks on the smaller model (test_compile_training_matches_eager,
# test_inductor_training_matches_eager) and the ral backend's GPT-2 step here.
@pytest.mark.parametrize(
    "backend",
    [pytest.param("aot_eager", marks=pytest.mark.slow), "ral", pytest.param("inductor", marks=pytest.mark.slow)],
)
def test_gpt2_training_step_compiles_like_cpu(backend):
    from tests import model_zoo

    model = model_zoo.build("gpt2")
    model.config.use_cache = False  # training: no KV cache
    batch = model_zoo.inputs("gpt2")

    def run(m, b, be):
        from torch._dynamo.utils import counters

        torch._dynamo.reset()
        counters.clear()
        out = torch.compile(m, backend=be)(**b)
        out.loss.backward()
        return out.loss, sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]

    ref, cpu_breaks, cpu_graphs = run(copy.deepcopy(model), batch, "aot_eager")
    dmodel = copy.deepcopy(model).to("ral:0")
    loss, breaks, graphs = run(dmodel, model_zoo.to(batch, "ral:0"), backend)
    torch.testing.assert_close(loss.cpu(), ref.detach(), **TOL)
    assert breaks <= cpu_breaks and graphs <= cpu_graphs, (breaks, graphs, cpu_breaks, cpu_graphs)
    g = dmodel.transformer.h[0].mlp.c_fc.weight.grad
    assert g is not None and g.device.type == "ral"


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_template_matches_cpu(device, approximate):
    """gelu_backward has a jit template, so a compiled backward's pointwise chain through
    GELU stays one fused kernel. float32 tolerance: OpenCL tanh/erf are a few ulp off."""
    from torch_fl.jit.templates import template_for

    assert template_for(torch.ops.aten.gelu_backward.default) is not None
    torch_fl.jit.force(True)
    try:
        g, a = torch.randn(1000), torch.randn(1000) * 3
        out = torch.ops.aten.gelu_backward(g.to(device), a.to(device), approximate=approximate)
    finally:
        torch_fl.jit.force(False)
    want = torch.ops.aten.gelu_backward(g, a, approximate=approximate)
    torch.testing.assert_close(out.cpu(), want, rtol=1.3e-6, atol=1e-5)


def _view_cases():
    cases = [(d, "aot_eager") for d in _devices()]
    return cases + [(d, "inductor") for d in _host_mappable_devices()]


@pytest.mark.parametrize("device,backend", _view_cases())
def test_compile_view_input(device, backend):
    """A graph input that is an autograd view of a RalTensor: Dynamo fakeifies it by replaying
    the view on its base's fake (RalTensor's fake answers the flatten question that asks)."""
    torch._dynamo.reset()
    a = torch.randn(6, 8)
    f = torch.compile(lambda t: t * 2, backend=backend)
    out = f(a.to(device)[:, 1:])
    assert type(out) is torch_fl.RalTensor
    torch.testing.assert_close(out.cpu(), a[:, 1:] * 2)


@pytest.mark.parametrize("device", _devices())
def test_compile_view_input_aliasing(device):
    """Views as inputs keep their aliasing: a write through a view input lands in the base, and
    a view read after its base (also an input) was written sees the write."""
    torch._dynamo.reset()
    a = torch.randn(6, 8)
    b = a.to(device)
    torch.compile(lambda t: t.mul_(2), backend="aot_eager")(b[:, 1:])
    want = a.clone()
    want[:, 1:] *= 2
    torch.testing.assert_close(b.cpu(), want)
    g = torch.compile(lambda base, v: (base.add_(1), v * 3)[1], backend="aot_eager")
    torch.testing.assert_close(g(b, b[2:, ::2]).cpu(), (want + 1)[2:, ::2] * 3)
