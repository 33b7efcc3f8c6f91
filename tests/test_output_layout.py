"""Capability: a fresh output of a vendor kernel is laid out as PyTorch's meta kernel lays it
out (a pointwise op on transposed inputs gives a transposed result, as on CPU), and every
kernel writes through those strides: values match CPU on both devices, with tensors moved to
the device and with CPU tensors under ral_mode (whose results come back to CPU).

The inputs: every float32 OpInfo sample of each op that a plugin manifest serves, with each
tensor of two or more dimensions re-laid out column-major in its last two dimensions (same
shape and values, dense, not contiguous). A kernel that wrote a permuted output as if it
were contiguous gives wrong numbers here, so the values are compared with CPU's (float32
tolerances of the OpInfo sweep, conformance.TOLERANCES); where the vendor tier served the op, the strides must be
CPU's too.

Beyond the manifests: every op_db op, whichever tier serves it, returns CPU's layout
(`test_every_tier_lays_results_out_as_cpu`), and so do conversions and factories (`.to()`,
`.cpu()`, `*_like`, `memory_format=`).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sweep_support import DEVICES, column_major, layout_off_cpu, need_device

from torch_fl.core.registry import REGISTRY
from torch_fl.device.index import parse_device
from torch_fl.mode import ral_mode
from torch_fl.observe import conformance as C
from torch_fl.observe.coverage import Coverage
from torch_fl.tensor.layout import contiguous_strides, elementwise_strides, is_dense, significant_strides

MAX_SAMPLES = 6  # per op: the first samples already vary rank, broadcasting and dims


def _base(op: str) -> str:
    """'aten::add_.Tensor' -> 'add'."""
    return op.split("::")[1].split(".")[0].rstrip("_")


def _manifest_names(dev: int) -> set[str]:
    """Base names (add, sum, mm, ...) of every op the device's plugin manifest declares."""
    st = REGISTRY.plugin_of(dev)
    return {_base(op) for op in st.by_op} if st is not None else set()


def _ops():
    names = set().union(*(_manifest_names(r.index) for r in torch.ral.device_records()))
    return [
        op
        for op, _ in C.select(C.load_op_db())
        if op.name in names and not op.variant_test_name and not C._seeded_random(op)  # random: no values to compare
    ]


def _tensors(v):
    return [x for x in torch.utils._pytree.tree_leaves(v) if isinstance(x, torch.Tensor)]


def _close(actual, expected):
    C._compare(actual, expected, torch.float32)  # the OpInfo sweep's float32 tolerances


OPS = _ops()


def _run(op, sample, dev, style):
    """op on the sample's tensors moved to dev ("device"), or on the CPU sample under ral_mode."""
    if style == "mode":
        with ral_mode(dev):
            return op(sample.input, *sample.args, **sample.kwargs)
    moved = sample.transform(lambda t: C._to(t, dev))
    return op(moved.input, *moved.args, **moved.kwargs)


@pytest.mark.parametrize("style", ["device", "mode"])
@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_permuted_inputs_match_cpu_values_and_layout(dev, op, style):
    need_device(dev)
    if op.name not in _manifest_names(parse_device(dev)):
        pytest.skip(f"{dev}'s manifest has no kernel for {op.name}")
    samples = C.samples_of(op, torch.float32, MAX_SAMPLES)
    checked = 0
    for i, sample in enumerate(samples):
        sample = sample.transform(column_major)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # CPU refuses this sample: test_opinfo checks the error type
        if C._is_random(op, sample):
            continue  # no values to compare (test_opinfo checks shapes and dtypes)
        for _ in range(2):  # the second call takes the cached plans and signatures
            cov = Coverage()
            with cov:
                actual = _run(op, sample, dev, style)
            _close(C._cpu(actual), expected)
            vendor_only = {tier for _, tier in cov.counts} == {"vendor"}
            for a, e in zip(_tensors(actual), _tensors(expected)):
                if style == "device" and vendor_only and e.numel() > 1:
                    assert a.stride() == e.stride(), f"sample {i}: {a.stride()} vs CPU's {e.stride()}"
                if e.dim() >= 2 and e.is_floating_point():
                    # A view and a kernel on the result: they read its strides through the
                    # signature the fast caches keep for it, which must say the same.
                    with ral_mode(dev) if style == "mode" else contextlib.nullcontext():
                        twice = a.mT * 2
                    _close(C._cpu(twice), e.mT * 2)
        checked += 1
    assert checked, f"no sample of {op.name} ran on CPU"


ALL_OPS = [op for op, _ in C.select(C.load_op_db()) if not C._seeded_random(op)]
LAYOUT_SAMPLES = 2


def _layout_mismatches(dev: str, dtype: torch.dtype, style: str) -> tuple[int, list[str]]:
    """Run up to LAYOUT_SAMPLES column-major samples of every op_db op on dev; return how many
    results were compared and the ones laid out unlike CPU's (dense, more than one element)."""
    compared, bad = 0, []
    for op in ALL_OPS:
        if layout_off_cpu(C.opinfo_name(op)) or dtype not in op.supported_dtypes("cpu"):
            continue
        for sample in C.samples_of(op, dtype, LAYOUT_SAMPLES):
            sample = sample.transform(column_major)
            try:
                expected = op(sample.input, *sample.args, **sample.kwargs)
                actual = _run(op, sample, dev, style)
            except Exception:
                continue  # refusals and their exception types: test_opinfo
            for a, e in zip(_tensors(actual), _tensors(expected)):
                if e.numel() <= 1 or a.shape != e.shape or not is_dense(e.shape, e.stride()):
                    continue
                compared += 1
                if significant_strides(a) != significant_strides(e):
                    bad.append(f"{C.opinfo_name(op)} {tuple(e.shape)}: {a.stride()} vs CPU's {e.stride()}")
                break
    return compared, bad


@pytest.mark.parametrize(
    "dtype,style",
    [(torch.float32, "device"), (torch.bfloat16, "device"), (torch.int64, "device"), (torch.float32, "mode")],
    ids=["float32-device", "bfloat16-device", "int64-device", "float32-mode"],
)
@pytest.mark.parametrize("dev", DEVICES)
def test_every_tier_lays_results_out_as_cpu(dev, dtype, style):
    """Every op_db op (all tiers: vendor, jit, decomp, cpu) on column-major inputs returns CPU's
    layout, so a later `view` that works on CPU works here. ral:1 once returned row-major
    results from its cpu tier (96 float32 ops), and jit ops followed Python meta kernels
    that lay out broadcast operands differently from CPU."""
    need_device(dev)
    compared, bad = _layout_mismatches(dev, dtype, style)
    assert compared > 300, f"only {compared} results compared: the sweep lost its samples"
    assert not bad, f"{len(bad)} results laid out unlike CPU:\n" + "\n".join(bad[:20])


def _layout_cases():
    x4 = torch.randn(2, 3, 4, 5)
    cl = torch.channels_last
    m = torch.randn(4, 6)
    return {
        ".to(device) of a transposed tensor": lambda d: m.t().to(d),
        ".to(dtype) of a transposed tensor": lambda d: m.to(d).t().to(torch.float64),
        ".to(bfloat16) of a transposed tensor": lambda d: m.to(d).t().to(torch.bfloat16),
        ".cpu() of a transposed tensor": lambda d: m.to(d).t().cpu(),
        ".to('cpu', float64) of a transposed tensor": lambda d: m.to(d).t().to("cpu", torch.float64),
        "clone of a transposed tensor": lambda d: m.to(d).t().clone(),
        "empty_like of a transposed tensor": lambda d: torch.empty_like(m.to(d).t()),
        "zeros_like of a transposed tensor": lambda d: torch.zeros_like(m.to(d).t()),
        "rand_like of a transposed tensor": lambda d: torch.rand_like(m.to(d).t()),
        "empty(memory_format=channels_last)": lambda d: torch.empty(2, 3, 4, 5, device=d, memory_format=cl),
        "empty_like(memory_format=channels_last)": lambda d: torch.empty_like(x4.to(d), memory_format=cl),
        ".to(memory_format=channels_last)": lambda d: x4.to(d).to(memory_format=cl),
        ".to(float64, memory_format=channels_last)": lambda d: x4.to(d).to(torch.float64, memory_format=cl),
        ".to('cpu', memory_format=channels_last)": lambda d: x4.to(d).to("cpu", memory_format=cl),
        "channels_last .to(device)": lambda d: x4.contiguous(memory_format=cl).to(d),
        "channels_last .cpu()": lambda d: x4.contiguous(memory_format=cl).to(d).cpu(),
        "bfloat16 sigmoid of a transposed tensor": lambda d: torch.sigmoid(m.bfloat16().to(d).t()),
        "float64 sin of a transposed tensor": lambda d: torch.sin(m.double().to(d).t()),
        "copysign of a transposed tensor and a 0-dim one": lambda d: torch.copysign(
            m.to(d).t(), torch.tensor(-1.0).to(d)
        ),
    }


@pytest.mark.parametrize("dev", DEVICES)
def test_conversions_and_factories_keep_cpu_layouts(dev):
    """`.to()`, `.cpu()`, `*_like` and `memory_format=` give CPU's strides, and the values
    read back through them equal CPU's."""
    need_device(dev)
    for name, make in _layout_cases().items():
        torch.manual_seed(0)
        expected = make("cpu")
        torch.manual_seed(0)
        actual = make(dev)
        assert actual.stride() == expected.stride(), f"{name}: {actual.stride()} vs CPU's {expected.stride()}"
        if "empty" not in name and "rand" not in name:
            torch.testing.assert_close(C._cpu(actual), expected, rtol=1e-5, atol=1e-5, msg=name)


@given(st.data())
@settings(max_examples=300, deadline=None)
def test_elementwise_strides_follow_tensor_iterator(data):
    """layout.elementwise_strides (used by the jit tier) gives CPU's output layout for
    broadcast, permuted and size-1 operands of add and addcmul."""
    nd = data.draw(st.integers(1, 4))
    shape = data.draw(st.lists(st.integers(1, 4), min_size=nd, max_size=nd))
    operands = []
    for _ in range(data.draw(st.integers(2, 3))):
        rank = data.draw(st.integers(0, nd))
        sizes = [data.draw(st.sampled_from([1, n])) for n in shape[nd - rank :]]
        perm = data.draw(st.permutations(range(rank)))
        t = torch.randn([sizes[p] for p in perm]).permute([perm.index(i) for i in range(rank)])
        operands.append(t)
    expected = torch.add(*operands) if len(operands) == 2 else torch.addcmul(*operands)
    got = elementwise_strides(tuple(expected.shape), [(t.shape, t.stride()) for t in operands])
    got = got or contiguous_strides(expected.shape)
    assert [s for n, s in zip(expected.shape, got) if n != 1] == list(significant_strides(expected))


@pytest.mark.parametrize("dev", DEVICES)
def test_channels_last_convnet_trains_as_on_cpu(dev):
    """`model.to(memory_format=torch.channels_last)` (the usual convnet speed-up) gives the
    parameters and gradients CPU's channels_last strides and CPU's values, with the model moved
    to the device and under ral_mode, eager and compiled (inductor on ral:0, whose graph
    asserts each fallback kernel's strides). `.to(memory_format=)` was ignored; then conv
    results kept CPU's channels_last, unlike what PyTorch says a ral conv returns, and
    inductor's stride assert failed."""
    need_device(dev)
    import copy

    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2),
    )  # fmt: skip
    cl = torch.channels_last
    x = torch.randn(2, 3, 16, 16).contiguous(memory_format=cl)
    ref = copy.deepcopy(net).to(memory_format=cl)
    expected = ref(x)
    expected.sum().backward()
    model = copy.deepcopy(net).to(dev).to(memory_format=cl)
    xd = x.to(dev)
    # A conv's activation is row-major on ral (PyTorch's rule for a PrivateUse1 conv, which
    # compiled graphs assert); the parameters and their gradients stay channels_last.
    assert model[0](xd).is_contiguous()
    out = model(xd)
    out.sum().backward()
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.stride() == q.stride() and p.grad.stride() == q.grad.stride(), name
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4, msg=name)
    with ral_mode(dev):
        in_mode = copy.deepcopy(net).to(memory_format=cl)(x)
    torch.testing.assert_close(in_mode.cpu(), expected, rtol=1e-4, atol=1e-4)
    backends = ["aot_eager", "ral"] + (["inductor"] if dev == "ral:0" else [])  # inductor: host memory only
    for backend in backends:
        torch._dynamo.reset()
        compiled_model = copy.deepcopy(net).to(dev).to(memory_format=cl)
        out = torch.compile(compiled_model, backend=backend)(xd)
        out.sum().backward()
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4, msg=backend)
        for p, q in zip(compiled_model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-3, atol=1e-4, msg=backend)
