"""torch dtype <-> ABI dtype code, built on the header-derived names in dtype_names."""

from __future__ import annotations

import torch

from torch_fl.core.dtype_names import CODE_OF_NAME, NAMES

TORCH_OF_NAME = {name: getattr(torch, name) for name in NAMES}
CODE_OF_TORCH = {TORCH_OF_NAME[name]: code for name, code in CODE_OF_NAME.items()}
TORCH_OF_CODE = {code: dt for dt, code in CODE_OF_TORCH.items()}
NAME_OF_TORCH = {dt: name for name, dt in TORCH_OF_NAME.items()}
# The C++ type ATen names in a dtype's conversion errors ("value cannot be converted to type
# uint8_t without overflow": c10's Scalar accessors use these spellings).
CPP_TYPE_NAME = {
    torch.uint8: "uint8_t",
    torch.int8: "int8_t",
    torch.int16: "int16_t",
    torch.int32: "int",
    torch.int64: "int64_t",
    torch.uint16: "uint16_t",
    torch.uint32: "uint32_t",
    torch.uint64: "uint64_t",
    torch.float16: "c10::Half",
    torch.bfloat16: "c10::BFloat16",
    torch.float32: "float",
    torch.float64: "double",
    torch.complex64: "c10::complex<float>",
    torch.complex128: "c10::complex<double>",
    torch.bool: "bool",
}
