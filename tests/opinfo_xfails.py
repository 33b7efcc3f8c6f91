"""Known OpInfo conformance failures: "[<dev>/]<style>:<op>:<dtype>" -> reason ("*" = both
styles; no device = both devices).

Every entry was reviewed against a sweep (`pytest tests/test_opinfo.py`, `-m slow` for the full
sweep, or `python -m torch_fl.tools.sweep op`); test_opinfo fails if an entry starts passing,
so the list stays true. "tracked:" entries are bugs another branch fixes: remove them when it
merges (the strict check names each one that starts passing). A reason starting "flaky:" is
a wrong result that some runs do not show: such a case may pass.
"""

_SPARSE = (
    "sparse layouts on ral devices are refused by design (see README Limits): sparse ops and "
    "to_sparse of a device tensor raise UnsupportedError; under ral_mode sparse work runs on CPU "
    "(device operands brought home) and passes"
)
_LN_DTYPE = (
    "half-precision native_layer_norm (a vendor kernel on both devices): mean/rstd come back float32 (the meta kernel's and CUDA's "
    "dtype, which the router allocates from); PyTorch's CPU kernel returns the input dtype"
)
_SPLIT = (
    "tensor_split requires its tensor_indices_or_sections argument on CPU, as on CUDA; "
    "the conformance transform moves every tensor to the device"
)

XFAIL: dict[str, str] = {
    "device:sparse.sampled_addmm:float32": _SPARSE,
    "device:sparse.mm.reduce:float32": _SPARSE,
    "device:sparse.mm.reduce:bfloat16": _SPARSE,
    "device:to_sparse:float32": _SPARSE,
    "device:tensor_split:float32": _SPLIT,
    "device:tensor_split:int64": _SPLIT,
    # full sweep of the other dtypes (pytest -m slow)
    "*:native_layer_norm:bfloat16": _LN_DTYPE,
    "*:native_layer_norm:float16": _LN_DTYPE,
    "device:sparse.mm.reduce:float16": _SPARSE,
    "device:tensor_split:bfloat16": _SPLIT,
    "device:tensor_split:bool": _SPLIT,
    "device:tensor_split:float16": _SPLIT,
    "device:to_sparse:bfloat16": _SPARSE,
    "device:to_sparse:bool": _SPARSE,
    # float64 and complex64 (full sweep, 2026-12-06)
    "device:sparse.sampled_addmm:float64": _SPARSE,
    "device:sparse.sampled_addmm:complex64": _SPARSE,
    "device:sparse.mm.reduce:float64": _SPARSE,
    "device:to_sparse:float64": _SPARSE,
    "device:to_sparse:complex64": _SPARSE,
    "device:tensor_split:float64": _SPLIT,
    "device:tensor_split:complex64": _SPLIT,
    "device:to_sparse:float16": _SPARSE,
    "device:to_sparse:int64": _SPARSE,
}

_EIG_PHASE = (
    "PyTorch's linalg_eig_backward skips its check that a loss is invariant to the eigenvectors' "
    "phases for tensor subclasses (`!at::isTensorSubclassLike`, FunctionsManual.cpp), so a "
    "phase-dependent loss gets the projected gradient on ral where CPU raises; the gradient of a "
    "phase-invariant loss matches CPU's"
)

# Gradient sweeps (test_opinfo_grad.py): the forward entries above, less those whose samples
# have no gradient to compare (CPU's backward raises as ral's does), plus what only a backward
# shows.
_NO_GRAD_TO_COMPARE = {"device:sparse.sampled_addmm:complex64"}
GRAD_XFAIL: dict[str, str] = {
    **{k: v for k, v in XFAIL.items() if k not in _NO_GRAD_TO_COMPARE},
    "*:linalg.eig:float32": _EIG_PHASE,
    "*:linalg.eig:complex64": _EIG_PHASE,
    "*:linalg.eigh:complex64": _EIG_PHASE,
}

_CPU_RANGE = (
    "the sample asks for device='cpu' with 0-dim tensor bounds, which the sweep moves to the "
    "device: the ref computes start + step * arange(device='cpu'), a ral 0-dim tensor with a CPU "
    "tensor of many elements, which CUDA refuses alike (only a 0-dim CPU tensor mixes with device tensors)"
)

# torch._refs (test_opinfo_refs.py): tensor_split's indices, as in op_db; CPU ranges.
REF_XFAIL: dict[str, str] = {
    "device:_refs.tensor_split:float32": _SPLIT,
    "device:_refs.linspace.tensor_overload:float32": _CPU_RANGE,
}
