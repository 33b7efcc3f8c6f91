"""One generated kernel per parameter for torch.optim.Adam/AdamW's default (for-loop) step.

PyTorch picks the for-loop implementation for ral parameters (its foreach/fused defaults check
`type(p) in (Tensor, Parameter)`, and a ral parameter is a RalTensor), which issues 8 kernels
per parameter (weight decay, lerp, mul, addcmul, sqrt, div, add, addcdiv): 416 launches and 8
passes over the optimizer state for the benchmark GPT-2. Here the same arithmetic, in the same
order and precision as PyTorch's CPU kernels, runs as one kernel per parameter. Any call this
module does not claim (capturable, differentiable, complex, tensor hyperparameters, CPU or
mixed devices, a dtype the device cannot generate, a compile failure) runs PyTorch's own loop.
"""

from __future__ import annotations

import torch
import torch.optim.adam as _adam

from torch_fl._native import ffi
from torch_fl.jit.expr import E, call, isnan, lor, var, where
from torch_fl.jit.kernel_cache import kernel_for
from torch_fl.jit.pointwise import Unfit, geometry_scalars, source_for
from torch_fl.jit.spec import PointwiseSpec
from torch_fl.jit.target import target_of
from torch_fl.tensor.ral_tensor import RalTensor
from torch_fl.tiers import launch as L
from torch_fl.tiers.packing import scalar_words

_NAME_C = ffi.new("char[]", b"torch_fl.adam_step")
_DTYPES = (torch.float32, torch.float64)
# Steps served by the generated kernel (tests read it to prove the path ran).
STATS = {"steps": 0, "params": 0}
_original = None


def _spec(dt, amsgrad: bool, maximize: bool, decay: str, small_w: bool) -> PointwiseSpec:
    """The update of one parameter. decay: "none", "l2" (Adam) or "decoupled" (AdamW);
    small_w: |1 - beta1| < 0.5, which picks the branch of PyTorch's lerp formula."""
    n_out = 4 if amsgrad else 3
    ins = [dt] * (n_out + 1)  # param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]
    # scalars: weight decay term, lerp weight, beta2, 1 - beta2, sqrt(bias correction 2), eps, -step size
    spec = PointwiseSpec(outs=[dt] * n_out, ins=ins, scalars=[(dt, "f")] * 7)
    p, g, m, v = (var(f"a{k}", dt) for k in range(4))
    s_wd, s_w, s_b2, s_1mb2, s_bc2, s_eps, s_step = (var(f"s{k}", dt) for k in range(7))

    def let(name: str, e: E) -> E:
        spec.lets.append((name, e))
        return var(name, dt)

    if maximize:
        g = let("g_max", -g)
    if decay == "l2":  # grad.add(param, alpha=wd): PyTorch's vector kernel is fmadd(param, wd, grad)
        g = let("g_l2", call("fma", p, s_wd, g))
    elif decay == "decoupled":  # param.mul_(1 - lr * wd)
        p = let("p_wd", p * s_wd)
    # exp_avg.lerp_(grad, w): PyTorch's vector lerp, fmadd(w, end - self, self) for |w| < 0.5,
    # else end - (end - self) * (1 - w) as fnmadd
    diff = let("m_diff", g - m)
    if small_w:
        m_new = let("m_new", call("fma", s_w, diff, m))
    else:
        m_new = let("m_new", call("fma", -diff, 1 - s_w, g))
    # exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    v_scaled = let("v_scaled", v * s_b2)
    v_new = let("v_new", v_scaled + s_1mb2 * g * g)
    second = v_new
    if amsgrad:  # torch.maximum (NaN-propagating) into max_exp_avg_sq
        mx = var("a4", dt)
        second = let("mx_new", where(lor(isnan(mx), mx > v_new), mx, v_new))
    # denom = (second.sqrt() / bias_correction2_sqrt).add_(eps); param.addcdiv_(exp_avg, denom, value=-step_size)
    denom = let("denom", call("sqrt", second) / s_bc2 + s_eps)
    p_new = let("p_new", p + s_step * m_new / denom)
    spec.stores += [(0, p_new), (1, m_new), (2, v_new)]
    if amsgrad:
        spec.stores.append((3, second))
    return spec


def _claim(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, kw) -> int | None:
    """The ral device index if this whole step can run here, else None."""
    if "decoupled_weight_decay" not in kw:  # torch before Adam and AdamW shared this loop
        return None
    if kw["capturable"] or kw["differentiable"] or kw["has_complex"]:
        return None
    if kw.get("grad_scale") is not None or kw.get("found_inf") is not None:
        return None
    if torch.jit.is_scripting() or torch.compiler.is_compiling():
        return None
    for name in ("lr", "beta1", "beta2", "weight_decay", "eps"):
        if isinstance(kw[name], torch.Tensor) or not isinstance(kw[name], (int, float)):
            return None
    if not params:
        return None
    dev = params[0].device
    if type(params[0]) is not RalTensor or params[0].dtype not in _DTYPES:
        return None
    amsgrad = kw["amsgrad"]
    for i, p in enumerate(params):
        group = [p, grads[i], exp_avgs[i], exp_avg_sqs[i]]
        if amsgrad:
            group.append(max_exp_avg_sqs[i])
        for t in group:
            if type(t) is not RalTensor or t.device != dev or t.dtype != p.dtype or t.shape != p.shape:
                return None
            if t.is_sparse or t.is_complex():
                return None
        st = state_steps[i]
        if type(st) is RalTensor or st.device.type != "cpu":
            return None
    return dev.index


def _kernel(target, dt, amsgrad, maximize, decay, small_w):
    flags = (dt, amsgrad, maximize, decay, small_w)
    return kernel_for(target, ("adam",) + flags, lambda: source_for(target, _spec(*flags)))


def _single_tensor_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, **kw):
    """PyTorch's for-loop Adam/AdamW, served by one generated kernel per parameter on ral."""
    full = dict(kw)
    if args:  # grad_scale, found_inf (positional in PyTorch's call)
        full["grad_scale"], full["found_inf"] = (*args, None, None)[:2]
    try:
        dev = _claim(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, full)
    except KeyError:  # a torch whose private signature differs: its own loop, not a crash
        dev = None
    target = target_of(dev) if dev is not None else None
    if target is None or any(p.dtype not in target.dtypes for p in params):
        return _original(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, **kw)
    lr, beta1, beta2 = float(kw["lr"]), float(kw["beta1"]), float(kw["beta2"])
    wd, eps, amsgrad, maximize = float(kw["weight_decay"]), float(kw["eps"]), kw["amsgrad"], kw["maximize"]
    decay = "none" if wd == 0 else ("decoupled" if kw["decoupled_weight_decay"] else "l2")
    w = 1 - beta1
    small_w = abs(w) < 0.5
    kernels = {dt: _kernel(target, dt, amsgrad, maximize, decay, small_w) for dt in {p.dtype for p in params}}
    if any(h is None for h in kernels.values()):  # compile failure: warned once; PyTorch's loop instead
        return _original(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, **kw)
    wd_term = (1 - lr * wd) if decay == "decoupled" else wd
    calls = []
    for i, param in enumerate(params):  # every call planned before any state changes
        outs = [param, exp_avgs[i], exp_avg_sqs[i]] + ([max_exp_avg_sqs[i]] if amsgrad else [])
        ins = [param, grads[i], *outs[1:]]
        plan = _plan(target, outs, ins)
        if plan is None:
            return _original(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *args, **kw)
        calls.append((kernels[param.dtype], outs, *plan))
    for i, (handle, outs, tensors, geometry) in enumerate(calls):
        step_t = state_steps[i]
        step_t += 1
        step = step_t.item()
        bias_correction1 = 1 - beta1**step
        bias_correction2 = 1 - beta2**step
        step_size = lr / bias_correction1
        scalars = (wd_term, w, beta2, 1 - beta2, bias_correction2**0.5, eps, -step_size)
        words = [scalar_words(v, outs[0].dtype, "f", target.lang) for v in scalars] + geometry
        if outs[0].numel():
            L.call(target.dev, handle, len(outs), tensors, words, _NAME_C, target.plugin, "torch_fl.adam_step")
        # The kernel writes the buffers directly: bump the version counters an in-place op would.
        for t in outs:
            torch.autograd.graph.increment_version(t)
    STATS["steps"] += 1
    STATS["params"] += len(params)


def _plan(target, outs, ins):
    """(launch tensors, OpenCL geometry words) of one parameter's call, or None if unfit.
    The outputs alias inputs: the kernel reads each element before it writes it."""
    shape = tuple(outs[0].shape)
    tensors = [(t, shape, t.stride()) for t in outs + ins]
    if target.lang != "opencl-c":
        return tensors, []
    try:
        return tensors, geometry_scalars(shape, [t[2] for t in tensors])
    except Unfit:
        return None


def install() -> None:
    """Route PyTorch's for-loop Adam/AdamW through `_single_tensor_adam` (idempotent)."""
    global _original
    if _original is None:
        _original = _adam._single_tensor_adam
        _adam._single_tensor_adam = _single_tensor_adam
