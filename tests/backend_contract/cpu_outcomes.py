"""Helpers for tests that compare a list of calls with CPU: each call's value, or its
exception type and message; or a list of results, dtype and values."""

import warnings

import torch


def outcomes(calls) -> list:
    """("value", result on CPU) or (exception type, message) per call, warnings silenced."""
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for call in calls:
            try:
                out.append(("value", call().cpu()))
            except Exception as e:  # noqa: BLE001 - the exception itself is compared
                out.append((type(e), str(e)))
    return out


def check_outcomes(got, expected, rtol=0.0, atol=0.0, values=True) -> None:
    """The same exceptions (type and message) and the same values (NaN equal NaN) within
    rtol/atol; with values=False (random draws) the same dtype and shape instead of values."""
    assert len(got) == len(expected)
    for (gk, gv), (ek, ev) in zip(got, expected, strict=True):
        assert gk == ek, (gv, ev)
        if ek != "value":
            assert gv == ev
        elif values:
            torch.testing.assert_close(gv, ev, rtol=rtol, atol=atol, equal_nan=True)
        else:
            assert (gv.dtype, gv.shape) == (ev.dtype, ev.shape)


def check_results(got, expected, rtol=0.0, atol=0.0, equal_nan=False) -> None:
    """Result k of `got` (any device) has result k of `expected`'s dtype and values within rtol/atol."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g.cpu(), e, rtol=rtol, atol=atol, equal_nan=equal_nan)
