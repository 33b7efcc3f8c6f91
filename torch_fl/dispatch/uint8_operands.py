"""uint8 operands CPU still accepts where PyTorch's meta functions want another dtype.

CPU (and CUDA) take a uint8 `where` condition (deprecated, with a warning once per process)
and uint8 class indices for `nll_loss`; the meta functions the router plans from refuse both
("expected predicate to be bool", gather's index dtype), so scripts with byte masks or byte
labels failed on ral only. Each handler widens the operand and calls the op again.
"""

from __future__ import annotations

import warnings

import torch

from torch_fl.dispatch.special import ROUTE, special

aten = torch.ops.aten

_WHERE_UINT8 = (
    "where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
    "future version of PyTorch. Use a boolean condition instead."
)
_warned_where = [False]


def _retyped(args, kwargs, pos: int, name: str, dtype: torch.dtype):
    """(args, kwargs) with the tensor argument at `pos` (or keyword `name`) cast to dtype."""
    if len(args) > pos:
        args = (*args[:pos], aten._to_copy.default(args[pos], dtype=dtype), *args[pos + 1 :])
    else:
        kwargs = {**kwargs, name: aten._to_copy.default(kwargs[name], dtype=dtype)}
    return args, kwargs


def _arg(args, kwargs, pos: int, name: str):
    return args[pos] if len(args) > pos else kwargs.get(name)


@special(aten.where.self, aten.where.self_out)
def _where_uint8_condition(func, args, kwargs):
    cond = _arg(args, kwargs, 0, "condition")
    if not isinstance(cond, torch.Tensor) or cond.dtype is not torch.uint8:
        return ROUTE
    if not _warned_where[0]:  # ATen's TORCH_WARN_ONCE
        _warned_where[0] = True
        warnings.warn(_WHERE_UINT8, UserWarning, stacklevel=2)
    args, kwargs = _retyped(args, kwargs, 0, "condition", torch.bool)
    return func(*args, **kwargs)


_where_uint8_condition.routes_by_signature = True  # cond's dtype is in the fast key


def _nll_uint8_target(target_pos: int):
    def handler(func, args, kwargs):
        target = _arg(args, kwargs, target_pos, "target")
        if not isinstance(target, torch.Tensor) or target.dtype is not torch.uint8:
            return ROUTE
        args, kwargs = _retyped(args, kwargs, target_pos, "target", torch.int64)
        return func(*args, **kwargs)

    handler.routes_by_signature = True  # target's dtype is in the fast key
    return handler


special(aten.nll_loss_forward.default, aten.nll_loss_forward.output)(_nll_uint8_target(1))
special(aten.nll_loss_backward.default, aten.nll_loss_backward.grad_input)(_nll_uint8_target(2))
