"""Which callable a replay may run for a record name: the inverse of the capture's own API table, compute only.

Replay (analyze-overflow today; acc_check and op reproduction later) runs calls named by a dump, and a dump is
input that anyone may have written. So a name is never resolved as an attribute path under ``torch`` (which
reaches ``torch.os.system``, ``torch.load``, ``torch.ops.load_library``...): it is looked up in the table that
named the calls when they were captured (``api_table``), inverted, and the callable found must be a compute kernel:
an ATen binding (a builtin of ``torch`` / ``torch._C._nn`` or a ``Tensor`` method descriptor), a Python function of
torch's compute modules, or a registered ``torch.ops`` operator packet that the capture names the same way. Calls
that touch files, threads, seeds or global settings are never replayed even though the capture names them.
"""

import functools
import types
from typing import Any, Callable, Dict, Tuple

import torch

from engines.adapters.torch import api_table
from engines.capture import naming

# Python-level functions of these modules compute on tensors (``torch.functional.einsum``, ``F.softmax``...).
COMPUTE_MODULES = frozenset(("torch.nn.functional", "torch.functional", "torch._tensor", "torch._linalg_utils",
                             "torch._lowrank", "torch._lobpcg"))
# Modules whose C bindings are ATen kernels (a builtin's ``__module__``; None for Tensor method descriptors).
_BINDING_MODULES = frozenset(("torch", "torch._C._nn", None))
_BINDING_TYPES = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
# Named by the capture, bound to ATen, and still not computation: files, interpreter state, global settings.
NEVER_REPLAYED = frozenset((
    "from_file", "import_ir_module", "import_ir_module_from_buffer", "init_num_threads", "set_num_threads",
    "set_num_interop_threads", "set_flush_denormal", "set_anomaly_enabled", "to_dlpack", "from_dlpack",
    "save", "load", "set_", "_set_from_file",
))
_NEVER_PREFIXES = ("set_", "get_", "init_", "import_")

class NotReplayable(Exception):
    """The name is well formed but no compute callable of this torch has it (the message says why)."""


@functools.lru_cache(maxsize=None)
def _named_callables() -> Dict[Tuple[str, str], Any]:
    """(prefix, api) -> the callable the capture's table names so, built once."""
    inverse: Dict[Tuple[str, str], Any] = {}
    for obj, entry in api_table.table().items():
        if entry is not None:
            inverse.setdefault(entry, obj)
    return inverse


def is_compute(obj: Any, api: str) -> bool:
    """Whether a callable of the table is a kernel a replay may run."""
    if api in NEVER_REPLAYED or api.startswith(_NEVER_PREFIXES):
        return False
    if isinstance(obj, _BINDING_TYPES):
        return getattr(obj, "__module__", None) in _BINDING_MODULES and not (
            isinstance(obj, types.BuiltinFunctionType) and api.startswith("__") and api not in _DUNDER_OPS)
    if isinstance(obj, types.FunctionType):
        return obj.__module__ in COMPUTE_MODULES
    return False


_DUNDER_OPS = frozenset(naming.MSPROBE_DUNDER_ALIASES) | frozenset(
    ("__and__", "__or__", "__xor__", "__lshift__", "__rshift__"))


def resolve(prefix: str, api: str) -> Callable:
    """The callable a replay runs for ``prefix.api`` (identifiers, from ``engines.overflow.replay.split_api_name``);
    ``NotReplayable`` when there is none."""
    if prefix == naming.PREFIX_DISTRIBUTED:
        raise NotReplayable("collectives are not replayed")
    table = _named_callables()
    found = table.get((prefix, api))
    if found is None and prefix == naming.PREFIX_VF:
        found = table.get((naming.PREFIX_TORCH, api))  # torch._VF holds torch's own bindings
    if isinstance(found, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return _operator(prefix, api)  # an operator the capture named on the way (``Demo.x``): checked as one
    if found is not None:
        if not is_compute(found, api):
            raise NotReplayable("%s.%s is not a compute op (files, threads, seeds, global settings, Python "
                                "internals); replay runs compute ops only" % (prefix, api))
        return found
    if prefix in (naming.PREFIX_TORCH, naming.PREFIX_TENSOR, naming.PREFIX_FUNCTIONAL, naming.PREFIX_VF):
        raise NotReplayable("no %s.%s in this torch's API table (torch %s)" % (prefix, api, torch.__version__))
    return _operator(prefix, api)


def _operator(prefix: str, api: str) -> Callable:
    """A ``torch.ops`` packet the capture would name ``prefix.api`` (``Aten.mm``, ``NPU.x``, ``Demo.naive_softmax``)."""
    namespace = {naming.PREFIX_ATEN: "aten", naming.PREFIX_NPU: "npu"}.get(prefix, prefix[:1].lower() + prefix[1:])
    missing = NotReplayable("no operator %s::%s is registered in this process" % (namespace, api))
    if api in NEVER_REPLAYED or namespace.startswith("_") or api.startswith("_") or hasattr(type(torch.ops), namespace):
        raise NotReplayable("%s.%s is not replayed" % (prefix, api))  # ``torch.ops``'s own methods are no namespace
    try:
        space = getattr(torch.ops, namespace)
        packet = getattr(space, api)
    except (AttributeError, RuntimeError):
        raise missing from None
    if hasattr(type(space), api) or not isinstance(packet, torch._ops.OpOverloadPacket) or api_table.op_name(packet) != (prefix, api):
        raise missing
    return packet
