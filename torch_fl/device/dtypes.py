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
# c10::ScalarType's names, as ATen's messages print a scalar_type() ("but got Float and Double",
# "not implemented for 'Long'").
SCALAR_TYPE_NAME = {
    torch.uint8: "Byte",
    torch.int8: "Char",
    torch.int16: "Short",
    torch.int32: "Int",
    torch.int64: "Long",
    torch.uint16: "UInt16",
    torch.uint32: "UInt32",
    torch.uint64: "UInt64",
    torch.float16: "Half",
    torch.bfloat16: "BFloat16",
    torch.float32: "Float",
    torch.float64: "Double",
    torch.complex32: "ComplexHalf",
    torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
    torch.bool: "Bool",
}
# caffe2::TypeMeta's names (the compiler's spelling of the C++ type), as ATen's messages print
# a dtype() ("expected m1 and m2 to have the same dtype, but got: float != double").
TYPE_META_NAME = {
    **CPP_TYPE_NAME,
    torch.uint8: "unsigned char",
    torch.int8: "signed char",
    torch.int16: "short int",
    torch.int64: "long int",
    torch.uint16: "short unsigned int",
    torch.uint32: "unsigned int",
    torch.uint64: "long unsigned int",
    torch.complex32: "c10::complex<c10::Half>",
}
