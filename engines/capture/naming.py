"""msprobe-compatible record names, per-step call counters and module paths.

Names are what compare matches on, so they follow msprobe exactly:

- API calls: ``{Prefix}.{api}.{N}.{forward|backward}`` (``Functional.linear.3.forward``);
- module calls: ``Module.{path}.{Class}.{forward|backward}.{N}`` (the index comes *after* the direction);
- parameter gradients: ``Module.{path}.{Class}.parameters_grad.{K}``;
- ``save()`` calls (level debug): ``{name}.{N}.debug`` and ``{name}_grad.{N}.debug``.

``N`` counts recorded calls per name within a step and restarts at every step (docs/decisions/0011-what-is-recorded.md).
"""

import re
from typing import Dict, Iterable, Optional, Tuple

FORWARD = "forward"
BACKWARD = "backward"

# Prefixes of API record names, as msprobe writes them.
PREFIX_FUNCTIONAL = "Functional"
PREFIX_TENSOR = "Tensor"
PREFIX_TORCH = "Torch"
PREFIX_VF = "VF"
PREFIX_DISTRIBUTED = "Distributed"
PREFIX_NPU = "NPU"
PREFIX_ATEN = "Aten"
PREFIX_MODULE = "Module"
PREFIX_CELL = "Cell"

API_PREFIXES = (
    "Distributed", "Functional", "Torch", "Tensor", "Mint", "MintFunctional", "Primitive", "Aten", "VF", "NPU",
    "Jit", "MindSpeed", "MintDistributed",
)
MODULE_PREFIXES = ("Module", "Cell")

# Record kinds and directions (columns of the `records` table, docs/FORMAT.md).
# APIs whose outputs hold uninitialised memory: whatever the allocator returned (NaN under torch's deterministic
# mode), the buffers collectives and pipeline stages fill later. Their non-finite values are no finding.
UNINITIALISED_APIS = frozenset(("Torch.empty", "Torch.empty_like", "Torch.empty_strided", "Torch.empty_permuted",
                                "Tensor.new_empty", "Tensor.new_empty_strided"))


def allocates_uninitialised(record_name: str) -> bool:
    """Is ``<Prefix>.<api>.<n>.forward`` a call of one of ``UNINITIALISED_APIS``?"""
    return ".".join(record_name.split(".", 2)[:2]) in UNINITIALISED_APIS


KIND_API = 0
KIND_MODULE = 1
KIND_PARAM_GRAD = 2
KIND_SAVE = 3
DIRECTION_FORWARD = 0
DIRECTION_BACKWARD = 1
DIRECTION_NONE = 2

# Record flags.
FLAG_RECOMPUTED = 1 << 0
FLAG_NONFINITE = 1 << 1
FLAG_PARTIAL = 1 << 2

_API_NAME_RE = re.compile(r"^(%s)\..+\.\d+\.(forward|backward)$" % "|".join(API_PREFIXES))
_MODULE_NAME_RE = re.compile(r"^(%s)\..+\.(forward|backward)\.\d+$" % "|".join(MODULE_PREFIXES))

# Operators that Python spells with a dunder reach torch's function mode as the plain method
# (`a + b` arrives as `Tensor.add`), so our names use the method. msprobe, which patches the dunders,
# writes `Tensor.__add__`. Compare maps one onto the other with this table (msprobe name -> ours).
MSPROBE_DUNDER_ALIASES = {
    "__add__": "add", "__radd__": "add", "__iadd__": "add_",
    "__sub__": "sub", "__rsub__": "rsub", "__isub__": "sub_",
    "__mul__": "mul", "__rmul__": "mul", "__imul__": "mul_",
    "__truediv__": "div", "__rtruediv__": "div", "__itruediv__": "div_", "__div__": "div", "__idiv__": "div_",
    "__floordiv__": "floor_divide", "__rfloordiv__": "floor_divide", "__ifloordiv__": "floor_divide_",
    "__matmul__": "matmul", "__rmatmul__": "matmul",
    "__pow__": "pow", "__rpow__": "pow", "__ipow__": "pow_",
    "__mod__": "remainder", "__rmod__": "remainder", "__imod__": "remainder_",
    "__neg__": "neg", "__abs__": "abs", "__invert__": "bitwise_not",
    "__and__": "bitwise_and", "__iand__": "bitwise_and_", "__or__": "bitwise_or", "__ior__": "bitwise_or_",
    "__xor__": "bitwise_xor", "__ixor__": "bitwise_xor_",
    "__lshift__": "bitwise_left_shift", "__rshift__": "bitwise_right_shift",
    "__eq__": "eq", "__ne__": "ne", "__lt__": "lt", "__le__": "le", "__gt__": "gt", "__ge__": "ge",
}


def api_record_name(prefix: str, api: str, index: int, direction: str = FORWARD) -> str:
    return "%s.%s.%d.%s" % (prefix, api, index, direction)


def module_record_name(path: str, cls: str, index: int, direction: str = FORWARD) -> str:
    return "%s.%s.%s.%s.%d" % (PREFIX_MODULE, path, cls, direction, index)


def param_grad_record_name(path: str, cls: str, index: int) -> str:
    return "%s.%s.%s.parameters_grad.%d" % (PREFIX_MODULE, path, cls, index)


def save_record_name(name: str, index: int, grad: bool = False) -> str:
    return "%s%s.%d.debug" % (name, "_grad" if grad else "", index)


def backward_of(forward_name: str) -> str:
    """The backward record name that belongs to a forward record name (API or module)."""
    if forward_name.endswith(".forward"):
        return forward_name[: -len("forward")] + "backward"
    head, sep, tail = forward_name.rpartition(".forward.")
    if sep:
        return head + ".backward." + tail
    return forward_name


def is_api_name(name: str) -> bool:
    return bool(_API_NAME_RE.match(name))


def is_module_name(name: str) -> bool:
    return bool(_MODULE_NAME_RE.match(name))


class CallCounter:
    """Per-name call indices within one step: ``next(key)`` returns 0, 1, 2, ... and ``reset()`` starts over.
    ``counts`` (name -> calls so far) is public: the per-call path reads and bumps it inline."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: Dict[str, int] = {}

    @property
    def _counts(self) -> Dict[str, int]:
        return self.counts

    def next(self, key: str) -> int:
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        return n

    def peek(self, key: str) -> int:
        return self.counts.get(key, 0)

    def reset(self) -> None:
        self.counts.clear()


# Wrapper components that data-parallel and checkpoint wrappers put into module paths. msprobe users compare a
# DDP run against a single-device run, so the paths must not carry them (docs/decisions/0014-training-setups.md).
_WRAPPER_COMPONENTS = frozenset((
    "_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod", "_dp_wrapped_module", "_offload_wrapped_module",
))


def clean_module_path(path: str, root_is_data_parallel: bool = False) -> str:
    """Strip DDP/FSDP/compile/checkpoint wrapper components from a dotted module path."""
    parts = path.split(".") if path else []
    if root_is_data_parallel and parts and parts[0] == "module":
        parts = parts[1:]
    return ".".join(p for p in parts if p not in _WRAPPER_COMPONENTS)


def split_api_name(name: str) -> Optional[Tuple[str, str, int, str]]:
    """``Functional.linear.3.forward`` -> (``Functional``, ``linear``, 3, ``forward``); None if not an API name."""
    if not is_api_name(name):
        return None
    prefix, rest = name.split(".", 1)
    api, index, direction = rest.rsplit(".", 2)
    return prefix, api, int(index), direction


def matches_any(name: str, patterns: Iterable[str]) -> bool:
    """msprobe's `list` rule: a plain substring test against the full name."""
    for p in patterns:
        if p in name:
            return True
    return False
