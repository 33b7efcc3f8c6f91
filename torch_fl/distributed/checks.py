"""Cross-rank agreement checks: every rank must issue the same collective on the same shapes.

Without this a shape mismatch makes gloo fail with an opaque message, or, worse, exchange the
wrong number of bytes. The check is one small all_gather per collective (a few tens of
microseconds on loopback); TORCH_FL_DIST_CHECK=0 turns it off.
"""

from __future__ import annotations

import zlib

import torch

_MAX_DIMS = 8
_WIDTH = 4 + _MAX_DIMS  # op, dtype, ndim, numel, dims...


def fingerprint(name: str, tensors) -> torch.Tensor:
    """An int64 vector describing the op and its first tensor's dtype and shape (-1 = none)."""
    fp = torch.full((_WIDTH,), -1, dtype=torch.int64)
    fp[0] = zlib.crc32(name.encode())
    if tensors:
        t = tensors[0]
        fp[1] = zlib.crc32(str(t.dtype).encode())
        fp[2] = t.dim()
        fp[3] = t.numel()
        for i, n in enumerate(t.shape[:_MAX_DIMS]):
            fp[4 + i] = n
    return fp


def _describe(row: torch.Tensor) -> str:
    ndim = int(row[2])
    if ndim < 0:
        return "no tensor"
    dims = [int(x) for x in row[4 : 4 + min(ndim, _MAX_DIMS)]]
    return f"shape {dims} ({int(row[3])} elements)"


def check_same_across_ranks(gloo, name: str, fp: torch.Tensor, rank: int) -> None:
    """All-gather fingerprints and raise ValueError on every rank if any rank differs."""
    size = gloo.size()
    flat = torch.empty(size * _WIDTH, dtype=torch.int64)
    gloo._allgather_base(flat, fp).wait()
    rows = flat.view(size, _WIDTH)
    if bool((rows == rows[0]).all()):
        return
    if bool((rows[:, 0] != rows[0, 0]).any()):
        raise ValueError(
            f"torch_fl.distributed: ranks issued different collectives at the same point (rank {rank} issued {name}); "
            "every rank must call the same collectives in the same order"
        )
    detail = "; ".join(f"rank {r}: {_describe(rows[r])}" for r in range(size))
    if bool((rows[:, 1] != rows[0, 1]).any()):
        detail += " (dtypes differ)"
    raise ValueError(f"torch_fl.distributed: {name}: tensors differ across ranks: {detail}")
