"""Output strides of the common CNN ops on channels_last, channels_last_3d and permuted
inputs: the forward result and the gradients (input and weight, from torch.autograd.grad, so
AccumulateGrad's re-layout of leaf gradients hides nothing) are laid out as CPU lays them
out, on ral:0 and ral:1, with the module moved to the device and under ral_mode, and their
values equal CPU's (float32, rtol = atol = 1e-4).

One rule is PyTorch's, not CPU's: a convolution's layout is its backend's
(`_determine_backend_memory_format`), row-major for a PrivateUse1 device
(ConvBackend::Overrideable), and torch.compile's fake tensors lay a ral conv out that way, so
inductor asserts it (tests/test_output_layout.py, `test_channels_last_convnet_trains_as_on_cpu`).
`test_pytorch_lays_a_ral_convolution_out_row_major` checks that PyTorch still says so; conv
results and gradients are compared with that row-major layout.

Batch norm's kernels take row-major operands only (manifest `requires_contiguous`); its
channels_last result used to come back row-major (288, 36, 6, 1) where CPU gives
(288, 1, 48, 8). The vendor tier now copies such results into CPU's layout
(tiers/vendor.py RelayoutRun); max_unpool2d and channel_shuffle, which the decomp tier serves,
came back row-major too (tiers/output_specs.py SUGGESTED_FORMAT_OUTPUTS serves both tiers).

Under `-m slow`: every op_db op (float32) on channels_last samples, and module_db's conv,
norm and pool modules, forward and backward.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from sweep_support import DEVICES, LAYOUT_AS_OFF_CPU, layout_off_cpu, need_device
from torch import nn

from torch_fl.mode import ral_mode
from torch_fl.observe import conformance as C
from torch_fl.tensor.layout import contiguous_strides, is_dense, significant_strides

TOL = {"rtol": 1e-4, "atol": 1e-4, "equal_nan": True}  # LPPool of negative inputs: NaN where CPU has NaN
STYLES = ("device", "mode")


class Fn(nn.Module):
    """A functional op as a module (so every case runs through one harness)."""

    def __init__(self, fn, name):
        super().__init__()
        self.fn, self.name = fn, name

    def forward(self, x):
        return self.fn(x)

    def extra_repr(self):
        return self.name


def _fn(name, fn):
    return lambda: Fn(fn, name)


# Results PyTorch itself lays out row-major off CPU (CUDA alike), so ral does too: a conv's
# (its backend's rule), and group norm's input gradient (derivatives.yaml makes grad and input
# contiguous before native_group_norm_backward on every device but CPU and XPU).
ROW_MAJOR_OFF_CPU = {
    "conv": ("output", "grad_input", "grad_param0"),
    "group_norm": ("grad_input",),
}

# name: (module factory, input shape, the ROW_MAJOR_OFF_CPU rule or None)
CASES = {
    "conv1d": (lambda: nn.Conv1d(4, 6, 3, padding=1), (2, 4, 9), "conv"),
    "conv2d": (lambda: nn.Conv2d(4, 6, 3, padding=1), (2, 4, 7, 6), "conv"),
    "conv2d_strided_groups": (lambda: nn.Conv2d(4, 6, 3, stride=2, groups=2), (2, 4, 7, 6), "conv"),
    "conv3d": (lambda: nn.Conv3d(3, 4, 3, padding=1), (2, 3, 4, 5, 4), "conv"),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(4, 3, 3, stride=2), (2, 4, 5, 4), "conv"),
    "batch_norm2d_train": (lambda: nn.BatchNorm2d(4), (4, 4, 6, 5), None),
    "batch_norm2d_eval": (lambda: nn.BatchNorm2d(4).eval(), (4, 4, 6, 5), None),
    "batch_norm3d_train": (lambda: nn.BatchNorm3d(3), (2, 3, 4, 3, 5), None),
    "batch_norm1d_train": (lambda: nn.BatchNorm1d(4), (3, 4, 7), None),
    "max_pool2d": (lambda: nn.MaxPool2d(2), (2, 4, 6, 6), None),
    "avg_pool2d": (lambda: nn.AvgPool2d(3, stride=2, padding=1), (2, 4, 7, 6), None),
    "adaptive_avg_pool2d": (lambda: nn.AdaptiveAvgPool2d(3), (2, 4, 7, 6), None),
    "max_pool3d": (lambda: nn.MaxPool3d(2), (2, 3, 4, 4, 6), None),
    "avg_pool3d": (lambda: nn.AvgPool3d(2), (2, 3, 4, 4, 6), None),
    "max_unpool2d": (
        _fn("max_unpool2d", lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)),
        (2, 4, 6, 4),
        None,
    ),
    "channel_shuffle": (lambda: nn.ChannelShuffle(2), (2, 4, 5, 6), None),
    "upsample_nearest": (lambda: nn.Upsample(scale_factor=2), (2, 4, 3, 5), None),
    "upsample_bilinear": (lambda: nn.Upsample(scale_factor=2, mode="bilinear"), (2, 4, 3, 5), None),
    "relu": (lambda: nn.ReLU(), (2, 4, 5, 6), None),
    "add_self": (_fn("x + x * 2", lambda x: x + x * 2), (2, 4, 5, 6), None),
    "sigmoid": (lambda: nn.Sigmoid(), (2, 3, 4, 5, 6), None),
    "layer_norm": (lambda: nn.LayerNorm(6), (2, 4, 5, 6), None),
    "group_norm": (lambda: nn.GroupNorm(2, 4), (2, 4, 5, 6), "group_norm"),
    "softmax_channels": (lambda: nn.Softmax(dim=1), (2, 4, 5, 6), None),
    "log_softmax_last": (lambda: nn.LogSoftmax(dim=-1), (2, 4, 5, 6), None),
}


def channels_last(t: torch.Tensor) -> torch.Tensor:
    """t's values stored channels-innermost: channels_last (4-d), channels_last_3d (5-d), or
    the same order for other ranks (a permutation PyTorch has no format name for)."""
    if t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=torch.channels_last_3d)
    perm = [0, *range(2, t.dim()), 1]
    return t.permute(perm).contiguous().permute([perm.index(i) for i in range(t.dim())])


def permuted(t: torch.Tensor) -> torch.Tensor:
    """t's values with its last two dims stored column-major (dense, not contiguous)."""
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


LAYOUTS = {"channels_last": channels_last, "permuted": permuted}


def _layout_module(m: nn.Module, layout) -> nn.Module:
    """Parameters of 3 or more dims (conv weights) stored as the input is."""
    for p in m.parameters():
        if p.dim() >= 3:
            p.data = layout(p.data)
    return m


def _expected_strides(t: torch.Tensor, cpu: torch.Tensor, row_major: bool) -> tuple:
    """The significant strides the device result must have: CPU's, or row-major."""
    if row_major:
        return tuple(s for n, s in zip(t.shape, contiguous_strides(t.shape)) if n != 1)
    return significant_strides(cpu)


def _run(case, layout_name, dev, style):
    """(CPU results, device results): output, then grad of input and each parameter."""
    factory, shape, _ = CASES[case]
    layout = LAYOUTS[layout_name]
    torch.manual_seed(0)
    module = _layout_module(factory(), layout)
    x = layout(torch.randn(shape)).requires_grad_()
    out = module(x)
    grad_out = layout(torch.randn(out.shape))
    # The gradient reaching `out` is grad_out (mul's backward keeps grad_out's layout); a
    # scalar root, because under ral_mode an explicit CPU grad_outputs fails (see
    # test_mode_backward_with_an_explicit_cpu_grad_output).
    expected = (out, *torch.autograd.grad((out * grad_out).sum(), [x, *module.parameters()]))
    m = copy.deepcopy(module)
    if style == "device":
        m = m.to(dev)
        xd = x.detach().to(dev).requires_grad_()
        out = m(xd)
        got = (out, *torch.autograd.grad((out * grad_out.to(dev)).sum(), [xd, *m.parameters()]))
    else:
        with ral_mode(dev):
            xd = x.detach().clone().requires_grad_()
            out = m(xd)
            got = (out, *torch.autograd.grad((out * grad_out).sum(), [xd, *m.parameters()]))
    return expected, got


def _check(expected, got, rule, what):
    names = ["output", "grad_input"] + [f"grad_param{i}" for i in range(len(expected) - 2)]
    for name, e, a in zip(names, expected, got):
        a_cpu = a.detach().cpu()
        torch.testing.assert_close(a_cpu, e.detach(), **TOL, msg=f"{what} {name} values")
        if e.numel() > 1 and is_dense(e.shape, e.stride()):
            want = _expected_strides(a, e, name in ROW_MAJOR_OFF_CPU.get(rule, ()))
            assert significant_strides(a) == want, f"{what} {name}: {a.stride()}, expected {want} (CPU {e.stride()})"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("case", list(CASES))
def test_cnn_op_strides_match_cpu(case, layout, dev, style):
    """Forward result and input/weight gradients laid out as on CPU (conv: PyTorch's
    PrivateUse1 rule), values as on CPU; twice, the second call through the cached plans."""
    need_device(dev)
    for _ in range(2):
        expected, got = _run(case, layout, dev, style)
        _check(expected, got, CASES[case][2], f"{case} {layout} {dev} {style}")


@pytest.mark.parametrize("dev", DEVICES)
def test_layouts_alternate_through_the_caches(dev):
    """One op, one shape, inputs alternating row-major and channels_last: each call gets its own
    layout (the decision and positional caches key on the input's strides), values as CPU's."""
    need_device(dev)
    torch.manual_seed(0)
    x = torch.randn(4, 8, 6, 6)
    w, b = torch.randn(8), torch.randn(8)
    for fmt in [torch.contiguous_format, torch.channels_last] * 3:
        xi = x.contiguous(memory_format=fmt)
        for fn in (
            lambda t, w, b: F.batch_norm(t, None, None, w, b, training=True),
            lambda t, w, b: torch.ops.aten.native_batch_norm(t, w, b, None, None, True, 0.1, 1e-5)[0],
            lambda t, w, b: F.max_pool2d(t, 2) + 1,
        ):
            e = fn(xi, w, b)
            a = fn(*(t.to(dev) for t in (xi, w, b)))
            assert a.stride() == e.stride(), f"{fmt}: {a.stride()} vs CPU's {e.stride()}"
            torch.testing.assert_close(a.cpu(), e, **TOL)


def test_mode_backward_with_an_explicit_cpu_grad_output():
    """Under ral_mode, `out.backward(g)` with a CPU `g` gives CPU's gradient (as `(out * g).sum().backward()`
    does; every backward entry point: tests/test_mode_semantics.py::test_cpu_gradients_for_device_outputs)."""
    need_device("ral:0")
    torch.manual_seed(0)
    x = torch.randn(2, 4, 9, requires_grad=True)
    g = torch.randn(2, 4, 9)
    (expected,) = torch.autograd.grad(torch.relu(x), [x], g)
    with ral_mode("ral:0"):
        (got,) = torch.autograd.grad(torch.relu(x), [x], g)
    torch.testing.assert_close(got.cpu(), expected)


def test_pytorch_lays_a_ral_convolution_out_row_major():
    """The conv rule the other tests hold ral to is PyTorch's: fake tensors (what torch.compile
    traces with) of ral tensors give a channels_last conv row-major results, forward and
    backward, where CPU gives channels_last. If PyTorch changes this, ral should follow."""
    need_device("ral:0")
    from torch._subclasses.fake_tensor import FakeTensorMode

    cl = torch.channels_last
    x = torch.randn(2, 4, 6, 6).contiguous(memory_format=cl)
    w = torch.randn(3, 4, 3, 3).contiguous(memory_format=cl)
    g = torch.randn(2, 3, 4, 4).contiguous(memory_format=cl)
    args = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    aten = torch.ops.aten
    cpu_out = aten.convolution(x, w, None, *args)
    cpu_grads = aten.convolution_backward(g, x, w, None, *args, [True, True, False])
    assert cpu_out.is_contiguous(memory_format=cl) and not cpu_out.is_contiguous()
    mode = FakeTensorMode()
    fx, fw, fg = (mode.from_tensor(t.to("ral:0")) for t in (x, w, g))
    with mode:
        out = aten.convolution(fx, fw, None, *args)
        grads = aten.convolution_backward(fg, fx, fw, None, *args, [True, True, False])
    assert out.is_contiguous(), out.stride()
    assert grads[0].is_contiguous() and grads[1].is_contiguous(), (grads[0].stride(), grads[1].stride())
    assert cpu_grads[0].is_contiguous(memory_format=cl)  # CPU's mkldnn keeps channels_last
    real = aten.convolution(x.to("ral:0"), w.to("ral:0"), None, *args)
    assert real.stride() == out.stride()


# --- the full sweeps (-m slow) ---------------------------------------------------------------

SWEEP_SAMPLES = 12


def _channels_last_sample(t):
    if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() in (4, 5):
        return channels_last(t.detach()).requires_grad_(t.requires_grad)
    return t


def _tensors(v):
    return [x for x in torch.utils._pytree.tree_leaves(v) if isinstance(x, torch.Tensor)]


def _sweep_op(op, dev, style):
    """(compared, mismatches) over the op's float32 samples with 4-d/5-d tensors channels_last."""
    conv = layout_off_cpu(C.opinfo_name(op)) and C.opinfo_name(op).startswith("nn.functional.conv")
    compared, bad = 0, []
    for i, sample in enumerate(C.samples_of(op, torch.float32, SWEEP_SAMPLES)):
        if not any(t.dim() in (4, 5) for t in _tensors(sample.input) + _tensors(sample.args)):
            continue
        sample = sample.transform(_channels_last_sample)
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # CPU refuses the sample: test_opinfo checks the error
        if style == "mode":
            with ral_mode(dev):
                actual = op(sample.input, *sample.args, **sample.kwargs)
        else:
            moved = sample.transform(lambda t: C._to(t, dev))
            actual = op(moved.input, *moved.args, **moved.kwargs)
        if not C._is_random(op, sample):
            C._compare(C._cpu(actual), expected, torch.float32)
        for a, e in zip(_tensors(actual), _tensors(expected)):
            if e.numel() <= 1 or a.shape != e.shape or not is_dense(e.shape, e.stride()):
                continue
            compared += 1
            if significant_strides(a) != _expected_strides(a, e, conv):
                bad.append(f"{C.opinfo_name(op)} sample {i} {tuple(e.shape)}: {a.stride()} vs CPU's {e.stride()}")
    return compared, bad


SWEEP_SKIP = {k: v for k, v in LAYOUT_AS_OFF_CPU.items() if not k.startswith("nn.functional.conv")}


@pytest.mark.slow
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("dev", DEVICES)
def test_every_op_on_channels_last_samples_matches_cpu(dev, style):
    """Every op_db op (float32, all tiers) on samples whose 4-d/5-d tensors are channels_last /
    channels_last_3d: values as CPU's, dense results laid out as CPU's (convs: row-major)."""
    need_device(dev)
    compared, bad = 0, []
    for op, _ in C.select(C.load_op_db()):
        name = C.opinfo_name(op)
        if C._seeded_random(op) or name in SWEEP_SKIP:
            continue
        n, b = _sweep_op(op, dev, style)
        compared += n
        bad += b
    assert compared > 400, f"only {compared} results compared: the sweep lost its samples"  # 512 (ral:0)
    assert not bad, f"{len(bad)} results laid out unlike CPU:\n" + "\n".join(bad[:30])


MODULE_PREFIXES = ("Conv", "LazyConv", "BatchNorm", "InstanceNorm", "GroupNorm", "LayerNorm", "LocalResponseNorm")
MODULE_SUFFIXES = ("Pool2d", "Pool3d", "Upsample", "PixelShuffle", "PixelUnshuffle")


def _module_infos():
    from torch.testing._internal.common_modules import module_db

    prefixes = tuple("nn." + p for p in MODULE_PREFIXES)
    return [m for m in module_db if m.name.startswith(prefixes) or m.name.endswith(MODULE_SUFFIXES)]


@pytest.mark.slow
@pytest.mark.parametrize("dev", DEVICES)
def test_module_db_cnn_modules_on_channels_last_inputs_match_cpu(dev):
    """module_db's conv, norm and pool modules (float32, training) on channels_last inputs:
    output and input/parameter gradients laid out and valued as on CPU (convs: row-major)."""
    need_device(dev)
    compared, bad = 0, []
    for info in _module_infos():
        if info.name.startswith("nn.Lazy"):
            continue  # parameters materialise on the first call: nothing differs in layout
        rule = "conv" if "Conv" in info.name else "group_norm" if "GroupNorm" in info.name else None
        inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)
        for k, mi in enumerate(inputs[:SWEEP_SAMPLES]):
            fi = mi.forward_input
            if not any(t.dim() in (4, 5) for t in _tensors(fi.args)):
                continue
            torch.manual_seed(0)
            try:
                module = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs)
            except Exception:
                continue  # constructor refuses these arguments on CPU too
            args = [_channels_last_sample(a) for a in fi.args]
            leaves = [a for a in _tensors(args) if a.requires_grad] + list(module.parameters())
            try:
                out = module(*args, **fi.kwargs)
            except Exception:
                continue
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                continue
            go = channels_last(torch.randn(out.shape)) if out.dim() in (3, 4, 5) else torch.randn(out.shape)
            expected = (out, *torch.autograd.grad(out, leaves, go, allow_unused=True))
            m = copy.deepcopy(module).to(dev)
            dargs = [C._to(a.detach(), dev).requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                     for a in args]  # fmt: skip
            dleaves = [a for a in _tensors(dargs) if a.requires_grad] + list(m.parameters())
            dout = m(*dargs, **fi.kwargs)
            got = (dout, *torch.autograd.grad(dout, dleaves, go.to(dev), allow_unused=True))
            for j, (e, a) in enumerate(zip(expected, got)):
                if e is None:
                    continue
                torch.testing.assert_close(a.detach().cpu(), e.detach(), **TOL, msg=f"{info.name} input {k} result {j}")
                if e.numel() <= 1 or not is_dense(e.shape, e.stride()):
                    continue
                compared += 1
                name = ["output", "grad_input"][j] if j < 2 else f"grad_param{j - 2}"
                want = _expected_strides(a, e, name in ROW_MAJOR_OFF_CPU.get(rule, ()))
                if significant_strides(a) != want:
                    bad.append(f"{info.name} input {k} result {j} {tuple(e.shape)}: {a.stride()} vs {want}")
    assert compared > 50, f"only {compared} results compared"
    assert not bad, f"{len(bad)} results laid out unlike CPU:\n" + "\n".join(bad[:30])
