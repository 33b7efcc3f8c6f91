"""Per-overload facts precomputed once from func._schema, so the hot path does no parsing."""

from __future__ import annotations

import torch

# Argument kinds.
NON_TENSOR, TENSOR, OPT_TENSOR, TENSOR_LIST = 0, 1, 2, 3

# ---- Facts about aten ops that their schemas do not state: the one place for such lists.
# Arguments of pointwise ops that keep their own dtype in type promotion (bool masks, conditions).
NO_PROMOTE_ARGS = frozenset({"condition", "mask"})
# Ops that broadcast their second argument like pointwise ops but carry no pointwise tag.
BROADCASTING_OPS = frozenset(
    {"aten::copy_", "aten::fill_.Tensor", "aten::masked_fill.Tensor", "aten::masked_fill_.Tensor"}
)
# Ops that update arguments their schema does not mark as mutable: op -> argument positions
# (aten::native_batch_norm writes running_mean/running_var in training).
SECRETLY_MUTATED: dict[str, tuple[int, ...]] = {"aten::native_batch_norm": (3, 4)}
# Decompositions whose results differ from PyTorch's CPU kernel in ways a meta check cannot
# see (the meta kernel agrees with the decomposition, not with CPU): op -> why.
UNFAITHFUL_DECOMPOSITIONS = {
    "aten::native_batch_norm": "in eval mode CPU returns empty save_mean/save_invstd; the decomposition returns full-size",
}


def _inplace_of_pointwise(func) -> bool:
    """True for an in-place overload whose functional twin is tagged pointwise.

    PyTorch tags add_ but not masked_fill_.Scalar, copysign_, eq_/lt_/..., gcd_, heaviside_,
    true_divide_ and others; their `other`/`mask` broadcasts all the same (a norm's backward
    calls masked_fill_ with a broadcast mask)."""
    packet = func.overloadpacket.__name__
    if not packet.endswith("_") or packet.startswith("_"):
        return False
    twin = getattr(torch.ops.aten, packet[:-1], None)
    overload = getattr(twin, func._overloadname, None) if twin is not None else None
    return overload is not None and torch.Tag.pointwise in overload.tags


def _arg_kind(arg) -> int:
    t = arg.type
    if isinstance(t, torch.TensorType):
        return TENSOR
    if isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.TensorType):
        return OPT_TENSOR
    if isinstance(t, torch.ListType):
        el = t.getElementType()
        if isinstance(el, torch.TensorType) or (
            isinstance(el, torch.OptionalType) and isinstance(el.getElementType(), torch.TensorType)
        ):
            return TENSOR_LIST
    return NON_TENSOR


def op_name(func) -> str:
    """Canonical overload name: 'aten::add.Tensor', or 'aten::neg' for the default overload."""
    s = func._schema
    return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


# Argument types whose *value* does not affect output shapes or dtypes beyond their Python type.
# (str() of the JIT types: Scalar prints as "number", T? as "Optional[T]".)
_VALUE_FREE_TYPES = ("number", "float", "Optional[number]", "Optional[float]", "Generator", "Optional[Generator]")


class OpSchema:
    """What the router needs to know about an OpOverload's arguments and results."""

    __slots__ = (
        "func",
        "name",
        "names",
        "defaults",
        "kinds",
        "type_strs",
        "value_free",
        "n_args",
        "out_positions",
        "mutated_positions",
        "input_positions",
        "return_alias",
        "is_view",
        "is_inplace",
        "is_out",
        "n_returns",
        "returns_tensor",
        "pointwise",
        "composite_implicit",
    )

    def __init__(self, func):
        s = func._schema
        self.func = func
        self.name = op_name(func)
        args = s.arguments
        self.n_args = len(args)
        self.names = tuple(a.name for a in args)
        self.defaults = tuple(a.default_value if a.has_default_value() else None for a in args)
        self.kinds = tuple(_arg_kind(a) for a in args)
        self.type_strs = tuple(str(a.type) for a in args)
        self.value_free = tuple(ts in _VALUE_FREE_TYPES for ts in self.type_strs)
        self.out_positions = tuple(i for i, a in enumerate(args) if a.is_out)
        self.mutated_positions = tuple(
            i for i, a in enumerate(args) if a.alias_info is not None and a.alias_info.is_write
        )
        self.input_positions = tuple(
            i for i, k in enumerate(self.kinds) if k != NON_TENSOR and i not in self.out_positions
        )
        # For each return, the index of the argument it aliases (or -1 for a fresh tensor).
        alias_of = {}
        for i, a in enumerate(args):
            if a.alias_info is not None:
                for name in a.alias_info.before_set:
                    alias_of[name] = i
        ret_alias = []
        view = False
        for r in s.returns:
            idx = -1
            if r.alias_info is not None:
                for name in r.alias_info.before_set:
                    idx = alias_of.get(name, -1)
                if not r.alias_info.is_write:
                    view = True
            ret_alias.append(idx)
        self.return_alias = tuple(ret_alias)
        self.is_view = view
        self.is_out = bool(self.out_positions)
        self.is_inplace = bool(self.mutated_positions) and not self.is_out
        self.n_returns = len(s.returns)
        self.returns_tensor = all(isinstance(r.type, torch.TensorType) for r in s.returns) and self.n_returns > 0
        self.pointwise = torch.Tag.pointwise in func.tags or _inplace_of_pointwise(func)
        # Such ops reach a backend only under inference_mode or a dispatch mode; their
        # alias annotations describe "may alias" (e.g. aten.to), so they are decomposed.
        self.composite_implicit = torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), "CompositeImplicitAutograd"
        )

    def __str__(self):
        # The schema stands for its op in the router's cache keys: print as the op does.
        return str(self.func)

    def normalize(self, args, kwargs) -> list:
        """All arguments in schema order, defaults filled in."""
        full = list(args)
        n = len(full)
        if n < self.n_args:
            names = self.names
            defaults = self.defaults
            for i in range(n, self.n_args):
                full.append(kwargs.get(names[i], defaults[i]))
        return full


_SCHEMAS: dict = {}


def schema_of(func) -> OpSchema:
    """The cached OpSchema of an OpOverload."""
    s = _SCHEMAS.get(func)
    if s is None:
        s = _SCHEMAS[func] = OpSchema(func)
    return s


def resolve_op(name: str):
    """The torch OpOverload for 'ns::op.overload' (or 'ns::op'); raises LookupError."""
    ns, sep, rest = name.partition("::")
    if not sep:
        raise LookupError(f"operator name {name!r} must look like 'aten::add.Tensor'")
    opname, _, overload = rest.partition(".")
    try:
        packet = getattr(getattr(torch.ops, ns), opname)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError):
        raise LookupError(f"unknown operator {name!r}: torch {torch.__version__} has no such overload") from None
