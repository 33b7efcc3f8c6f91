"""Backend metadata (`torch._utils.set_tensor_metadata`/`get_tensor_metadata`) on ral tensors
survives what it survives on a PrivateUse1 backend in PyTorch's own OpenReg tests: deepcopy,
torch.save/torch.load, fake tensors; a CPU load drops it, as for any backend's checkpoint."""

import copy
import io
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
META = {"version_number": True, "format_number": False}


def _tagged(device):
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3).to(device)
    assert torch._utils.get_tensor_metadata(t) == {}
    torch._utils.set_tensor_metadata(t, dict(META))
    return t


@pytest.mark.parametrize("device", DEVICES)
def test_set_and_get(device):
    t = _tagged(device)
    assert torch._utils.get_tensor_metadata(t) == META
    assert torch._utils.get_tensor_metadata(t.detach()) == META  # shallow copies keep it (as OpenReg)
    assert torch._utils.get_tensor_metadata(t.clone()) == {}  # a new tensor starts without
    torch._utils.set_tensor_metadata(t, {"other": True})
    assert torch._utils.get_tensor_metadata(t) == {"other": True}
    # CPU keeps only its conj/neg bits
    c = torch.arange(3.0)
    torch._utils.set_tensor_metadata(c, dict(META))
    assert torch._utils.get_tensor_metadata(c) == {}


@pytest.mark.parametrize("device", DEVICES)
def test_deepcopy_keeps_it(device):
    t = _tagged(device)
    p = torch.nn.Parameter(_tagged(device))
    t2, p2 = copy.deepcopy((t, p))
    assert torch._utils.get_tensor_metadata(t2) == META
    assert torch._utils.get_tensor_metadata(p2) == META
    assert t2.data_ptr() != t.data_ptr()
    torch.testing.assert_close(t2.cpu(), t.cpu(), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_save_load_keeps_it(device):
    t = _tagged(device)
    p = torch.nn.Parameter(_tagged(device))
    buf = io.BytesIO()
    torch.save({"t": t, "p": p}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    assert back["t"].device == t.device and torch._utils.get_tensor_metadata(back["t"]) == META
    assert isinstance(back["p"], torch.nn.Parameter) and torch._utils.get_tensor_metadata(back["p"]) == META
    buf.seek(0)
    cpu = torch.load(buf, map_location="cpu", weights_only=True)
    assert cpu["t"].device.type == "cpu" and torch._utils.get_tensor_metadata(cpu["t"]) == {}
    torch.testing.assert_close(cpu["t"], t.cpu(), rtol=0, atol=0)


def test_checkpoint_with_metadata_loads_in_plain_pytorch(tmp_path):
    path = tmp_path / "meta.pt"
    torch.save(_tagged(DEVICES[0]), path)
    code = (
        "import sys, torch; t = torch.load(sys.argv[1], map_location='cpu', weights_only=True); "
        "assert torch._utils.get_tensor_metadata(t) == {}; print(t.flatten().tolist())"
    )
    env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"


@pytest.mark.parametrize("device", DEVICES)
def test_fake_tensor_keeps_it(device):
    t = _tagged(device)
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(t)
    assert isinstance(fake, FakeTensor) and fake.device == t.device
    assert torch._utils.get_tensor_metadata(fake) == META


@pytest.mark.parametrize("device", DEVICES)
def test_under_ral_mode(device):
    import torch_fl

    with torch_fl.ral_mode(device):
        t = _tagged(device)
        t2 = copy.deepcopy(t)
        buf = io.BytesIO()
        torch.save(t, buf)
        buf.seek(0)
        back = torch.load(buf)
    assert torch._utils.get_tensor_metadata(t2) == META
    assert back.device == t.device and torch._utils.get_tensor_metadata(back) == META
