"""The cpu tier: run PyTorch's own CPU kernel on host copies (zero-copy where mappable)."""

from __future__ import annotations

import torch

from torch_fl.core.errors import UnsupportedError
from torch_fl.device.sync import synchronize
from torch_fl.tensor.host_copy import cpu_copy_for_fallback, host_mappable, write_back
from torch_fl.tensor.op_schema import SECRETLY_MUTATED
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tensor.restride import restride
from torch_fl.tensor.transfer import to_device


class CpuRun:
    """Run the op on CPU views of the device tensors and bring the results back."""

    tier = "cpu"
    __slots__ = ("sch", "dev")

    def __init__(self, sch, dev):
        self.sch = sch
        self.dev = dev

    def run(self, args, kwargs, full):
        """Execute the op through PyTorch's CPU kernel."""
        dev = self.dev
        synchronize(dev)
        copies: list[tuple[RalTensor, torch.Tensor]] = []
        cpu_of: dict[int, torch.Tensor] = {}

        def down(v):
            if type(v) is RalTensor:
                c = cpu_of.get(id(v))
                if c is None:
                    c = cpu_copy_for_fallback(v)
                    cpu_of[id(v)] = c
                    copies.append((v, c))
                return c
            if isinstance(v, (list, tuple)):
                return type(v)(down(x) for x in v)
            return v

        cpu_args = [down(a) for a in args]
        cpu_kwargs = {k: down(v) for k, v in kwargs.items()}
        shapes = [(c.shape, c.stride()) for _, c in copies]
        result = self.sch.func(*cpu_args, **cpu_kwargs)
        for (orig, cpu), before in zip(copies, shapes):
            if (cpu.shape, cpu.stride()) != before and not _adopt_resized(orig, cpu, dev):
                raise UnsupportedError(
                    f"RAL_ERROR_UNSUPPORTED: {self.sch.name} resized its ral:{dev} argument from "
                    f"{tuple(before[0])} to {tuple(cpu.shape)}; ral tensors cannot be resized in place "
                    "(pass an out= tensor of the result shape)",
                    op=self.sch.name,
                )
        # Mutated arguments: host-mappable views were written in place; copies go back.
        # Zero-copy views see secret mutations by themselves; copies must be written back.
        positions = self.sch.mutated_positions + SECRETLY_MUTATED.get(self.sch.name, ())
        if not host_mappable(dev):  # on a host-mappable device the CPU views were the memory
            mutated = {id(full[p]) for p in positions if type(full[p]) is RalTensor}
            for orig, cpu in copies:
                if id(orig) in mutated:
                    write_back(orig, cpu)
        by_cpu = {id(c): o for o, c in copies}
        return _up(result, by_cpu, dev)


def _adopt_resized(orig: RalTensor, cpu: torch.Tensor, dev: int) -> bool:
    """An out= op resized its argument on CPU: give the ral tensor the new geometry and data."""
    fresh = to_device(cpu, dev)
    restride(orig, fresh._buf, fresh.shape, fresh.stride(), 0)
    return True


def _up(v, by_cpu, dev):
    if type(v) is RalTensor:
        return v  # the CPU kernel itself created a device tensor (an explicit device= argument)
    if isinstance(v, torch.Tensor):
        o = by_cpu.get(id(v))
        if o is not None:
            return o  # an op returning one of its (mutated) arguments
        return to_device(v, dev)
    if isinstance(v, (list, tuple)):
        return type(v)(_up(x, by_cpu, dev) for x in v)
    return v


def build(sch, args, kwargs, full, dev) -> CpuRun:
    """The cpu tier serves every call."""
    return CpuRun(sch, dev)
