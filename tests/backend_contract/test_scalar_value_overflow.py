"""A Scalar that becomes an element of the tensor's dtype (`fill_`, `masked_fill`, and through
them `full`, `full_like`, `new_full`, `t[:] = v`, `t[mask] = v`) is refused as CPU refuses it:
"value cannot be converted to type uint8_t without overflow". ral kernels wrapped the raw
number: `fill_(300)` on uint8 gave 44, `full_like(h, 1e6)` on float16 gave inf, `masked_fill`
of a bool with 2**40 gave False on ral:0. Every dtype, values at and past each dtype's limits,
both devices, both styles: CPU's exception type and message, or CPU's values.

`t[index] = v` differs between PyTorch's devices: on CPU the Python binding stores a float
into a CPU scalar unchecked (`store_scalar`: float16 `t[:2] = 1e6` gives inf), on any other
device it calls `aten::scalar_tensor`, whose `fill_` checks (so CUDA raises, with fill_'s
message). ral is another device: its expectation is CPU's `fill_` error where that raises,
else CPU's values."""

import pytest
import torch
from cpu_outcomes import check_outcomes, outcomes

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
DTYPES = [
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]
VALUES = [
    0,
    -1,
    255,
    256,
    -255,
    -256,
    300,
    -200,
    2**15,
    2**31,
    2**40,
    2**63 - 1,
    -(2**63),
    1.5,
    -0.5,
    65504.0,
    65520.0,
    1e6,
    3.39e38,
    3.5e38,
    1e39,
    float("inf"),
    float("-inf"),
    float("nan"),
    True,
    1 + 0j,
    1 + 1j,
]


def _calls(d, dtype, v):
    """The calls on device d (None: no device named, as a script under ral_mode writes them)."""
    on = {} if d is None else {"device": d}

    def base():
        return torch.zeros(3, dtype=dtype, **on)

    mask = torch.tensor([True, False, True], **on)
    return [
        lambda: base().fill_(v),
        lambda: torch.fill(base(), v),
        lambda: base().masked_fill_(mask, v),
        # complex numbers: test_masked_fill_of_a_real_tensor_with_a_complex_number
        lambda: base().masked_fill(mask, v if type(v) is not complex else 0),
        lambda: torch.full((3,), v, dtype=dtype, **on),
        lambda: torch.full_like(base(), v),
        lambda: base().new_full((2,), v),
    ]


def _setitems(d, dtype, v):
    on = {} if d is None else {"device": d}
    mask = torch.tensor([True, False, True], **on)
    return [
        lambda: _setitem(torch.zeros(3, dtype=dtype, **on), slice(0, 2), v),
        lambda: _setitem(torch.zeros(3, dtype=dtype, **on), mask, v),
    ]


def _expected(dtype, v):
    """CPU's outcomes; for the item assignments, a device's (CPU's fill_ check, then values)."""
    got = outcomes(_calls("cpu", dtype, v))
    fill = outcomes([lambda: torch.zeros(3, dtype=dtype).fill_(v)])[0]
    for value in outcomes(_setitems("cpu", dtype, v)):
        got.append(fill if fill[0] != "value" else value)
    return got


def _on(d, dtype, v):
    return outcomes(_calls(d, dtype, v) + _setitems(d, dtype, v))


def _setitem(t, index, v):
    t[index] = v
    return t


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scalar_value_fits_as_on_cpu(device, dtype):
    for v in VALUES:
        expected = _expected(dtype, v)
        check_outcomes(_on(device, dtype, v), expected)
        with torch_fl.ral_mode(device):
            check_outcomes(_on(None, dtype, v), expected)


def test_the_refusals_are_cpus():
    # the comparison above is only as strong as CPU's refusals: they are there
    refused = [k for dt in DTYPES for v in VALUES for k, _ in _expected(dt, v) if k != "value"]
    assert len(refused) > 200


@pytest.mark.xfail(
    strict=True,
    reason="PyTorch's own meta kernel for masked_fill (torch._refs) refuses any complex value for a real "
    "tensor ('could not convert to type <class 'float'> without overflow'), where CPU's kernel takes 1+0j "
    "and refuses 1+1j with 'value cannot be converted...'; ral plans the call with that meta kernel",
)
@pytest.mark.parametrize("device", DEVICES)
def test_masked_fill_of_a_real_tensor_with_a_complex_number(device):
    mask = torch.tensor([True, False, True])
    calls = [
        lambda d=d, v=v: torch.zeros(3, device=d).masked_fill(mask.to(d), v) for v in (1 + 0j, 1 + 1j) for d in ("cpu",)
    ]
    expected = outcomes(calls)
    got = outcomes(
        [lambda v=v: torch.zeros(3, device=device).masked_fill(mask.to(device), v) for v in (1 + 0j, 1 + 1j)]
    )
    check_outcomes(got, expected)


_BOUNDS = [
    {"max": 1e6},
    {"min": -1e6},
    {"max": 300},
    {"min": -300},
    {"min": -200, "max": 5},
    {"max": 1e39},
    {"max": 2},
    {"max": float("nan")},
    {"max": 2**40},
    {"min": 0.5},
    {"min": -1},
    {"min": 300, "max": 1.5},  # the result type comes from both bounds: float, where 300 fits
    {"min": -1, "max": 2.5},
]


def _clamps(d, dtype):
    on = {} if d is None else {"device": d}
    calls = []
    for kw in _BOUNDS:
        calls.append(lambda kw=kw: torch.tensor([0, 3, 9], **on).to(dtype).clamp(**kw))
        calls.append(lambda kw=kw: torch.tensor([0, 3, 9], **on).to(dtype).clamp_(**kw))
        if len(kw) == 1:
            ((name, v),) = kw.items()
            fn = "clamp_min" if name == "min" else "clamp_max"
            calls.append(lambda fn=fn, v=v: getattr(torch.tensor([0, 3, 9], **on).to(dtype), fn)(v))
            calls.append(lambda fn=fn, v=v: getattr(torch.tensor([0, 3, 9], **on).to(dtype), fn + "_")(v))
    return calls


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.uint8, torch.int8, torch.int32, torch.int64], ids=str
)
def test_clamp_bounds_fit_as_on_cpu(device, dtype):
    # clamp's bounds become elements of the result dtype: uint8 clamp(max=300) and float16
    # clamp(max=1e6) are refused with CPU's message (the kernels raised their own error, or ran)
    expected = outcomes(_clamps("cpu", dtype))
    check_outcomes(outcomes(_clamps(device, dtype)), expected)
    with torch_fl.ral_mode(device):
        check_outcomes(outcomes(_clamps(None, dtype)), expected)


def _bool_clamps(d):
    """Every clamp overload on a bool tensor: CPU's kernels refuse the scalar-bound forms and
    the two-tensor form (NotImplementedError), and run the one-tensor-bound forms (maximum or
    minimum) and any bound that promotes past bool."""
    on = {} if d is None else {"device": d}

    def t():
        return torch.tensor([True, False, True], **on)

    def out():
        return torch.empty(3, dtype=torch.bool, **on)

    return [
        lambda: t().clamp(False, True),
        lambda: t().clamp(min=True),
        lambda: t().clamp(max=False),
        lambda: t().clip(False, True),
        lambda: t().clamp_(False, True),
        lambda: t().clamp_min(True),
        lambda: t().clamp_max_(False),
        lambda: torch.clamp(t(), False, True, out=out()),
        lambda: torch.clamp_min(t(), True, out=out()),
        lambda: t().clamp(t(), t()),
        lambda: t().clamp_(t(), t()),
        lambda: t().clamp(min=t()),
        lambda: t().clamp(max=t()),
        lambda: torch.clamp_min(t(), t()),
        lambda: t().clamp(1),
        lambda: t().clamp(0.5),
        lambda: t().clamp_(0.5),
        lambda: t().clamp(),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_bool_clamp_refused_as_on_cpu(device):
    # the meta function takes bool; ral clamped bool tensors where CPU raises
    # "clamp_scalar_cpu" not implemented for 'Bool'
    expected = outcomes(_bool_clamps("cpu"))
    assert sum(k is NotImplementedError for k, _ in expected) == 11  # the calls CPU refuses
    check_outcomes(outcomes(_bool_clamps(device)), expected)
    with torch_fl.ral_mode(device):
        check_outcomes(outcomes(_bool_clamps(None)), expected)
