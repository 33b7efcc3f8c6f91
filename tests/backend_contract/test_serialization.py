"""Serialization like CUDA's: map_location in every form places a checkpoint on ral:N; a
checkpoint saved from ral is PyTorch's own format (location tag "ral:N"), loadable by plain
PyTorch without torch_fl with map_location="cpu" (weights_only=True included); views saved
together load sharing one buffer; default_restore_location gives a ral storage; skip_data."""

import io
import os
import subprocess
import sys

import pytest
import torch
from conftest import run_python

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]


def _save(obj) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


def _run_without_torch_fl(code: str, cwd) -> None:
    """Run code in plain PyTorch (no torch_fl on the path, no backend autoload); it prints
    "plain-ok" when its checks pass."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert r.returncode == 0 and "plain-ok" in r.stdout, r.stderr[-2000:]


def _ral_checkpoint(device):
    base = torch.arange(12.0, device=device)
    return {
        "view": base[2:8].view(2, 3),
        "strided": base[::3],
        "param": torch.nn.Parameter(torch.linspace(-1, 1, 5, device=device)),
        "half": torch.arange(4, device=device).to(torch.float16),
    }


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", ["str", "device", "dict", "callable", "bare_ral_current"], ids=lambda f: f)
def test_map_location_places_a_cpu_checkpoint_on_ral(device, form):
    cpu = {"w": torch.arange(6.0).reshape(2, 3), "p": torch.nn.Parameter(torch.ones(2))}
    ml = {
        "str": device,
        "device": torch.device(device),
        "dict": {"cpu": device},
        "callable": lambda s, loc: torch.serialization.default_restore_location(s, device),
        "bare_ral_current": "ral",
    }[form]
    want = torch.device(device) if form != "bare_ral_current" else torch.device("ral", torch.ral.current_device())
    got = torch.load(_save(cpu), map_location=ml, weights_only=True)
    assert got["w"].device == want and got["p"].device == want
    assert isinstance(got["p"], torch.nn.Parameter) and got["p"].requires_grad
    torch.testing.assert_close(got["w"].cpu(), cpu["w"])


@pytest.mark.parametrize("device", DEVICES)
def test_default_restore_location_returns_a_ral_storage(device):
    host = torch.UntypedStorage(8)
    s = torch.serialization.default_restore_location(host, device)
    assert s.device == torch.device(device) and s.is_ral and s.nbytes() == 8


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weights_only", [False, True])
def test_ral_checkpoint_round_trip_shares_views(device, weights_only):
    ck = _ral_checkpoint(device)
    got = torch.load(_save(ck), weights_only=weights_only)
    for k in ck:
        assert got[k].device == torch.device(device), k
        torch.testing.assert_close(got[k].cpu(), ck[k].detach().cpu())
    assert isinstance(got["param"], torch.nn.Parameter)
    got["view"].add_(100)  # one buffer again: the strided view sees the write
    torch.testing.assert_close(got["strided"].cpu(), torch.tensor([0.0, 103.0, 106.0, 9.0]))


@pytest.mark.parametrize("device", DEVICES)
def test_ral_checkpoint_loads_on_cpu_in_this_process(device):
    got = torch.load(_save(_ral_checkpoint(device)), map_location="cpu", weights_only=True)
    assert got["view"].device.type == "cpu"
    torch.testing.assert_close(got["view"], torch.arange(2.0, 8.0).view(2, 3))


@pytest.mark.parametrize("device", DEVICES)
def test_plain_pytorch_without_torch_fl_loads_a_ral_checkpoint(tmp_path, device):
    path = tmp_path / "ck.pt"
    torch.save(_ral_checkpoint(device), path)
    code = f"""
import sys, torch
d = torch.load({str(path)!r}, map_location="cpu", weights_only=True)
assert "torch_fl" not in sys.modules, "torch_fl was imported"
assert d["view"].tolist() == [[2.0, 3.0, 4.0], [5.0, 6.0, 7.0]], d["view"]
assert d["strided"].tolist() == [0.0, 3.0, 6.0, 9.0]
assert isinstance(d["param"], torch.nn.Parameter) and d["param"].requires_grad
assert d["half"].dtype == torch.float16 and d["half"].tolist() == [0.0, 1.0, 2.0, 3.0]
d["view"].add_(100)
assert d["strided"].tolist() == [0.0, 103.0, 106.0, 9.0]
print("plain-ok")
"""
    _run_without_torch_fl(code, tmp_path)


@pytest.mark.parametrize("device", DEVICES)
def test_save_under_skip_data(device):
    buf = io.BytesIO()
    with torch.serialization.skip_data():
        torch.save({"t": torch.arange(4.0, device=device)}, buf)
    buf.seek(0)
    t = torch.load(buf, weights_only=True)["t"]
    assert t.device == torch.device(device) and t.shape == (4,)


@pytest.mark.parametrize("device", DEVICES)
def test_checkpoints_under_ral_mode(device):
    """The mode style: map_location forms place a CPU checkpoint on ral; a checkpoint saved
    under the mode loads on the CPU with map_location="cpu" (weights_only) and back on ral with
    its views sharing one buffer; skip_data too."""
    import torch_fl

    cpu = {"w": torch.arange(6.0).reshape(2, 3), "p": torch.nn.Parameter(torch.ones(2))}
    with torch_fl.ral_mode(device):
        for ml in (device, torch.device(device), {"cpu": device}):
            got = torch.load(_save(cpu), map_location=ml, weights_only=True)
            assert got["w"].device == got["p"].device == torch.device(device)
            assert isinstance(got["p"], torch.nn.Parameter) and got["p"].requires_grad
            torch.testing.assert_close(got["w"].cpu(), cpu["w"], rtol=0, atol=0)
        ck = _ral_checkpoint(device)
        on_cpu = torch.load(_save(ck), map_location="cpu", weights_only=True)
        back = torch.load(_save(ck), weights_only=True)
        back["view"].add_(100)
        strided = back["strided"].cpu()
        buf = io.BytesIO()
        with torch.serialization.skip_data():
            torch.save({"t": torch.arange(4.0, device=device)}, buf)
    assert on_cpu["view"].device.type == "cpu"
    torch.testing.assert_close(on_cpu["view"], torch.arange(2.0, 8.0).view(2, 3), rtol=0, atol=0)
    assert back["view"].device == torch.device(device)
    torch.testing.assert_close(strided, torch.tensor([0.0, 103.0, 106.0, 9.0]), rtol=0, atol=0)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["t"].shape == (4,)


def _legacy_save(obj, path=None):
    target = path if path is not None else io.BytesIO()
    torch.save(obj, target, _use_new_zipfile_serialization=False)  # PyTorch's pre-1.6 format
    if path is None:
        target.seek(0)
    return target


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["cpu", "ral"])
@pytest.mark.parametrize("weights_only", [False, True])
def test_legacy_format_checkpoints_load_on_ral(tmp_path, device, source, weights_only):
    # The legacy format reads each storage's bytes after rebuilding the tensors over it (CUDA's
    # storages are filled in place): the device copies must get the bytes, not what the staging
    # memory held before (silent garbage until fixed).
    cpu = {"w": torch.arange(12.0).reshape(3, 4) - 5, "p": torch.nn.Parameter(torch.linspace(-1, 1, 5))}
    cpu["view"] = cpu["w"][1:, ::2]
    ck = cpu if source == "cpu" else {"w": cpu["w"].to(device), "p": torch.nn.Parameter(cpu["p"].detach().to(device))}
    if source == "ral":
        ck["view"] = ck["w"][1:, ::2]
    forms = [device, torch.device(device), {"cpu": device, device: device}] + ([None] if source == "ral" else [])
    for i, ml in enumerate(forms):
        for target in (None, tmp_path / f"legacy{i}.pt"):  # BytesIO, and a real file read directly
            f = _legacy_save(ck, target)
            got = torch.load(f, map_location=ml, weights_only=weights_only)
            for k in ("w", "p", "view"):
                assert got[k].device == torch.device(device), (ml, k)
                torch.testing.assert_close(got[k].detach().cpu(), cpu[k].detach(), rtol=0, atol=0)
            assert isinstance(got["p"], torch.nn.Parameter)
            got["view"].mul_(0)  # views saved together share one buffer, as with the zip format
            assert got["w"][1:, ::2].cpu().abs().sum().item() == 0.0


@pytest.mark.parametrize("device", DEVICES)
def test_legacy_format_checkpoint_under_ral_mode(device):
    import torch_fl

    cpu = {"w": torch.arange(6.0).reshape(2, 3) * 0.5, "b": torch.ones(3)}
    expected = cpu["w"] + cpu["b"]
    with torch_fl.ral_mode(device):
        got = torch.load(_legacy_save(cpu), map_location=device, weights_only=True)
        total = got["w"] + got["b"]
    assert got["w"].device == got["b"].device == torch.device(device)
    torch.testing.assert_close(got["w"].cpu(), cpu["w"], rtol=0, atol=0)
    torch.testing.assert_close(total.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_legacy_format_ral_tensor_with_attributes(device):
    # a tensor with Python attributes saves through torch_fl's own rebuild function: same fix
    t = torch.arange(6.0).to(device)
    t.tag = "kept"
    got = torch.load(_legacy_save({"t": t, "v": t[2:]}), weights_only=False)
    assert got["t"].device == torch.device(device) and got["t"].tag == "kept"
    assert got["t"].cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert got["v"].cpu().tolist() == [2.0, 3.0, 4.0, 5.0]


def test_safetensors_imported_before_torch(tmp_path):
    # `from safetensors.torch import load_file` before `import torch`: safetensors.torch imports
    # torch, whose backend autoload imports torch_fl while safetensors.torch is half-built.
    # torch_fl failed to load then (no ral device); it now loads, and adapts safetensors once
    # its body has finished (at the next import).
    pytest.importorskip("safetensors.torch")
    res = run_python(
        f"""
        import warnings
        warnings.simplefilter("error", RuntimeWarning)  # torch_fl's "could not load" warning
        from safetensors.torch import load_file, save_file
        import torch
        devices = ["ral:0", "ral:1"][: torch.ral.device_count()]
        for d in devices:
            assert (torch.arange(3.0, device=d) + 1).cpu().tolist() == [1.0, 2.0, 3.0]
        path = {str(tmp_path / "w.safetensors")!r}
        save_file({{"w": torch.arange(6.0).reshape(2, 3)}}, path)
        import xml.dom.minidom  # noqa: F401  any later import
        import safetensors.torch as st
        for d in devices:
            got = st.load_file(path, device=d)["w"]
            assert got.device == torch.device(d), got.device
            assert got.cpu().tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
        print("ok")
        """
    )
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-3000:]


@pytest.mark.parametrize("device", DEVICES)
def test_safetensors_safe_open_on_ral(tmp_path, device):
    # accelerate reads big checkpoints with safe_open(path, "pt", device=...): safetensors' Rust
    # side rejected "ral:N" ("device ral:N is invalid")
    safetensors = pytest.importorskip("safetensors")
    st = pytest.importorskip("safetensors.torch")
    import torch_fl

    cpu = {"w": torch.arange(12.0).reshape(3, 4) - 4, "h": torch.linspace(-1, 1, 5).half()}
    path = str(tmp_path / "w.safetensors")
    st.save_file(cpu, path, metadata={"format": "pt"})
    for style in ("plain", "ral_mode"):
        ctx = torch_fl.ral_mode(device) if style == "ral_mode" else torch.no_grad()
        with ctx, safetensors.safe_open(path, framework="pt", device=device) as f:
            assert sorted(f.keys()) == ["h", "w"] and f.metadata() == {"format": "pt"}
            w, part, every = f.get_tensor("w"), f.get_slice("w")[1:, ::2], f.get_tensors()
            assert f.get_slice("w").get_shape() == [3, 4]
        for got in (w, part, every["w"], every["h"]):
            assert got.device == torch.device(device), style
        torch.testing.assert_close(w.cpu(), cpu["w"], rtol=0, atol=0)
        torch.testing.assert_close(part.cpu(), cpu["w"][1:, ::2], rtol=0, atol=0)
        torch.testing.assert_close(every["h"].cpu(), cpu["h"], rtol=0, atol=0)
    with safetensors.safe_open(path, framework="pt", device="cpu") as f:  # other devices: untouched
        assert f.get_tensor("w").device.type == "cpu"
    with pytest.raises(Exception, match="invalid"):  # safetensors' own error for a bad name
        safetensors.safe_open(path, framework="pt", device="nodevice:0")


class _Scriptable(torch.nn.Module):
    """A Linear, a BatchNorm (running buffers) and a plain buffer: every kind of tensor a
    TorchScript archive holds besides constants."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.bn = torch.nn.BatchNorm1d(3)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 3))

    def forward(self, x):
        return self.bn(self.lin(x)) * self.scale


def _torchscript_archive(kind: str):
    """(the CPU ScriptModule, its saved archive, an input) for a scripted or traced module."""
    torch.manual_seed(0)
    model = _Scriptable()
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model.eval()
    x = torch.randn(5, 4)
    cpu = torch.jit.script(model) if kind == "script" else torch.jit.trace(model, x)
    buf = io.BytesIO()
    torch.jit.save(cpu, buf)
    buf.seek(0)
    return cpu, buf, x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["script", "trace"])
@pytest.mark.parametrize("style", ["to", "ral_mode"])
def test_jit_load_map_location_places_torchscript_on_ral(device, kind, style):
    """torch.jit.load(f, map_location=ral) gives a module whose tensors hold the saved values
    on ral and whose forward matches the CPU module's. Before, TorchScript's C++ loader left
    every tensor on the empty factory's 0-byte buffer: InvalidPointerError at first use."""
    import contextlib

    import torch_fl

    cpu, buf, x = _torchscript_archive(kind)
    want = cpu(x)
    mode = torch_fl.ral_mode(device) if style == "ral_mode" else contextlib.nullcontext()
    with mode:
        loaded = torch.jit.load(buf, map_location=device if kind == "script" else torch.device(device))
        got = loaded(x.to(device))
        states = {k: v.cpu() for k, v in loaded.state_dict().items()}
    assert got.device == torch.device(device)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    for name, value in cpu.state_dict().items():
        torch.testing.assert_close(states[name], value, rtol=0, atol=0)
    assert all(p.device == torch.device(device) for p in loaded.parameters())


def _ral_scripted(kind: str, device: str, x):
    """A seeded _Scriptable moved to `device`, then scripted or traced there."""
    torch.manual_seed(0)
    model = _Scriptable()
    model.bn.running_mean.uniform_(-0.5, 0.5)
    model = model.eval().to(device)
    return torch.jit.script(model) if kind == "script" else torch.jit.trace(model, x.to(device))


def test_jit_save_from_ral_loads_on_cpu_without_torch_fl(tmp_path):
    """torch.jit.save of a scripted or traced module whose tensors are on ral writes PyTorch's
    archive with the tensors' bytes (location "ral:N"): plain PyTorch without torch_fl loads it
    with map_location="cpu" once the PrivateUse1 name is known (TorchScript parses every saved
    device string, as it does "cuda:0" on a machine without CUDA), and its forward gives the
    CPU module's result. Before, the save raised (TorchScript read the wrapper's placeholder
    storage)."""
    torch.manual_seed(1)
    x = torch.randn(5, 4)
    names = []
    for device in DEVICES:
        for kind in ("script", "trace"):
            name = f"{kind}-{device.replace(':', '')}.pt"
            torch.jit.save(_ral_scripted(kind, device, x), tmp_path / name)
            names.append(name)
    cpu_twin, _, _ = _torchscript_archive("script")
    torch.save({"x": x, "want": cpu_twin(x).detach()}, tmp_path / "io.pt")
    code = f"""
import sys, torch
torch.utils.rename_privateuse1_backend("ral")  # the device strings saved are "ral:N"
io = torch.load("io.pt", weights_only=True)
for name in {names!r}:
    m = torch.jit.load(name, map_location="cpu")
    assert all(p.device.type == "cpu" for p in m.parameters()), name
    torch.testing.assert_close(m(io["x"]), io["want"], rtol=1e-5, atol=1e-6, msg=name)
assert "torch_fl" not in sys.modules, "torch_fl was imported"
print("plain-ok")
"""
    _run_without_torch_fl(code, tmp_path)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("style", ["to", "ral_mode"])
def test_jit_save_from_ral_round_trips_in_torch_fl(device, style):
    """In a torch_fl process, a ScriptModule saved from ral (in either style) loads on the CPU
    with map_location="cpu" and back on its ral device without one, both giving the CPU
    module's forward; a trace constant on ral (no parameter or buffer) is refused at save
    with a RuntimeError naming the way round."""
    import contextlib

    import torch_fl

    cpu, _, x = _torchscript_archive("trace")
    want = cpu(x)
    mode = torch_fl.ral_mode(device) if style == "ral_mode" else contextlib.nullcontext()
    buf = io.BytesIO()
    with mode:
        torch.jit.save(_ral_scripted("trace", device, x), buf)
        buf.seek(0)
        on_cpu = torch.jit.load(buf, map_location="cpu")
        buf.seek(0)
        back = torch.jit.load(buf)
        got_back = back(x.to(device)).cpu()
    assert all(p.device.type == "cpu" for p in on_cpu.parameters())
    torch.testing.assert_close(on_cpu(x), want, rtol=1e-5, atol=1e-6)
    assert all(p.device == torch.device(device) for p in back.parameters())
    torch.testing.assert_close(got_back, want, rtol=1e-5, atol=1e-6)

    class WithConstant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.k = torch.arange(4.0, device=device)  # a plain attribute: trace records a constant

        def forward(self, v):
            return v + self.k

    traced = torch.jit.trace(WithConstant(), torch.ones(4, device=device))
    with pytest.raises(RuntimeError, match=r"no parameter or buffer.*map_location='ral:N'"):
        torch.jit.save(traced, io.BytesIO())
