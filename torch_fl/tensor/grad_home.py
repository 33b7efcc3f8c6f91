"""Differentiable uploads whose gradients travel home without stalling backward.

A CPU tensor that requires grad reaches the device as `_Upload(_Await(t))`. In backward:

  - `_UploadBackward` runs on the device's autograd thread (its input is a device
    gradient). It enqueues the device -> host copy into a new CPU buffer and returns at
    once, so that thread keeps issuing the rest of backward;
  - `_AwaitBackward` runs on the CPU autograd thread (its input is that CPU buffer). It
    synchronizes the stream, which also surfaces any asynchronous kernel error, and only
    then hands the buffer on to AccumulateGrad, hooks or `autograd.grad`.

So nothing reads the buffer before the copy lands: each upload has its own `_Await`
node, and the engine only accumulates gradients (reads them) after that node. A
synchronous copy per parameter instead serialised backward with the device's worker,
about 50 stalls per GPT-2 training step (benchmarks: gpt2_train).

Buffers with a copy in flight are also held here until a synchronization covers them:
if backward is abandoned midway, the engine drops its references, and the copy must not
write into freed memory.
"""

from __future__ import annotations

import threading

import torch

from torch_fl.device.sync import synchronize_stream
from torch_fl.tensor.host_copy import copy_to_host_async
from torch_fl.tensor.ral_tensor import RalTensor

_lock = threading.Lock()
# (device, stream) -> {id(buffer): buffer}: CPU buffers whose copies were enqueued there and
# not yet covered by a synchronization
_in_flight: dict[tuple[int, int], dict[int, torch.Tensor]] = {}


class _Upload(torch.autograd.Function):
    """CPU -> device move whose device copy comes from the upload cache."""

    @staticmethod
    def forward(ctx, cpu, device_copy):
        return device_copy.view_as(device_copy)

    @staticmethod
    def backward(ctx, grad):
        if type(grad) is not RalTensor:
            if not isinstance(grad, RalTensor):  # already on CPU (a CPU op consumed the upload)
                return grad, None
            grad = grad.resolve_conj().resolve_neg()  # a lazy conjugate view: its values
        if torch.is_grad_enabled() and grad.requires_grad:
            # create_graph=True (gradient penalties, Hessian-vector products): the way home
            # must itself be differentiable, so take autograd's own device -> CPU copy.
            return grad.to("cpu"), None
        buf, where = copy_to_host_async(grad)
        with _lock:
            _in_flight.setdefault(where, {})[id(buf)] = buf
        buf._torch_fl_stream = where  # read by _Await.backward
        return buf, None


class _Await(torch.autograd.Function):
    """Identity in forward; in backward, waits for the gradient's copy to land."""

    @staticmethod
    def forward(ctx, cpu):
        return cpu.view_as(cpu)

    @staticmethod
    def backward(ctx, grad):
        where = getattr(grad, "_torch_fl_stream", None)
        if where is not None:
            wait_for_copies(*where, buf=grad)
            del grad._torch_fl_stream
        return grad


def wait_for_copies(dev: int, stream: int, buf: torch.Tensor | None = None) -> None:
    """Synchronize (dev, stream) and release every buffer whose copy it covers; nothing to do
    when `buf`'s copy was already covered by an earlier synchronization of that stream.

    Backward hands the gradients home in a burst: the first wait covers every copy enqueued
    before it, so a GPT-2 step waits a few times instead of once per parameter (53)."""
    with _lock:
        pending = _in_flight.get((dev, stream))
        if buf is not None and (pending is None or id(buf) not in pending):
            return
        covered = _in_flight.pop((dev, stream), {})
    try:
        synchronize_stream(dev, stream, "gradient copy to host")
    except BaseException:
        with _lock:  # not known to be complete: keep holding them
            _in_flight.setdefault((dev, stream), {}).update(covered)
        raise


def differentiable_upload(cpu: torch.Tensor, device_copy: RalTensor) -> RalTensor:
    """device_copy as an autograd function of cpu: gradients flow back to cpu's .grad."""
    return _Upload.apply(_Await.apply(cpu), device_copy)
