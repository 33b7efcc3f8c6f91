"""Point-to-point transfers (send/recv) of ral tensors over a host transport.

gloo's send/recv work carries no future, so completion (and the copy back to a device that is
not host-mappable) happens on a helper thread; the caller gets a future-backed Work at once, so
ranks may post sends and receives in any order without deadlock.
"""

from __future__ import annotations

import threading

import torch

from . import _device_io as io


class CollectiveError(RuntimeError):
    """A collective failed on this rank: a peer died or timed out, or the ranks disagreed."""


class FutureWork(torch.distributed._Work):
    """A Work backed by a future. Unlike torch's `_create_work_from_future`, whose wait()
    swallows the future's error, wait() here re-raises it, so a failed collective never looks
    like a finished one."""

    def __init__(self, fut: torch.futures.Future):
        super().__init__()
        self._fut = fut

    def wait(self, timeout=None) -> bool:
        """Block until done; raises the collective's error (CollectiveError, ValueError)."""
        self._fut.wait()
        return True

    def is_completed(self) -> bool:
        """Whether the collective has finished (successfully or not)."""
        return self._fut.done()

    def is_success(self) -> bool:
        """Whether it finished without error."""
        if not self._fut.done():
            return False
        try:
            self._fut.value()
        except Exception:
            return False
        return True

    def exception(self):
        """The error it failed with, or None."""
        try:
            self._fut.value()
        except Exception as e:
            return e
        return None

    def get_future(self) -> torch.futures.Future:
        """A future holding the output tensors (what DDP's reducer reads)."""
        return self._fut

    def synchronize(self) -> None:
        """Same as wait(): the data is ready in stream order once this returns."""
        self.wait()


def point_to_point(tensors, start, read: bool, rank: int):
    """Stage tensors on the host, `start(host_tensors)` -> gloo Work, and return a Work that
    completes once the transfer is done and (for a receive) the data is back on the device."""
    for d in {t._dev for t in tensors if io.is_ral(t)}:
        io.ReadyEvent(d).wait()
    staged = [io.stage(t, read=read) for t in tensors]
    work = start([h for h, _ in staged])
    keep = [s for _, s in staged if s is not None]
    hosts = [h for h, _ in staged]  # gloo reads/writes these until the work is done
    fut = torch.futures.Future()

    def finish():
        try:
            work.wait()
            for s in keep:
                s.write_back()
            fut.set_result(tensors)
        except BaseException as e:  # noqa: BLE001 - every failure must reach the waiter
            fut.set_exception(CollectiveError(f"torch_fl.distributed: send/recv failed on rank {rank}: {e}"))
        finally:
            hosts.clear()

    threading.Thread(target=finish, name="ralccl-p2p", daemon=True).start()
    return FutureWork(fut)


def patch_process_group_p2p() -> None:
    """Make send/recv of ral tensors on any other backend's group (plain "gloo") stage through
    the host: gloo's send/recv skip the dispatcher and would read the device handle as a host
    pointer. Groups of ralccl override these methods and are not affected."""
    pg = torch.distributed.ProcessGroup
    if getattr(pg, "_torch_fl_p2p", False):
        return
    orig = {name: getattr(pg, name) for name in ("send", "recv", "recv_anysource")}

    def make(name, read):
        base = orig[name]

        def method(self, tensors, *args):
            if not any(io.is_ral(t) for t in tensors):
                return base(self, tensors, *args)
            return point_to_point(tensors, lambda hosts: base(self, hosts, *args), read, self.rank())

        method.__name__ = name
        method.__doc__ = f"{name}, staging ral tensors through host memory (torch_fl)."
        return method

    pg.send = make("send", True)
    pg.recv = make("recv", False)
    pg.recv_anysource = make("recv_anysource", False)
    pg._torch_fl_p2p = True
