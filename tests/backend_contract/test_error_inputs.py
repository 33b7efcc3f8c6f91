"""PyTorch's own list of calls that must fail: every op_db OpInfo's `error_inputs`, each with the
exception type and message regex PyTorch's test_ops.py::test_errors demands, run on ral:0 and
ral:1 in both styles (`.to`: the error inputs made for the device; `ral_mode`: the CPU ones
inside the mode). A call CPU itself does not fail as listed is skipped (5 of 696 in torch
2.13). Known differences are strict expected failures, each with its reason: one that starts
passing must leave KNOWN."""

import re
import warnings

import pytest
import torch

import torch_fl
from torch_fl.observe import conformance as C

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
_MASKED_FILL = (
    "PyTorch's meta kernel for masked_fill (torch._refs) refuses a complex value for a real tensor "
    "with its own words (test_scalar_value_overflow.py)"
)
_NARROW_COPY = "narrow_copy's meta function checks its arguments in another order and words"
# (device or "*", style or "*", op, index) -> reason
KNOWN = {
    ("*", "*", "masked_fill", 1): _MASKED_FILL,
    ("*", "*", "masked_fill", 2): _MASKED_FILL,
    ("*", "to", "narrow_copy", 1): _NARROW_COPY,
    ("*", "to", "narrow_copy", 6): _NARROW_COPY,
    ("ral:1", "to", "gather", 6): "an out= resized over its own index: the overlap is not seen on ral:1",
    ("ral:1", "to", "take", 2): "an out= resized over its own index: the overlap is not seen on ral:1",
}


def _known(device, style, name, i):
    for key in ((device, style, name, i), ("*", style, name, i), (device, "*", name, i), ("*", "*", name, i)):
        if key in KNOWN:
            return KNOWN[key]
    return None


def _fails_as_listed(op, ei, run) -> str | None:
    """None when run() raises ei's type with a message matching ei's regex, else what happened."""
    s = ei.sample_input
    try:
        run(lambda: op(s.input, *s.args, **s.kwargs))
    except Exception as exc:  # noqa: BLE001 - the exception is what is checked
        if isinstance(exc, ei.error_type) and re.search(ei.error_regex, str(exc)):
            return None
        return f"{type(exc).__name__}: {str(exc)[:150]}"
    return "no error"


def _cpu(call):
    call()


def _tally(wrong: list, what: str, got, reason, ei, table: str) -> None:
    """Record a call that failed otherwise than listed (and is not known), or a known one that
    now fails as listed."""
    if got is not None and reason is None:
        wrong.append(f"{what}: {got} (expected {ei.error_type.__name__}: {ei.error_regex})")
    if got is None and reason is not None:
        wrong.append(f"{what} now fails as listed: remove it from {table} ({reason})")


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_error_inputs_fail_as_pytorch_lists(device, style):
    def on_device(call):
        if style == "mode":
            with torch_fl.ral_mode(device):
                call()
        else:
            call()
        torch.ral.synchronize(device)  # errors a device reports at its next sync belong to this call

    checked, wrong = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in C.load_op_db():
            if op.error_inputs_func is None:
                continue
            name = C.opinfo_name(op)
            cpu_inputs = list(op.error_inputs("cpu"))
            inputs = cpu_inputs if style == "mode" else list(op.error_inputs(device))
            for i, ei in enumerate(inputs):
                if i >= len(cpu_inputs) or _fails_as_listed(op, cpu_inputs[i], _cpu) is not None:
                    continue  # CPU does not fail it as listed either
                checked += 1
                got = _fails_as_listed(op, ei, on_device)
                _tally(wrong, f"{name}[{i}]", got, _known(device, style, name, i), ei, "KNOWN")
    assert checked > 600
    assert not wrong, "\n".join(wrong)


def _module_error_inputs(device: str):
    from torch.testing._internal.common_modules import module_db

    for mi in module_db:
        if mi.module_error_inputs_func is None:
            continue
        cpu = mi.module_error_inputs_func(mi, device="cpu", dtype=torch.float32, requires_grad=False, training=True)
        dev = mi.module_error_inputs_func(mi, device=device, dtype=torch.float32, requires_grad=False, training=True)
        yield from zip(cpu, dev, [mi] * len(cpu))


def _module_fails_as_listed(mi, ei, device, style) -> str | None:
    """None when building the module and calling it (test_modules.py::test_errors' way) raises
    ei's type with a message matching ei's regex, else what happened."""
    mei = ei.module_error_input

    def run():
        m = mi.module_cls(*mei.constructor_input.args, **mei.constructor_input.kwargs)
        if ei.error_on.name != "CONSTRUCTION_ERROR":
            if style == "to":
                m = m.to(device)
            m(*mei.forward_input.args, **mei.forward_input.kwargs)
        if device != "cpu":
            torch.ral.synchronize(device)

    try:
        if style == "mode":
            with torch_fl.ral_mode(device):
                run()
        else:
            run()
    except Exception as exc:  # noqa: BLE001 - the exception is what is checked
        if isinstance(exc, ei.error_type) and re.search(ei.error_regex, str(exc)):
            return None
        return f"{type(exc).__name__}: {str(exc)[:150]}"
    return "no error"


# (style, module, the listed message regex) -> reason; strict as KNOWN
KNOWN_MODULES = {
    ("mode", "nn.Embedding", "index out of range in self"): (
        "an embedding index out of range raises IndexOutOfRangeError (an IndexError) in the plugin's "
        "words ('index 15 is out of range for 10 rows'), not CPU's 'index out of range in self'; the "
        "`.to` style's inputs for a device leave this CPU-only case out"
    ),
}


@pytest.mark.parametrize("style", ["to", "mode"])
@pytest.mark.parametrize("device", DEVICES)
def test_module_error_inputs_fail_as_pytorch_lists(device, style):
    """module_db's error inputs (test_modules.py::test_errors): a module built with bad
    arguments, or called with bad inputs, raises the listed type and message on ral too (the
    `.to` style's inputs made for the device, the mode's on CPU)."""
    checked, wrong = 0, []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cpu_ei, dev_ei, mi in _module_error_inputs(device):
            if _module_fails_as_listed(mi, cpu_ei, "cpu", "to") is not None:
                continue
            checked += 1
            got = _module_fails_as_listed(mi, dev_ei if style == "to" else cpu_ei, device, style)
            reason = KNOWN_MODULES.get((style, mi.name, cpu_ei.error_regex))
            _tally(wrong, mi.name, got, reason, cpu_ei, "KNOWN_MODULES")
    assert checked > 80
    assert not wrong, "\n".join(wrong)
