"""One rank of a small FSDP2 or tensor-parallel training run, written the way pytorch/examples'
distributed/FSDP2/example.py and distributed/tensor_parallelism/tensor_parallel_example.py are
(torch.accelerator to pick the device, init_device_mesh, fully_shard / parallelize_module, a bare
device type for inputs). Run under torchrun; rank 0 prints the losses as JSON.

    torchrun --nproc-per-node 2 fsdp_tp_script.py {fsdp,tp} {ral,cpu} {set,mesh}

"set" picks the rank's device with one line; "mesh" picks none, as the FSDP2 example does (its
`torch.accelerator.device_index(rank)` is never entered), and leaves it to DeviceMesh, which sets
it from LOCAL_RANK only while `torch.<device>.is_initialized()` is False.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

mode, device_type, pick = sys.argv[1], sys.argv[2], sys.argv[3]
local_rank = int(os.environ["LOCAL_RANK"])
if device_type != "cpu" and pick == "set":
    torch.accelerator.set_device_index(local_rank)  # the one-line device choice
device = torch.device(device_type, local_rank) if device_type != "cpu" else torch.device("cpu")
if device_type != "cpu":
    assert torch.accelerator.device_count() == 2  # counting devices must not stop DeviceMesh picking one
mesh = init_device_mesh(device_type, (int(os.environ["WORLD_SIZE"]),))
if device_type != "cpu":
    assert torch.accelerator.current_device_index() == local_rank, (pick, torch.accelerator.current_device_index())
losses = []


class Block(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.in_proj = torch.nn.Linear(dim, 4 * dim)
        self.out_proj = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.out_proj(torch.relu(self.in_proj(self.norm(x))))


if mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)  # the same initial weights on every rank and in the CPU run
    model = torch.nn.Sequential(torch.nn.Embedding(64, 16), Block(16), Block(16), torch.nn.Linear(16, 64))
    model.to(device_type)  # bare type: the current device
    for layer in list(model)[1:3]:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert all(p.device == device for p in model.parameters()), [p.device for p in model.parameters()]
    optim = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(4):
        g = torch.Generator().manual_seed(100 * step + dist.get_rank())
        x = torch.randint(0, 64, (8, 12), generator=g).to(device_type)  # bare type: current device
        loss = model(x).float().pow(2).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optim.step()
        optim.zero_grad()
        total = loss.detach().clone()
        dist.all_reduce(total)
        losses.append(total.item() / dist.get_world_size())
elif mode == "tp_attn":
    # fsdp_tp_example.py's attention plan: q/k/v column-parallel as DTensors (use_local_output
    # False), SDPA over DTensors sharded on heads, the output projection row-parallel.
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    class Attention(torch.nn.Module):
        def __init__(self, dim=16, heads=4):
            super().__init__()
            self.heads, self.head_dim = heads, dim // heads
            self.wq, self.wk, self.wv = (torch.nn.Linear(dim, dim, bias=False) for _ in range(3))
            self.wo = torch.nn.Linear(dim, dim, bias=False)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = (w(x).view(b, t, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(y.transpose(1, 2).contiguous().view(b, t, -1))

    def train(model):
        """Four SGD steps; the losses."""
        optim = torch.optim.SGD(model.parameters(), lr=0.1)
        out = []
        for step in range(4):
            g = torch.Generator().manual_seed(step)  # every TP rank sees the same input
            inp = torch.rand(2, 6, 16, generator=g).to(device_type)
            loss = model(inp).pow(2).mean()
            loss.backward()
            optim.step()
            optim.zero_grad()
            out.append(loss.item())
        return out

    torch.manual_seed(0)
    reference = Attention()  # the same model unsharded, on plain CPU (DTensor has no CPU SDPA strategy)
    model = Attention().to(device_type)
    model.load_state_dict(reference.state_dict())
    plan = {name: ColwiseParallel(use_local_output=False) for name in ("wq", "wk", "wv")}
    model = parallelize_module(model, mesh, {**plan, "wo": RowwiseParallel()})
    losses = train(model)
    device_type = "cpu"
    if dist.get_rank() == 0:
        print("REFERENCE " + json.dumps(train(reference)))
else:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    class ToyModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.in_proj = torch.nn.Linear(16, 32)
            self.out_proj = torch.nn.Linear(32, 5)

        def forward(self, x):
            return self.out_proj(torch.relu(self.in_proj(x)))

    torch.manual_seed(0)
    model = ToyModel().to(device_type)  # bare type: the current device
    model = parallelize_module(model, mesh, {"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()})
    assert all(p.to_local().device == device for p in model.parameters()), [p.device for p in model.parameters()]
    optim = torch.optim.Adam(model.parameters(), lr=0.05, foreach=True)
    for step in range(4):
        g = torch.Generator().manual_seed(step)  # every TP rank sees the same input
        inp = torch.rand(20, 16, generator=g).to(device_type)
        loss = model(inp).sum()
        loss.backward()
        optim.step()
        optim.zero_grad()
        losses.append(loss.item())

if dist.get_rank() == 0:
    print("LOSSES " + json.dumps(losses))
dist.destroy_process_group()
