"""One rank of the multi-process distributed tests: `python tests/distributed_worker.py SCENARIO DEVICE`.

Launched by tests/dist_launch.py (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the environment). Every
result is compared with its CPU reference here; the rank prints PASS <scenario> on success.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import torch_fl  # noqa: F401  (registers ral and ralccl)
from torch_fl.distributed import CollectiveError

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


def close(a, b, what):
    torch.testing.assert_close(a.cpu() if a.device.type != "cpu" else a, b, rtol=1e-6, atol=1e-6, msg=what)


def x_of(r, n=6, dtype=torch.float32):
    """Rank r's input: distinct per rank, exact in float32."""
    return (torch.arange(n, dtype=torch.float64) * (r + 1) + r).to(dtype)


def collectives(dev):
    """Every collective of ralccl on `dev`, each checked against the CPU reference."""
    dist.init_process_group("ralccl", timeout=timedelta(seconds=30))
    assert dist.get_backend() == "ralccl", dist.get_backend()
    ranks = range(WORLD)
    for op, ref in [
        (dist.ReduceOp.SUM, sum(x_of(r) for r in ranks)),
        (dist.ReduceOp.AVG, sum(x_of(r) for r in ranks) / WORLD),
        (dist.ReduceOp.MAX, torch.stack([x_of(r) for r in ranks]).max(0).values),
        (dist.ReduceOp.MIN, torch.stack([x_of(r) for r in ranks]).min(0).values),
        (dist.ReduceOp.PRODUCT, torch.stack([x_of(r) for r in ranks]).prod(0)),
    ]:
        t = x_of(RANK).to(dev)
        work = dist.all_reduce(t, op=op, async_op=True)
        work.wait()
        close(t, ref, f"all_reduce {op}")
    t = torch.full((5,), float(RANK), device=dev)
    dist.broadcast(t, src=WORLD - 1)
    close(t, torch.full((5,), float(WORLD - 1)), "broadcast")
    outs = [torch.empty(6, device=dev) for _ in ranks]
    dist.all_gather(outs, x_of(RANK).to(dev))
    for r in ranks:
        close(outs[r], x_of(r), "all_gather")
    big = torch.empty(6 * WORLD, device=dev)
    dist.all_gather_into_tensor(big, x_of(RANK).to(dev))
    close(big, torch.cat([x_of(r) for r in ranks]), "all_gather_into_tensor")
    full = [x_of(r, 6 * WORLD) for r in ranks]
    out = torch.empty(6, device=dev)
    dist.reduce_scatter_tensor(out, full[RANK].to(dev))
    close(out, sum(full)[6 * RANK : 6 * (RANK + 1)], "reduce_scatter_tensor")
    out = torch.empty(6, device=dev)
    dist.reduce_scatter(out, [c.to(dev) for c in full[RANK].chunk(WORLD)], op=dist.ReduceOp.MAX)
    close(out, torch.stack(full).max(0).values[6 * RANK : 6 * (RANK + 1)], "reduce_scatter MAX")
    out = torch.empty(2 * WORLD, device=dev)
    dist.all_to_all_single(out, x_of(RANK, 2 * WORLD).to(dev))
    close(out, torch.cat([x_of(r, 2 * WORLD)[2 * RANK : 2 * RANK + 2] for r in ranks]), "all_to_all_single")
    outs = [torch.empty(3, device=dev) for _ in ranks]
    dist.all_to_all(outs, [c.to(dev) for c in x_of(RANK, 3 * WORLD).chunk(WORLD)])
    for r in ranks:
        close(outs[r], x_of(r, 3 * WORLD)[3 * RANK : 3 * RANK + 3], "all_to_all")
    # send/recv in a ring, both posted before either waits (no ordering deadlock)
    recv = torch.zeros(4, device=dev)
    works = [dist.isend(x_of(RANK, 4).to(dev), (RANK + 1) % WORLD), dist.irecv(recv, (RANK - 1) % WORLD)]
    for w in works:
        w.wait()
    close(recv, x_of((RANK - 1) % WORLD, 4), "send/recv")
    dist.barrier()
    # async: several in flight, then wait in order
    ts = [x_of(RANK).to(dev) for _ in range(3)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w, t in zip(works, ts):
        w.wait()
        close(t, sum(x_of(r) for r in ranks), "async all_reduce")
    # mismatched shapes: a clear error on every rank, and the group stays usable
    try:
        dist.all_reduce(torch.ones(4 + RANK, device=dev))
    except ValueError as e:
        assert "differ across ranks" in str(e) and "shape [4]" in str(e) and "shape [5]" in str(e), str(e)
    else:
        raise AssertionError("mismatched shapes were not detected")
    # bad input on every rank: a specific error before any byte moves, group still usable
    for bad, kwargs in [
        (torch.ones(2, dtype=torch.int64, device=dev), {"op": dist.ReduceOp.AVG}),
        (torch.ones(4, 4, device=dev).t(), {}),
    ]:
        try:
            dist.all_reduce(bad, **kwargs)
        except ValueError as e:
            assert "floating-point" in str(e) or "contiguous" in str(e), str(e)
        else:
            raise AssertionError(f"bad all_reduce input accepted: {bad.dtype} {bad.stride()}")
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)
    close(t, torch.full((3,), float(WORLD)), "all_reduce after a mismatch")
    # the same tensors over a plain gloo group (no ralccl): must exchange, not silently no-op
    gloo = dist.new_group(backend="gloo")
    t = x_of(RANK).to(dev)
    dist.all_reduce(t, group=gloo)
    close(t, sum(x_of(r) for r in ranks), "plain gloo all_reduce of ral tensors")
    recv = torch.zeros(4, device=dev)
    works = [
        dist.isend(x_of(RANK, 4).to(dev), (RANK + 1) % WORLD, group=gloo),
        dist.irecv(recv, (RANK - 1) % WORLD, group=gloo),
    ]
    for w in works:
        w.wait()
    close(recv, x_of((RANK - 1) % WORLD, 4), "plain gloo send/recv of ral tensors")
    dist.destroy_process_group()


def mixed(dev):
    """init_process_group("cpu:gloo,ral:ralccl", device_id=...): CPU and ral tensors in one group."""
    dist.init_process_group("cpu:gloo,ral:ralccl", device_id=torch.device(dev), timeout=timedelta(seconds=30))
    c, d = x_of(RANK), x_of(RANK).to(dev)
    dist.all_reduce(c)
    dist.all_reduce(d)
    ref = sum(x_of(r) for r in range(WORLD))
    close(c, ref, "mixed: cpu all_reduce")
    close(d, ref, "mixed: ral all_reduce")
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK})
    assert objs == [{"rank": r} for r in range(WORLD)], objs
    dist.barrier()
    dist.destroy_process_group()
    # device_id alone picks ralccl, the default backend registered for ral
    # A new store on the next port: the first one may still hold its port (TIME_WAIT) a moment.
    os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)
    dist.init_process_group(device_id=torch.device(dev), timeout=timedelta(seconds=30), init_method="env://")
    assert dist.get_backend() == "ralccl", dist.get_backend()
    dist.all_reduce(d)
    close(d, ref * WORLD, "device_id: all_reduce")
    dist.destroy_process_group()


def peer_death(dev):
    """Rank 1 dies; rank 0 must get CollectiveError within the timeout, never hang."""
    timeout = float(os.environ.get("DIST_TIMEOUT", "5"))
    dist.init_process_group("ralccl", timeout=timedelta(seconds=timeout))
    t = torch.ones(1 << 20, device=dev)
    dist.all_reduce(t)  # both alive: works
    if RANK == 1:
        os._exit(7)  # dies without a word, mid-job
    t0 = time.monotonic()
    try:
        for _ in range(50):
            dist.all_reduce(t)
    except CollectiveError as e:
        print(f"ERROR after {time.monotonic() - t0:.2f}s: {e}", flush=True)
    else:
        raise AssertionError("a dead peer went unnoticed")
    try:  # the group stays failed, and says so at once
        dist.all_reduce(t)
    except CollectiveError as e:
        assert "failed earlier" in str(e), str(e)
    t.add_(1)  # device memory and this process are intact
    assert float(t[0].cpu()) >= 2.0
    print("PASS peer_death", flush=True)
    os._exit(0)  # skip gloo teardown of a broken group


def peer_hang(dev):
    """Rank 1 stops answering (alive, socket open): only the timeout can tell rank 0."""
    timeout = float(os.environ.get("DIST_TIMEOUT", "5"))
    dist.init_process_group("ralccl", timeout=timedelta(seconds=timeout))
    t = torch.ones(1024, device=dev)
    dist.all_reduce(t)
    if RANK == 1:
        time.sleep(timeout + 4)  # longer than the timeout rank 0 waits
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.all_reduce(t)
    except CollectiveError as e:
        print(f"ERROR after {time.monotonic() - t0:.2f}s: {e}", flush=True)
    else:
        raise AssertionError("a silent peer went unnoticed")
    print("PASS peer_hang", flush=True)
    os._exit(0)


def main():
    scenario, dev = sys.argv[1], sys.argv[2]
    globals()[scenario](dev)
    print(f"PASS {scenario}", flush=True)


if __name__ == "__main__":
    main()
