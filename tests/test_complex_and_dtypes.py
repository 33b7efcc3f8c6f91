"""Complex dtypes through every tier (also as operands of real ops) and dtypes CUDA serves
that PyTorch's CPU kernels lack (int histc, run as an exact widened CPU computation), on
ral:0 and ral:1, in both styles (`.to(dev)` and CPU code under ral_mode), against CPU.
Tolerance: float32/complex64 rtol 1e-5 / atol 1e-5 (FFT and matmul: 1e-4); integer results exact."""

import pytest
import torch

import torch_fl

DEVICES = [f"ral:{i}" for i in range(min(2, torch.ral.device_count()))]
STYLES = ["to_dev", "mode"]


def _inputs():
    g = torch.Generator().manual_seed(0)
    re = torch.randn(4, 5, generator=g)
    z = torch.complex(torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g))
    zd = z.to(torch.complex128)
    return re, z, zd


CASES = {
    "real_mul_complex": lambda r, z, zd: r * z,
    "complex_mul_real": lambda r, z, zd: z * r,
    "real_add_complex": lambda r, z, zd: r + z,
    "real_div_complex": lambda r, z, zd: r / (z + 2),
    "complex_sub_scalar": lambda r, z, zd: z - 1.5,
    "complex_mul_complex_scalar": lambda r, z, zd: z * (2 - 1j),
    "complex128_mul_real": lambda r, z, zd: zd * r,
    "abs": lambda r, z, zd: z.abs(),
    "angle": lambda r, z, zd: z.angle(),
    "conj_mul": lambda r, z, zd: z.conj() * z,
    "real_imag": lambda r, z, zd: z.real + 2 * z.imag,
    "view_as_real": lambda r, z, zd: torch.view_as_real(z * 2),
    "exp": lambda r, z, zd: torch.exp(z),
    "sum": lambda r, z, zd: z.sum(dim=1),
    "mean": lambda r, z, zd: z.mean(),
    "matmul": lambda r, z, zd: z @ z.T,
    "real_matmul_complex_cast": lambda r, z, zd: r.to(torch.complex64) @ z.T,
    "rfft": lambda r, z, zd: torch.fft.rfft(r, dim=1),
    "fft_ifft": lambda r, z, zd: torch.fft.ifft(torch.fft.fft(z, dim=0), dim=0),
    "polar": lambda r, z, zd: torch.polar(r.abs(), r),
    "complex_from_parts": lambda r, z, zd: torch.complex(r, r * 2) * r,
    # CPU kernels (the cpu tier) that make lazy conjugate views inside: they read them right
    # only with the conjugate key active, which PyTorch's Python fallback had left excluded
    "pinv": lambda r, z, zd: torch.linalg.pinv(z),
    "pinv_complex128": lambda r, z, zd: torch.linalg.pinv(zd.T),
    "pinverse": lambda r, z, zd: torch.pinverse(z),
    "lstsq": lambda r, z, zd: torch.cat([t.flatten() for t in torch.linalg.lstsq(z.T, z.T[:, :2] * 3)[:2]]),
}
TOL = {
    "matmul": 1e-4,
    "real_matmul_complex_cast": 1e-4,
    "rfft": 1e-4,
    "fft_ifft": 1e-4,
    "pinv": 1e-4,
    "pinverse": 1e-4,
    "lstsq": 1e-4,
}


def _run(fn, dev, style, inputs):
    if style == "to_dev":
        return fn(*(t.to(dev) for t in inputs))
    with torch_fl.ral_mode(dev):
        return fn(*inputs)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_complex_ops_match_cpu(dev, style, name):
    inputs = _inputs()
    expected = CASES[name](*inputs)
    actual = _run(CASES[name], dev, style, inputs)
    assert actual.device.type == "ral"
    tol = TOL.get(name, 1e-5)
    torch.testing.assert_close(actual.cpu(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
def test_rfft_backward(dev, style):
    x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1))

    def loss(t):
        spec = torch.fft.rfft(t, dim=1)
        return (spec * spec.conj()).real.sum() + (spec.abs() * torch.arange(9.0, device=t.device)).sum()

    ref = x.clone().requires_grad_()
    loss(ref).backward()
    if style == "to_dev":
        leaf = x.to(dev).requires_grad_()
        loss(leaf).backward()
        grad = leaf.grad.cpu()
    else:
        leaf = x.clone().requires_grad_()
        with torch_fl.ral_mode(dev):
            loss(leaf).backward()
        grad = leaf.grad
    torch.testing.assert_close(grad, ref.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("op", ["eig", "eigh"])
def test_eigen_gradients_of_phase_invariant_losses(dev, style, op):
    """Eigenvectors are defined up to a phase per column, so a sound loss reads them through
    |v|. Such a loss's gradient (eigenvalues and |V|, real and complex input) matches CPU's.
    A loss that depends on the phase raises on CPU and not on ral: PyTorch skips that check
    for tensor subclasses (the GRAD_XFAIL entries in opinfo_xfails.py say so)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(4, 4, generator=g)
    inputs = [a, torch.complex(a, torch.randn(4, 4, generator=g))]
    if op == "eigh":
        inputs = [m @ m.mH + torch.eye(4) for m in inputs]
    fn = torch.linalg.eig if op == "eig" else torch.linalg.eigh
    w = torch.linspace(0.5, 1.5, 16).reshape(4, 4)

    def grad(x, place):
        leaf = place(x).requires_grad_()
        vals, vecs = fn(leaf)
        loss = (vals.real * w[0].to(leaf.device)).sum() + (vecs.abs() ** 2 * w.to(leaf.device)).sum()
        if vals.is_complex():
            loss = loss + (vals.imag * w[1].to(leaf.device)).sum()
        (g,) = torch.autograd.grad(loss, leaf)
        return g.cpu()

    for x in inputs:
        want = grad(x, lambda t: t.clone())
        if style == "to_dev":
            got = grad(x, lambda t: t.to(dev))
        else:
            with torch_fl.ral_mode(dev):
                got = grad(x, lambda t: t.clone())
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


_PRIMS_VIEWS = {
    "prims.real": lambda x, z: torch.ops.prims.real(z),
    "prims.imag of a transpose": lambda x, z: torch.ops.prims.imag(z.T),
    "prims.conj": lambda x, z: torch.ops.prims.conj(z),
    "_refs.real of a slice": lambda x, z: torch._refs.real(z[1:, 1:4]),
    "_refs.imag": lambda x, z: torch._refs.imag(z),
    "_refs.conj": lambda x, z: torch._refs.conj(z),
    "prims.as_strided past an offset": lambda x, z: torch.ops.prims.as_strided(x[1:], (2, 3), (5, 2), 21),
    "prims.transpose": lambda x, z: torch.ops.prims.transpose(x, (2, 0, 1)),
    "prims.split_dim": lambda x, z: torch.ops.prims.split_dim(x, 2, 5),
}


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", sorted(_PRIMS_VIEWS))
def test_prims_views_match_cpu(dev, name):
    """PyTorch's reference implementations (torch._refs, which PyTorch's test_unary_ufuncs.py
    checks on every device) call prims' view ops, whose meta functions describe a fresh tensor:
    prims.real/imag of a ral complex tensor read float32 with the complex strides and
    prims.conj dropped its conjugation (all values wrong). Values, shape, strides and dtype
    match CPU's; writes through a real/imag view reach the complex base."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 4, 5, generator=g)
    z = torch.complex(torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g))
    want = _PRIMS_VIEWS[name](x, z)
    got = _PRIMS_VIEWS[name](x.to(dev), z.to(dev))
    assert (got.shape, got.dtype) == (want.shape, want.dtype)
    torch.testing.assert_close(got.cpu().resolve_conj(), want.resolve_conj(), rtol=0, atol=0)
    if name.startswith("prims.real") or name.startswith("prims.imag"):
        assert got.stride() == want.stride()
        zd = z.to(dev)
        torch.ops.prims.real(zd).mul_(2)
        torch.testing.assert_close(zd.cpu(), torch.complex(z.real * 2, z.imag), rtol=0, atol=0)


def _histc_reference(x, bins, lo, hi):
    """CUDA's integer histc: bin = (x - lo) * bins // (hi - lo), the top edge in the last bin."""
    out = torch.zeros(bins, dtype=x.dtype)
    for v in x.flatten().tolist():
        if lo <= v <= hi:
            b = min((v - lo) * bins // (hi - lo), bins - 1)
            out[b] += 1
    return out


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize(("bins", "lo", "hi"), [(8, 0, 7), (10, 0, 9), (3, 2, 11), (4, 0, 6)])
def test_int_histc_like_cuda(dev, style, dtype, bins, lo, hi):
    # Mixtral's router counts experts with torch.histc on an int tensor off-CPU
    x = torch.randint(0, 12, (200,), generator=torch.Generator().manual_seed(2)).to(dtype)
    expected = _histc_reference(x, bins, lo, hi)
    with pytest.raises(NotImplementedError):
        torch.histc(x, bins=bins, min=lo, max=hi)  # CPU itself has no integer kernel
    if style == "to_dev":
        actual = torch.histc(x.to(dev), bins=bins, min=lo, max=hi)
    else:
        with torch_fl.ral_mode(dev):
            actual = torch.histc(x, bins=bins, min=lo, max=hi)
    assert actual.device.type == "ral" and actual.dtype == dtype
    assert torch.equal(actual.cpu(), expected)
