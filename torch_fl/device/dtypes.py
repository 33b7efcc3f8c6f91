"""torch dtype <-> ABI dtype code, built on the header-derived names in dtype_names."""

from __future__ import annotations

import torch

from torch_fl.core.dtype_names import CODE_OF_NAME, NAMES

TORCH_OF_NAME = {name: getattr(torch, name) for name in NAMES}
CODE_OF_TORCH = {TORCH_OF_NAME[name]: code for name, code in CODE_OF_NAME.items()}
TORCH_OF_CODE = {code: dt for dt, code in CODE_OF_TORCH.items()}
NAME_OF_TORCH = {dt: name for name, dt in TORCH_OF_NAME.items()}
