"""In-place variants of every op_db op that has one (`x.add_(y)`, `x.clamp_(...)`, ...) on ral
against CPU: the same values, and an error where CPU raises one (an in-place result that
cannot be cast back, a broadcast that would resize self). The overlap checks of writes
(dispatch/overlap.py) must refuse none of these, since none of them aliases. Random ops
(their values come from the device's own generator) are compared by shape and dtype only.
float32 samples, up to 4 per op; tolerances: rtol/atol 1e-4 (float32 kernels may reassociate)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
# values drawn from the device's generator: CPU's stream is not the device's
RANDOM = {"bernoulli", "cauchy", "exponential", "geometric", "log_normal", "normal", "uniform", "random"}
RANDOM_PREFIXES = ("nn.functional.dropout", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout")
OPS = [op for op in op_db if op.inplace_variant is not None]


def _random(name: str) -> bool:
    return name.split(".")[0] in RANDOM or name.startswith(RANDOM_PREFIXES)


def _to(x, device):
    return x.to(device) if isinstance(x, torch.Tensor) else x


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_variants_match_cpu(device):
    checked, problems = 0, []
    for op in OPS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:4]
        for s in samples:
            want, cpu_error = s.input.clone(), None
            try:
                op.inplace_variant(want, *s.args, **s.kwargs)
            except Exception as e:  # noqa: BLE001 (CPU's verdict, whatever it raises)
                cpu_error = e
            got = s.input.clone().to(device)
            try:
                op.inplace_variant(
                    got, *[_to(a, device) for a in s.args], **{k: _to(v, device) for k, v in s.kwargs.items()}
                )
            except Exception as e:  # noqa: BLE001
                if cpu_error is None:
                    problems.append(f"{op.name}: ral raised {type(e).__name__}: {e}"[:200])
                continue
            checked += 1
            if cpu_error is not None:
                problems.append(f"{op.name}: CPU raised {type(cpu_error).__name__}, ral did not")
            elif got.shape != want.shape or got.dtype != want.dtype:
                problems.append(f"{op.name}: {tuple(got.shape)} {got.dtype} vs CPU {tuple(want.shape)} {want.dtype}")
            elif not _random(op.name) and not torch.allclose(got.cpu(), want, rtol=1e-4, atol=1e-4, equal_nan=True):
                problems.append(f"{op.name}: max difference {(got.cpu() - want).abs().max().item():.3g}")
    assert checked > 400, checked  # the sweep ran (op_db of torch 2.13: 531 samples)
    assert not problems, "\n".join(problems)
