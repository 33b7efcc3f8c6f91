"""torch dtype <-> ABI dtype code, built on the header-derived names in dtype_names."""

from __future__ import annotations

import torch

from .dtype_names import ABSENT_CODE, CODE_OF_NAME, NAMES, names_in_mask  # noqa: F401

TORCH_OF_NAME = {name: getattr(torch, name) for name in NAMES}
CODE_OF_TORCH = {TORCH_OF_NAME[name]: code for name, code in CODE_OF_NAME.items()}
TORCH_OF_CODE = {code: dt for dt, code in CODE_OF_TORCH.items()}
NAME_OF_TORCH = {dt: name for name, dt in TORCH_OF_NAME.items()}


def dtype_code(dtype: torch.dtype) -> int:
    """ABI code of a torch dtype; raises TypeError for dtypes the ABI cannot carry."""
    try:
        return CODE_OF_TORCH[dtype]
    except KeyError:
        raise TypeError(f"torch_fl: dtype {dtype} has no RAL ABI code") from None
