"""Out-of-range indices in every indexing kernel raise IndexError, like CPU and CUDA.

The kernels check bounds on the device and never touch memory outside their buffers; a
fault found asynchronously surfaces at the next synchronization, naming the op. After
the error the device and every other tensor keep working.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

DEVICES = ["ral:0", "ral:1"]
# Huge (far past any buffer), negative (never valid for these ops) and just past the end.
BAD = [2**40, -1, -(2**40), 10]
ROWS = 10


def _need(dev: str) -> None:
    if torch.ral.device_count() <= int(dev.split(":")[1]):
        pytest.skip(f"{dev} is not present (needs the host and OpenCL plugins)")


def _lines(idx, cols=4):
    return idx.view(-1, 1).expand(-1, cols).contiguous()


# op name (as the error names it) -> f(weight on device, bad index tensor on device)
KERNELS = {
    "embedding": lambda w, idx: F.embedding(idx, w),
    "index_select": lambda w, idx: torch.index_select(w, 0, idx),
    "gather": lambda w, idx: torch.gather(w, 0, _lines(idx)),
    "scatter": lambda w, idx: w.scatter(0, _lines(idx), torch.ones(3, 4, device=w.device)),
    "scatter_add": lambda w, idx: w.scatter_add(0, _lines(idx), torch.ones(3, 4, device=w.device)),
    "embedding_dense_backward": lambda w, idx: torch.ops.aten.embedding_dense_backward(
        torch.ones(3, 4, device=w.device), idx, ROWS, -1, False
    ),
    # ROWS classes; the host names the target, the OpenCL plugin the index.
    "nll_loss": lambda w, idx: F.nll_loss(w.t()[:3].contiguous(), idx),
}


def _check_still_works(dev, keep, keep_cpu):
    assert torch.equal(keep.cpu(), keep_cpu)
    torch.testing.assert_close((keep * 2 + 1).cpu(), keep_cpu * 2 + 1)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("op", sorted(KERNELS))
def test_out_of_range_index_raises_index_error(dev, op, bad):
    """Every kernel rejects the index; the error is an IndexError naming the op."""
    _need(dev)
    if op == "embedding_dense_backward" and bad == -1:
        pytest.skip("-1 is the op's 'no padding_idx' value: skipped rows, as on CPU")
    keep_cpu = torch.randn(64)
    keep = keep_cpu.to(dev)
    w = torch.randn(ROWS, 4).to(dev)
    idx = torch.tensor([1, bad, 2], device=dev)
    with pytest.raises(IndexError, match=rf"{op}(\b|_forward).*(index|target) {bad} is out of (bounds|range)"):
        KERNELS[op](w, idx).cpu()
    _check_still_works(dev, keep, keep_cpu)
    # The same kernel with valid indices still gives CPU's answer.
    good = torch.tensor([1, ROWS - 1, 0])
    w_cpu = w.cpu()
    expected = KERNELS[op](w_cpu, good)
    torch.testing.assert_close(KERNELS[op](w, good.to(dev)).cpu(), expected)


@pytest.mark.parametrize("dev", DEVICES)
def test_fault_found_asynchronously_raises_at_next_sync(dev):
    """The error comes at the launch (a plugin that checks on the host) or at the latest
    at the next synchronization (checked on the device), naming the op either way."""
    _need(dev)
    idx = int(dev.split(":")[1])
    w = torch.randn(ROWS, 4).to(dev)
    with pytest.raises(IndexError, match=r"index_select\b.*index 10 is out of"):
        torch.index_select(w, 0, torch.tensor([0, ROWS], device=dev))
        other = w + 1  # unrelated work queued after the bad kernel
        torch.ral.synchronize(idx)
    # Reported once: later syncs and results are clean.
    torch.ral.synchronize(idx)
    other = w + 1
    torch.testing.assert_close(other.cpu(), w.cpu() + 1)


@pytest.mark.parametrize("dev", DEVICES)
def test_embedding_backward_never_writes_outside_the_gradient(dev):
    """A bad index in embedding backward neither corrupts neighbours nor passes silently."""
    _need(dev)
    neighbours = [torch.full((256,), 7.0, device=dev) for _ in range(4)]
    grads = torch.ones(2, 4, device=dev)
    for bad in (ROWS, ROWS + 1, 2**20):
        with pytest.raises(IndexError):
            torch.ops.aten.embedding_dense_backward(grads, torch.tensor([0, bad], device=dev), ROWS, -1, False).cpu()
    for t in neighbours:
        assert torch.equal(t.cpu(), torch.full((256,), 7.0))
