"""Bad input: each case raises a specific error naming plugin/op/reason and loses nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import launch_count, run_python

import torch_fl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plugins.build import build_template_plugin, build_test_plugin  # noqa: E402


@pytest.fixture(scope="module")
def bad_root(tmp_path_factory) -> Path:
    """A plugin root with one good plugin and one of each kind of broken plugin."""
    root = tmp_path_factory.mktemp("bad_plugins")
    build_template_plugin(root)
    for name in ("abi2", "corrupt", "faulty"):
        build_test_plugin(name, root)
    # A template-based plugin whose manifest is malformed (bad dtype in entry 1).
    bad = build_test_plugin("badmanifest", root, source="named")
    m = json.loads((Path(__file__).resolve().parent.parent / "manifests" / "template.json").read_text())
    m["plugin"] = "badmanifest"
    m["kernels"][1]["dtypes"] = ["float33"]
    (bad / "manifest.json").write_text(json.dumps(m))
    # The faulty plugin: mul.Tensor fails synchronously, add.Tensor asynchronously.
    fm = json.loads((root / "faulty" / "manifest.json").read_text())
    fm["kernels"] = [fm["kernels"][0], dict(fm["kernels"][1], op="aten::mul.Tensor")]
    (root / "faulty" / "manifest.json").write_text(json.dumps(fm))
    return root


def _run(root, code):
    res = run_python(
        "import torch, torch_fl\n"
        "P = {p.record.name: p for p in torch_fl.plugins()}\n"
        "def dev_of(name): return 'ral:%d' % P[name].devices[0]\n" + code,
        env={"TORCH_FL_PLUGIN_PATH": str(root)},
    )
    assert res.returncode == 0, res.stdout + res.stderr[-4000:]
    return res.stdout


def test_plugin_failures_are_classified_and_others_still_load(bad_root):
    out = _run(
        bad_root,
        """
for name in ("abi2", "corrupt", "badmanifest", "template", "faulty"):
    print(name, P[name].status, "|", P[name].reason)
x = torch.ones(3, device=dev_of("template"))
print("template works", (x + x).tolist())
y = torch.ones(3, device=dev_of("badmanifest"))
with torch_fl.coverage() as cov:
    z = (y * y).tolist()
print("badmanifest falls back", z, sorted(cov.counts))
""",
    )
    assert "abi2 ABI_MISMATCH | plugin is built for ABI 2.0; this runtime implements ABI 1.0" in out
    assert "corrupt LOAD_FAILED |" in out and "invalid ELF header" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("badmanifest INVALID_MANIFEST"))
    assert "badmanifest/manifest.json" in line and "kernels[1]" in line and "'dtypes.0'" in line and "float33" in line
    assert "template LOADED" in out and "template works [2.0, 2.0, 2.0]" in out
    assert "badmanifest falls back [1.0, 1.0, 1.0] [('aten::mul.Tensor', 'cpu')]" in out


def test_kernel_error_names_plugin_op_and_message(bad_root):
    out = _run(
        bad_root,
        """
d = dev_of("faulty")
keep = torch.arange(4.0, device=d)
a = torch.ones(4, device=d)
try:
    (a * a)
except torch_fl.KernelError as exc:
    print("sync:", exc.plugin, exc.op, "|", exc)
b = a + a                       # queued: fails at the next sync point
try:
    b.cpu()
except torch_fl.KernelError as exc:
    print("async:", exc)
c = a + a                       # queued: fails at .item()'s copy-and-wait
try:
    c[0].item()
except torch_fl.KernelError as exc:
    print("async item:", exc)
print("still alive", keep.tolist(), (keep - keep).tolist())
""",
    )
    assert (
        "sync: faulty aten::mul.Tensor | RAL_ERROR_KERNEL_FAILED: [faulty] aten::mul.Tensor (kernel faulty_sync_kernel): injected failure"
        in out
    )
    assert (
        "async: RAL_ERROR_KERNEL_FAILED: [faulty]" in out
        and "aten::add.Tensor (kernel faulty_kernel): injected failure" in out
    )
    assert "async item: RAL_ERROR_KERNEL_FAILED: [faulty]" in out
    assert "still alive [0.0, 1.0, 2.0, 3.0] [0.0, 0.0, 0.0, 0.0]" in out


def test_async_kernel_error_reaches_torch_accelerator_synchronize(bad_root):
    """Device-generic code syncs through torch.accelerator (the C++ guard), not torch.ral."""
    out = _run(
        bad_root,
        """
d = dev_of("faulty")
a = torch.ones(4, device=d)
b = a + a                       # queued: fails at the next sync point
try:
    torch.accelerator.synchronize(torch.device(d).index)
except RuntimeError as exc:
    print("accelerator:", exc)
c = a + a
try:
    torch.accelerator.current_stream(d).synchronize()
except RuntimeError as exc:
    print("stream:", exc)
torch.accelerator.synchronize(torch.device(d).index)  # the error was reported once
print("still alive", a.tolist())
""",
    )
    assert "accelerator: ral:" in out and "injected failure" in out.split("stream:")[0]
    assert "stream: ral:" in out and "injected failure" in out.split("stream:")[1]
    assert "still alive [1.0, 1.0, 1.0, 1.0]" in out


def test_invalid_pointer_never_reaches_plugin(dev):
    from torch_fl.device.memory import Buffer
    from torch_fl.tensor.ral_tensor import wrap

    idx = torch.device(dev).index
    good = torch.arange(16.0, device=dev)
    forged = wrap(Buffer(idx, 0x7F8A12345000, 64), (16,), (1,), 0, torch.float32)
    torch.ral.synchronize()
    before = launch_count(idx)
    with pytest.raises(
        torch_fl.InvalidPointerError, match=r"RAL_ERROR_INVALID_POINTER: buffer 0x7f8a12345000 not mapped to device \d"
    ):
        forged + forged
    assert launch_count(idx) == before
    # A view reaching past its allocation is refused too.
    past = wrap(good._buf, (16,), (1,), 8, torch.float32)
    with pytest.raises(torch_fl.InvalidPointerError, match="exceeds buffer"):
        past + past
    del forged  # freeing a forged buffer is refused by the runtime, silently
    assert (good + good).sum().item() == 240.0


def test_unknown_device_in_mode_is_clear(dev):
    n = torch.ral.device_count()
    with pytest.raises(RuntimeError, match=f"ral:{n + 3} does not exist"):
        torch_fl.ral_mode(f"ral:{n + 3}")


def test_kernel_error_in_mode_backward_is_raised_by_backward(bad_root):
    # The gradient copies of ral_mode's backward are asynchronous; the wait before a
    # gradient reaches .grad is a stream synchronization, so a failed kernel is raised
    # by backward() and no garbage gradient is delivered.
    out = _run(
        bad_root,
        """
d = dev_of("faulty")
w = torch.ones(3, requires_grad=True)
with torch_fl.ral_mode(d):
    g = torch.ones(3)           # created before anything fails
    y = w + w                   # faulty add: queued, fails on the device
    try:
        y.backward(g)
    except torch_fl.KernelError as exc:
        print("backward:", exc.plugin, exc.op, "|", exc)
print("grad", w.grad)
with torch_fl.ral_mode(d):     # the same device still serves a backward ...
    (w - 1).sum().backward()
print("same device", w.grad.tolist())
w.grad = None
with torch_fl.ral_mode(dev_of("template")):  # ... and so does another
    (w * w).sum().backward()
print("other device", w.grad.tolist())
""",
    )
    assert (
        "backward: faulty aten::add.Tensor |" in out
        and "aten::add.Tensor (kernel faulty_kernel): injected failure" in out
    ), out
    assert "grad None" in out
    assert "same device [1.0, 1.0, 1.0]" in out and "other device [2.0, 2.0, 2.0]" in out


_BOOL_SUBTRACTIONS = {
    "float - bool": lambda x, b: x - b,
    "bool - int": lambda x, b: b - 1,
    "float - True": lambda x, b: x - True,
    "int - bool (rsub)": lambda x, b: 1 - b,
    "sub_ in place": lambda x, b: x.clone().sub_(b),
    "torch.rsub": lambda x, b: torch.rsub(x, b),
    "bool - bool": lambda x, b: b - b,
}


@pytest.mark.parametrize("case", list(_BOOL_SUBTRACTIONS))
@pytest.mark.parametrize("device", [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))])
def test_bool_subtraction_raises_cpus_error(device, case):
    # ATen checks this in its CPU/CUDA kernels, not in the meta functions ral plans from
    # (dispatch/argument_checks.py): without the check ral returned a value.
    fn = _BOOL_SUBTRACTIONS[case]
    x, b = torch.randn(3), torch.randn(3) > 0
    with pytest.raises(RuntimeError) as cpu_error:
        fn(x, b)
    with pytest.raises(RuntimeError) as ral_error:
        fn(x.to(device), b.to(device))
    assert str(ral_error.value) == str(cpu_error.value)
    with pytest.raises(RuntimeError) as mode_error, torch_fl.ral_mode(device):
        fn(x, b)
    assert str(mode_error.value) == str(cpu_error.value)
    after = (x.to(device) - b.to(device).float()).cpu()  # the process and the device go on
    torch.testing.assert_close(after, x - b.float(), rtol=0, atol=0)


_BAD_INDEX_SELECTS = {
    "empty uint8 index": torch.tensor([], dtype=torch.uint8),
    "uint8 index": torch.tensor([1], dtype=torch.uint8),
    "float index": torch.tensor([1.0]),
    "2-D index": torch.tensor([[1]]),
}


@pytest.mark.parametrize("case", list(_BAD_INDEX_SELECTS))
@pytest.mark.parametrize("device", [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))])
def test_index_select_refuses_cpus_bad_indices(device, case):
    # CPU's kernel checks the index's rank and dtype; the meta function does not, so an empty
    # uint8 index returned an empty result on ral and a 2-D one raised the plugin's error.
    index, x = _BAD_INDEX_SELECTS[case], torch.randn(3, 4)
    with pytest.raises(Exception) as cpu_error:
        torch.index_select(x, 0, index)
    with pytest.raises(Exception) as ral_error:
        torch.index_select(x.to(device), 0, index.to(device))
    assert type(ral_error.value) is type(cpu_error.value) and str(ral_error.value) == str(cpu_error.value)
    with pytest.raises(Exception) as mode_error, torch_fl.ral_mode(device):
        torch.index_select(x, 0, index)
    assert type(mode_error.value) is type(cpu_error.value)
    good = torch.tensor([2, 0])
    torch.testing.assert_close(torch.index_select(x.to(device), 0, good.to(device)).cpu(), x[good], rtol=0, atol=0)
