"""Python and library protocols on ral tensors, on ral:0 and ral:1, in both styles where a
style applies: __format__, .numpy() rules, pickling, safetensors save/load, DataLoader with
pin_memory=True, and DataLoader workers forked inside ral_mode (fork safety)."""

import copy
import pickle

import pytest
import torch
from conftest import run_python

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
each_device = pytest.mark.parametrize("dev", DEVICES)


@each_device
def test_format_like_cpu(dev):
    for value in (torch.tensor(1.23456), torch.tensor(7), torch.tensor(-0.5, dtype=torch.float64)):
        t = value.to(dev)
        for spec in ("", ".4f", ">10.2f", "e"):
            if spec and not value.is_floating_point() and spec != "":
                spec = ">6"
            assert format(t, spec) == format(value, spec)
    loss = torch.tensor(0.123456)
    with torch_fl.ral_mode(dev):
        on_dev = loss * 2
        assert f"{on_dev:.4f}" == "0.2469"
    with pytest.raises(TypeError):  # like CPU: no format spec for a tensor with elements
        format(torch.ones(2).to(dev), ".2f")
    assert format(torch.ones(2).to(dev), "") == str(torch.ones(2).to(dev))


@each_device
def test_numpy_rules_like_cpu(dev):
    t = torch.ones(3, requires_grad=True)
    d = t.detach().to(dev).requires_grad_()
    with pytest.raises(RuntimeError, match="requires grad"):
        t.numpy()
    with pytest.raises(RuntimeError, match="requires grad"):
        d.numpy()
    assert (d.detach().numpy() == t.detach().numpy()).all()
    assert (d.numpy(force=True) == t.numpy(force=True)).all()


@each_device
def test_pickle_roundtrip(dev):
    t = torch.arange(6.0).reshape(2, 3).to(dev)
    p = torch.ones(2).to(dev).requires_grad_()
    u, q = pickle.loads(pickle.dumps((t, p)))
    assert u.device == t.device and torch.equal(u.cpu(), t.cpu())
    assert q.requires_grad and q.device == p.device


def _copies(obj):
    return copy.deepcopy(obj), pickle.loads(pickle.dumps(obj))


def _grad_and_attr(t):
    return (None if t.grad is None else t.grad.cpu()), getattr(t, "tag", None)


@each_device
def test_deepcopy_and_pickle_match_cpu(dev):
    """Copies of ral tensors and modules keep what CPU copies keep: a Parameter stays a
    Parameter (so `copy.deepcopy(model).cpu()` works); a plain tensor's deepcopy brings its
    gradient; attributes follow CPU's rules for each kind of copy."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(5, 2)
    m = torch.nn.Linear(5, 2)
    m.load_state_dict(cpu.state_dict())
    m = m.to(dev)
    x = torch.randn(3, 5)
    cpu(x).sum().backward()
    m(x.to(dev)).sum().backward()
    t_cpu = torch.ones(3, requires_grad=True)
    (t_cpu * 2).sum().backward()
    t = torch.ones(3, device=dev, requires_grad=True)
    (t * 2).sum().backward()
    for a in (m.weight, cpu.weight, t, t_cpu):
        a.tag = "encoder"
    for got, want in zip(_copies(t), _copies(t_cpu)):
        assert torch.equal(got.detach().cpu(), want.detach()) and got.requires_grad
        g, tag = _grad_and_attr(got)
        gw, tag_w = _grad_and_attr(want)
        assert tag == tag_w and (g is None) == (gw is None)
        assert g is None or torch.equal(g, gw)
    for got, want in zip(_copies(m.weight), _copies(cpu.weight)):
        assert isinstance(got, torch.nn.Parameter) and got.device == torch.device(dev)
        assert _grad_and_attr(got)[1] == _grad_and_attr(want)[1] and got.grad is None and want.grad is None
    for got, want in zip(_copies(m), _copies(cpu)):
        assert all(isinstance(p, torch.nn.Parameter) for p in got.parameters())
        back = got.cpu()  # failed with "param must be a Parameter" after a deepcopy
        assert type(back.weight) is torch.nn.Parameter and back.weight.device.type == "cpu"
        torch.testing.assert_close(back(x), want(x), rtol=0, atol=0)


@each_device
def test_safetensors_save_and_load(dev, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {
        "w": torch.randn(4, 5).to(dev),
        "b": torch.arange(5, dtype=torch.int64).to(dev),
        "h": torch.randn(3).to(torch.float16).to(dev),
    }
    path = str(tmp_path / "m.safetensors")
    st.save_file(tensors, path)
    host = st.load_file(path)  # CPU, as written
    for k, v in tensors.items():
        assert host[k].device.type == "cpu" and torch.equal(host[k], v.cpu())
    loaded = st.load_file(path, device=dev)
    for k, v in tensors.items():
        assert loaded[k].device == torch.device(dev) and torch.equal(loaded[k].cpu(), v.cpu())
    base = torch.arange(4.0).to(dev)
    for view in (base[2:], base[:2]):  # safetensors' own shared-memory check, as on CPU
        with pytest.raises(RuntimeError, match="share memory"):
            st.save_file({"a": base, "b": view}, path)
    st.save_file({"a": base, "b": base[:2].clone()}, path)
    back = st.load_file(path)
    assert back["a"].tolist() == [0.0, 1.0, 2.0, 3.0] and back["b"].tolist() == [0.0, 1.0]


_PIN_SCRIPT = """
import sys, torch
if sys.argv[1] == "1":
    import torch_fl
from torch.utils.data import DataLoader, TensorDataset
ds = TensorDataset(torch.arange(12.0).reshape(6, 2), torch.arange(6))
out = [(x.tolist(), y.tolist(), x.device.type) for x, y in DataLoader(ds, batch_size=4, pin_memory=True)]
print(out)
"""


def test_pin_memory_dataloader_unchanged_by_import(tmp_path):
    script = tmp_path / "pin.py"
    script.write_text(_PIN_SCRIPT)
    plain = run_python(f"import runpy, sys; sys.argv = ['pin', '0']; runpy.run_path({str(script)!r})")
    with_fl = run_python(f"import runpy, sys; sys.argv = ['pin', '1']; runpy.run_path({str(script)!r})")
    assert plain.returncode == 0, plain.stderr
    assert with_fl.returncode == 0, with_fl.stderr
    assert with_fl.stdout == plain.stdout
    r = run_python(
        f"""
        import torch, torch_fl
        p = torch.arange(4.0).pin_memory()
        assert p.is_pinned() and not torch.arange(4.0).is_pinned()
        for dev in {DEVICES!r}:
            d = p.to(dev, non_blocking=True)
            torch.ral.synchronize(dev)
            assert d.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
        print("ok")
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


_WORKERS = """
import sys, torch, torch_fl
from torch.utils.data import DataLoader, Dataset

class Data(Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return torch.full((3,), float(i)) * 2 + torch.arange(3.0)

class TouchesDevice(Data):
    def __getitem__(self, i):
        return torch.ones(2).to("{dev}")

w = torch.nn.Linear(3, 1)
with torch_fl.ral_mode("{dev}"):
    w(torch.ones(2, 3)).sum().item()  # the runtime is in use before the fork
    for cls in (Data, TouchesDevice):
        loader = DataLoader(cls(), batch_size=4, num_workers=2, multiprocessing_context="fork")
        try:
            batches = list(loader)
            print("ok", torch.cat(batches).sum().item(), batches[0].device.type)
        except Exception as e:
            print("raised", type(e).__name__, " ".join(str(e).split()))
"""


@each_device
def test_dataloader_workers_forked_inside_mode(dev):
    r = run_python(_WORKERS.format(dev=dev), timeout=180)
    assert r.returncode == 0, r.stderr[-2000:]
    plain, touching = r.stdout.splitlines()
    assert plain.split() == ["ok", "192.0", "cpu"]  # a worker that never touches the device
    assert touching.startswith("raised ForkedChildError")  # one that does: a clear error
    assert "Cannot re-initialize ral in forked subprocess" in touching


@each_device
def test_dataloader_workers_under_torch_fl_run(dev, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import torch\n"
        "from torch.utils.data import DataLoader, Dataset\n"
        "class Data(Dataset):\n"
        "    def __len__(self):\n"
        "        return 8\n"
        "    def __getitem__(self, i):\n"
        "        return torch.tensor([2.0 * i, 2.0 * i + 1])\n"
        "m = torch.nn.Linear(2, 1)\n"
        "loader = DataLoader(Data(), batch_size=4, num_workers=2, multiprocessing_context='fork')\n"
        "total = sum(m(x).sum().item() * 0 + x.sum().item() for x in loader)\n"
        "print('total', total)\n"
    )
    r = run_python(
        f"import sys, runpy; sys.argv = ['torch_fl.run', '--device', {dev!r}, {str(script)!r}]; "
        "runpy.run_module('torch_fl.run', run_name='__main__')",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("total 120.0")
