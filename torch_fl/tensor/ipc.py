"""A ral tensor sent through torch.multiprocessing (a Queue, a Pipe, a spawned worker's
arguments) arrives as a ral tensor on the same device, with the same values and geometry.

It travels as a copy: the sender copies the whole device buffer to a CPU tensor, which
torch.multiprocessing moves through shared memory as it moves any CPU tensor; the receiver
uploads it to the same ral device index and takes the same view (offset, sizes, strides) of
it. Writes on one side are not seen on the other (no plugin exports device memory to another
process yet; docs/tensors_and_serialization.md). The receiving process needs torch_fl (it is
imported there by PyTorch's backend autoload, or by the unpickling itself).
"""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler

import torch

from torch_fl.tensor.host_copy import buffer_to_host
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tensor.serialization import user_attrs
from torch_fl.tensor.transfer import to_device


def rebuild_from_ipc(host, index, offset, size, stride, requires_grad, is_param):
    """Receiver side: upload the sender's buffer copy to ral:index and take the same view."""
    count = host.untyped_storage().nbytes() // host.dtype.itemsize
    flat = torch.empty(0, dtype=host.dtype).set_(host.untyped_storage(), 0, (count,), (1,))
    t = to_device(flat, index).as_strided(size, stride, offset)
    if is_param:
        return torch.nn.Parameter(t, requires_grad=requires_grad)
    return t.requires_grad_(requires_grad) if requires_grad else t


def reduce_for_ipc(t):
    """Sender side (ForkingPickler): a CPU copy of t's whole buffer, shared by torch's own reduction."""
    if t.requires_grad and not t.is_leaf:  # CPU's rule and message for non-leaf tensors
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
            "does not support crossing process boundaries.  If you just want to transfer the "
            "data, call detach() on the tensor before serializing (e.g., putting it on the queue)."
        )
    storage = buffer_to_host(t._buf)
    count = storage.nbytes() // t.dtype.itemsize
    host = torch.empty(0, dtype=t.dtype).set_(storage, 0, (count,), (1,))
    geometry = (t.storage_offset(), tuple(t.shape), tuple(t.stride()))
    is_param = bool(user_attrs(t).get("_is_param"))
    return (rebuild_from_ipc, (host, t._dev, *geometry, t.requires_grad, is_param))


def register() -> None:
    """Teach torch.multiprocessing's pickler to send ral tensors as ral tensors."""
    ForkingPickler.register(RalTensor, reduce_for_ipc)
