"""GradScaler's two ops on ral, written as device ops (no vendor kernel offers them).

`_amp_foreach_non_finite_check_and_unscale_` and `_amp_update_scale_` mutate tensors inside
a list and several outputs at once; the cpu tier could only run them on host copies and, on
a device that is not host-mappable, would not write the list members back. Expressed with
ordinary aten ops they run on the device through whichever tier serves each op.
"""

from __future__ import annotations

import torch

from torch_fl.dispatch.special import special

aten = torch.ops.aten


@special(aten._amp_foreach_non_finite_check_and_unscale_.default)
def _non_finite_check_and_unscale(func, args, kwargs):
    names = ("self", "found_inf", "inv_scale")
    grads, found_inf, inv_scale = list(args) + [kwargs[n] for n in names[len(args) :]]
    for g in grads:
        bad = torch.isfinite(g).logical_not().any().to(found_inf.dtype)
        found_inf.copy_(torch.maximum(found_inf, bad.reshape(found_inf.shape)))
        g.mul_(inv_scale.to(g.dtype) if g.dtype != inv_scale.dtype else inv_scale)
    return None


@special(aten._amp_update_scale_.default)
def _update_scale(func, args, kwargs):
    names = ("self", "growth_tracker", "found_inf", "scale_growth_factor", "scale_backoff_factor", "growth_interval")
    full = list(args) + [kwargs[n] for n in names[len(args) :]]
    scale, tracker, found_inf, growth, backoff, interval = full
    inf = found_inf > 0
    succ = tracker + 1
    grow = inf.logical_not() & (succ == interval)
    grown = scale * growth
    grown = torch.where(torch.isfinite(grown), grown, scale)  # CUDA keeps the scale if growing overflows
    new_scale = torch.where(inf, scale * backoff, torch.where(grow, grown, scale))
    new_tracker = torch.where(inf | grow, torch.zeros_like(succ), succ)
    scale.copy_(new_scale)
    tracker.copy_(new_tracker)
    return scale
