"""`ralccl`: the torch.distributed collective backend for ral devices.

A Python ProcessGroup (the form PyTorch accepts from an out-of-tree backend written in Python)
over a gloo group that carries the bytes over TCP. ral tensors are staged to host memory by
`_device_io` (zero-copy on host-mappable devices); CPU tensors go to gloo unchanged, so one group
serves "cpu:gloo,ral:ralccl" too. Collectives run in issue order on one worker thread per group,
so `async_op=True` returns at once and `Work.wait()` waits; sends and receives go straight to gloo
so that a rank may post them in any order.
"""

from __future__ import annotations

import os
import queue
import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from . import _device_io as io
from .checks import check_same_across_ranks, fingerprint
from .p2p import CollectiveError, FutureWork, point_to_point

BACKEND_NAME = "ralccl"
_R = dist.ReduceOp.RedOpType
_GLOO_OPS = {_R.SUM: dist.ReduceOp.SUM, _R.MAX: dist.ReduceOp.MAX, _R.MIN: dist.ReduceOp.MIN}
_GLOO_OPS[_R.PRODUCT] = dist.ReduceOp.PRODUCT


def _red_op(op) -> tuple[dist.ReduceOp, bool]:
    """(gloo's reduce op, whether to divide by world size afterwards) for a user's op."""
    kind = getattr(op, "op", op)
    if kind == _R.AVG:
        return dist.ReduceOp.SUM, True
    if kind in _GLOO_OPS:
        return _GLOO_OPS[kind], False
    raise ValueError(
        f"torch_fl.distributed: reduce op {op} is not supported by {BACKEND_NAME} (use SUM/AVG/MAX/MIN/PRODUCT)"
    )


def _make_gloo(store, rank: int, size: int, timeout: timedelta):
    """The gloo group that moves the bytes, on its own store prefix (same devices as torch's gloo)."""
    gloo = dist.ProcessGroupGloo
    opts = gloo._Options()
    opts._timeout = timeout
    iface = os.environ.get("GLOO_SOCKET_IFNAME")
    if iface:
        opts._devices = [gloo.create_device(interface=i) for i in iface.split(",")]
    else:
        opts._devices = [gloo.create_default_device()]
    return gloo(dist.PrefixStore("ralccl/", store), rank, size, opts)


class RalProcessGroup(dist.ProcessGroup):
    """Collectives over ral and CPU tensors (see the module docstring)."""

    def __init__(self, store, rank: int, size: int, timeout: timedelta):
        super().__init__(rank, size)
        self._rank_ = rank
        self._size_ = size
        self.timeout = timeout
        self._gloo = _make_gloo(store, rank, size, timeout)
        self._check = os.environ.get("TORCH_FL_DIST_CHECK", "1") != "0"
        self._failed: BaseException | None = None
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._loop, name=f"ralccl-rank{rank}", daemon=True)
        self._worker.start()
        # `init_process_group(device_id=ral:N)` asks the group for its per-device backend.
        for dev in ("cpu", "ral"):
            self._register_backend(torch.device(dev), dist.ProcessGroup.BackendType.CUSTOM, self._gloo)

    # ---- identity -------------------------------------------------------------------------
    def getBackendName(self) -> str:
        """The registered name of this backend."""
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"RalProcessGroup(rank={self._rank_}, size={self._size_}, timeout={self.timeout})"

    # ---- the worker ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            job()

    def _submit(self, name: str, inputs, outputs, body, result, check_shapes: bool = True):
        """Queue one collective: wait for the device, stage, check, run `body`, write back."""
        if self._failed is not None:
            raise CollectiveError(
                f"torch_fl.distributed: {name} on rank {self._rank_}: this process group failed earlier "
                f"({self._failed}); create a new one"
            )
        for t in (*inputs, *outputs):
            io.check_contiguous(t)  # in the caller: a bad argument raises here, before any job
        devs = {t._dev for t in (*inputs, *outputs) if io.is_ral(t)}
        ready = [io.ReadyEvent(d) for d in devs]
        fp = fingerprint(name, inputs if check_shapes else ()) if self._check else None
        fut = torch.futures.Future()

        def job():
            try:
                for e in ready:
                    e.wait()
                staged, host = {}, {}
                for t in inputs:
                    if id(t) not in host:
                        host[id(t)], staged[id(t)] = io.stage(t, read=True)
                for t in outputs:
                    if id(t) not in host:
                        host[id(t)], staged[id(t)] = io.stage(t, read=False)
                if fp is not None:
                    check_same_across_ranks(self._gloo, name, fp, self._rank_)
                body(lambda t: host[id(t)])
                for s in staged.values():
                    if s is not None:
                        s.write_back()
                fut.set_result(result)
            except BaseException as e:  # noqa: BLE001 - every failure must reach the waiter
                err = (
                    e
                    if isinstance(e, (CollectiveError, ValueError))
                    else CollectiveError(
                        f"torch_fl.distributed: {name} failed on rank {self._rank_} (timeout {self.timeout}): {e}"
                    )
                )
                if not isinstance(e, ValueError):
                    self._failed = err
                fut.set_exception(err)

        self._jobs.put(job)
        return FutureWork(fut)

    # ---- collectives ------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        """In-place all_reduce of each tensor (sum/avg/max/min/product)."""
        op, divide = _red_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        size = self._size_
        if divide:
            _check_avg(tensors)

        def body(h):
            hosts = [h(t) for t in tensors]
            o = dist.AllreduceOptions()
            o.reduceOp = op
            self._gloo.allreduce(hosts, o).wait()
            if divide:
                for x in hosts:
                    _divide(x, size)

        return self._submit("all_reduce", tensors, tensors, body, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        """all_reduce of several tensors as one job."""
        op, divide = _red_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        size = self._size_

        def body(h):
            o = dist.AllreduceOptions()
            o.reduceOp = op
            for t in tensors:
                self._gloo.allreduce([h(t)], o).wait()
                if divide:
                    _divide(h(t), size)

        return self._submit("all_reduce_coalesced", tensors, tensors, body, tensors)

    def broadcast(self, tensors, opts=None):
        """Broadcast from opts.rootRank, in place."""
        root = opts.rootRank if opts is not None else 0

        def body(h):
            o = dist.BroadcastOptions()
            o.rootRank = root
            self._gloo.broadcast([h(t) for t in tensors], o).wait()

        return self._submit("broadcast", tensors, tensors, body, tensors)

    def allgather(self, output_lists, inputs, opts=None):
        """all_gather into a list of tensors."""
        outs = [t for lst in output_lists for t in lst]

        def body(h):
            self._gloo.allgather([[h(t) for t in lst] for lst in output_lists], [h(t) for t in inputs]).wait()

        return self._submit("all_gather", inputs, outs, body, output_lists)

    def all_gather_single(self, output, input, opts=None):
        """all_gather_into_tensor: output holds every rank's input, concatenated along dim 0."""

        def body(h):
            self._gloo._allgather_base(h(output), h(input)).wait()

        return self._submit("all_gather_into_tensor", [input], [output], body, [output])

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """Several all_gather_into_tensor calls as one job."""

        def body(h):
            for o, i in zip(outputs, inputs):
                self._gloo._allgather_base(h(o), h(i)).wait()

        return self._submit("all_gather_into_tensor_coalesced", inputs, outputs, body, outputs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        """reduce_scatter from lists: rank r gets the reduction of every rank's input_lists[.][r]."""
        op, divide = _red_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        flat_in = [t for lst in input_lists for t in lst]
        rank, size = self._rank_, self._size_

        def body(h):
            for out, lst in zip(outputs, input_lists):
                _reduce_scatter_host(self._gloo, h(out), [h(t) for t in lst], op, divide, rank, size)

        return self._submit("reduce_scatter", flat_in, outputs, body, outputs)

    def reduce_scatter_single(self, output, input, opts=None):
        """reduce_scatter_tensor: rank r gets chunk r of the reduction of every rank's input."""
        op, divide = _red_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        rank, size = self._rank_, self._size_

        def body(h):
            _reduce_scatter_host(self._gloo, h(output), list(h(input).chunk(size)), op, divide, rank, size)

        return self._submit("reduce_scatter_tensor", [input], [output], body, [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        """Several reduce_scatter_tensor calls as one job."""
        op, divide = _red_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        rank, size = self._rank_, self._size_

        def body(h):
            for o, i in zip(outputs, inputs):
                _reduce_scatter_host(self._gloo, h(o), list(h(i).chunk(size)), op, divide, rank, size)

        return self._submit("reduce_scatter_tensor_coalesced", inputs, outputs, body, outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        """all_to_all_single with optional split sizes along dim 0."""

        def body(h):
            self._gloo.alltoall_base(h(output), h(input), list(output_split_sizes), list(input_split_sizes)).wait()

        return self._submit("all_to_all_single", [input], [output], body, [output], check_shapes=False)

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        """all_to_all over lists: outputs[j] receives rank j's inputs[rank]."""
        rank = self._rank_

        def body(h):
            # gloo has no list alltoall: a send and a receive per peer, own slice copied locally.
            works = []
            for j in range(self._size_):
                if j == rank:
                    h(outputs[j]).copy_(h(inputs[j]))
                    continue
                works.append(self._gloo.send([h(inputs[j]).contiguous()], j, _A2A_TAG))
                works.append(self._gloo.recv([h(outputs[j])], j, _A2A_TAG))
            for w in works:
                w.wait()

        return self._submit("all_to_all", inputs, outputs, body, outputs, check_shapes=False)

    def barrier(self, opts=None):
        """Wait until every rank reaches the barrier (and every earlier collective is done)."""

        def body(h):
            self._gloo.barrier(dist.BarrierOptions()).wait()

        return self._submit("barrier", [], [], body, [])

    def reduce(self, tensors, opts=None):
        """Reduce into opts.rootRank's tensor (others keep theirs)."""
        op, divide = _red_op(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)
        root, size, rank = opts.rootRank, self._size_, self._rank_

        def body(h):
            o = dist.ReduceOptions()
            o.reduceOp = op
            o.rootRank = root
            self._gloo.reduce([h(t) for t in tensors], o).wait()
            if divide and rank == root:
                for t in tensors:
                    _divide(h(t), size)

        return self._submit("reduce", tensors, tensors, body, tensors)

    def gather(self, output_lists, inputs, opts=None):
        """Gather every rank's input on opts.rootRank."""
        outs = [t for lst in output_lists for t in lst]
        root = opts.rootRank

        def body(h):
            o = dist.GatherOptions()
            o.rootRank = root
            self._gloo.gather([[h(t) for t in lst] for lst in output_lists], [h(t) for t in inputs], o).wait()

        return self._submit("gather", inputs, outs, body, output_lists)

    def scatter(self, outputs, input_lists, opts=None):
        """Scatter opts.rootRank's list, one tensor per rank."""
        ins = [t for lst in input_lists for t in lst]
        root = opts.rootRank

        def body(h):
            o = dist.ScatterOptions()
            o.rootRank = root
            self._gloo.scatter([h(t) for t in outputs], [[h(t) for t in lst] for lst in input_lists], o).wait()

        return self._submit("scatter", ins, outputs, body, outputs, check_shapes=False)

    # ---- point to point: straight to gloo, so posting order across ranks does not matter ----
    def send(self, tensors, dst: int, tag: int = 0):
        """Send tensors to rank dst."""
        return self._p2p(tensors, lambda hosts: self._gloo.send(hosts, dst, tag), read=True)

    def recv(self, tensors, src: int, tag: int = 0):
        """Receive tensors from rank src."""
        return self._p2p(tensors, lambda hosts: self._gloo.recv(hosts, src, tag), read=False)

    def recv_anysource(self, tensors, tag: int = 0):
        """Receive tensors from whichever rank sends first."""
        return self._p2p(tensors, lambda hosts: self._gloo.recv_anysource(hosts, tag), read=False)

    def _p2p(self, tensors, start, read: bool):
        return point_to_point(tensors, start, read, self._rank_)


_A2A_TAG = 0x7A2A


def _check_avg(tensors) -> None:
    """AVG is SUM then a division: refuse integer tensors before any byte moves."""
    for t in tensors:
        if not (t.is_floating_point() or t.is_complex()):
            raise ValueError(f"torch_fl.distributed: ReduceOp.AVG needs a floating-point tensor, got {t.dtype}")


def _divide(x: torch.Tensor, n: int) -> None:
    if not (x.is_floating_point() or x.is_complex()):
        raise ValueError(f"torch_fl.distributed: ReduceOp.AVG needs a floating-point tensor, got {x.dtype}")
    x.div_(n)


def _reduce_scatter_host(gloo, out, chunks, op, divide, rank, size) -> None:
    """reduce_scatter on host tensors: gloo's reduce_scatter where it has one, else allreduce + slice."""
    if len(chunks) != size:
        raise ValueError(f"torch_fl.distributed: reduce_scatter needs {size} input chunks, got {len(chunks)}")
    if any(c.shape != out.shape for c in chunks):
        raise ValueError(
            f"torch_fl.distributed: reduce_scatter input chunks {[tuple(c.shape) for c in chunks]} "
            f"do not match the output shape {tuple(out.shape)}"
        )
    whole = torch.cat([c.reshape(-1) for c in chunks])
    o = dist.AllreduceOptions()
    o.reduceOp = op
    gloo.allreduce([whole], o).wait()
    mine = whole[rank * out.numel() : (rank + 1) * out.numel()].view(out.shape)
    if divide:
        _divide(mine, size)
    out.copy_(mine)


def create(backend_opts, pg_options=None) -> RalProcessGroup:
    """The creator torch.distributed calls (extended API): one RalProcessGroup per group."""
    return RalProcessGroup(backend_opts.store, backend_opts.group_rank, backend_opts.group_size, backend_opts.timeout)


def register() -> None:
    """Register `ralccl` with torch.distributed as the default backend of `ral` devices (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, create, extended_api=True, devices=["ral"])
