"""Python callables -> msprobe API names (``Functional.linear``, ``Tensor.add``, ``Torch.relu``...).

Built once from torch's own namespaces, not from a whitelist: every callable that reaches the function mode gets
a name, and one that is in no table still gets a stable name from its module and qualified name. Metadata calls
(``size``, ``dim``, property getters, ``__repr__``...) map to ``None`` and are never recorded (docs/decisions/0011-what-is-recorded.md).
"""

import sys
import types
from typing import Any, Dict, Optional, Tuple

import torch

from engines.capture import naming

ApiName = Tuple[str, str]  # (prefix, api)

# Tensor methods and torch functions that read metadata, convert to Python, or drive autograd rather than compute.
METADATA_TENSOR_METHODS = frozenset("""
size dim stride numel nelement element_size data_ptr storage_offset is_contiguous is_floating_point is_complex
is_signed is_inference is_leaf is_meta is_sparse is_quantized is_pinned is_shared is_set_to is_nonzero
ndimension get_device has_names item tolist numpy untyped_storage storage _storage _typed_storage dim_order
__len__ __repr__ __format__ __str__ __hash__ __bool__ __int__ __float__ __index__ __complex__ __array__
__array_wrap__ __array_priority__ __reduce_ex__ __reduce__ __getstate__ __setstate__ __deepcopy__ __dir__
__contains__ __iter__ __reversed__ __sizeof__ __torch_function__ __torch_dispatch__ __dlpack__ __dlpack_device__
backward register_hook register_post_accumulate_grad_hook retain_grad requires_grad_ share_memory_ pin_memory
_is_view _base _version type_as_string is_cuda is_cpu is_xpu is_mps is_npu is_nested is_mkldnn is_vulkan
_make_subclass _make_wrapper_subclass _fix_weakref _is_zerotensor _nnz _values _indices
""".split())

METADATA_TORCH_FUNCTIONS = frozenset("""
is_tensor is_storage numel is_grad_enabled get_default_dtype is_floating_point is_complex typename result_type
can_cast promote_types is_nonzero is_inference is_inference_mode_enabled set_grad_enabled is_autocast_enabled
get_autocast_dtype is_same_size is_conj is_neg is_signed is_distributed is_vulkan_available
_set_grad_enabled _is_functional_tensor _is_any_true get_device
""".split())

# torch.ops namespaces that mark regions rather than compute (the optimizer's record_function, ...).
SKIPPED_OP_NAMESPACES = frozenset(("profiler",))

_NAMESPACE_PREFIXES = {"aten": naming.PREFIX_ATEN, "npu": naming.PREFIX_NPU, "c10d": naming.PREFIX_DISTRIBUTED,
                       "_c10d_functional": naming.PREFIX_DISTRIBUTED, "c10d_functional": naming.PREFIX_DISTRIBUTED,
                       "_c10d_functional_autograd": naming.PREFIX_DISTRIBUTED}

# c10d dispatcher op names -> the torch.distributed function names msprobe uses.
C10D_OP_NAMES = {
    "allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce_coalesced", "broadcast_": "broadcast",
    "allgather_": "all_gather", "_allgather_base_": "all_gather_into_tensor", "allgather_coalesced_":
    "all_gather_coalesced", "allgather_into_tensor_coalesced_": "all_gather_into_tensor_coalesced",
    "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced_": "reduce_scatter_tensor_coalesced", "reduce_": "reduce",
    "gather_": "gather", "scatter_": "scatter", "alltoall_": "all_to_all", "alltoall_base_": "all_to_all_single",
    "barrier": "barrier", "send": "send", "recv_": "recv", "recv_any_source_": "recv_any_source", "monitored_barrier_":
    "monitored_barrier", "all_reduce": "all_reduce", "all_gather_into_tensor": "all_gather_into_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor", "wait_tensor": "wait_tensor",
}

_table: Optional[Dict[Any, Optional[ApiName]]] = None


def _is_routine(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, (type, types.ModuleType))


def _fill(table: Dict[Any, Optional[ApiName]], namespace: Any, prefix: str, skip: frozenset = frozenset(),
          private: bool = False) -> None:
    for name in dir(namespace):
        if name.startswith("_") and not private and not (name.startswith("__") and name.endswith("__")):
            continue
        try:
            obj = getattr(namespace, name)
        except Exception:
            continue
        if not _is_routine(obj):
            continue
        try:
            if obj in table:
                _prefer_own_name(table, obj, prefix, name)
                continue
            table[obj] = None if name in skip else (prefix, name)
        except TypeError:  # unhashable
            continue


def _prefer_own_name(table: Dict[Any, Optional[ApiName]], obj: Any, prefix: str, name: str) -> None:
    """Aliases of one binding (``torch.dsmm``/``spmm``/``mm``) compare equal, so the table keeps one entry for all.
    The function mode hands the binding over under its ATen operator's name (``mm`` whichever alias the script
    called), and that is the name msprobe writes: it wins over whichever alias ``dir()`` listed first."""
    entry = table[obj]
    if entry is None or entry[0] != prefix or entry[1] == name:
        return
    if _is_aten_op(name) and not _is_aten_op(entry[1]):
        table[obj] = (prefix, name)


def _is_aten_op(name: str) -> bool:
    try:
        return hasattr(torch.ops.aten, name)
    except Exception:
        return False


def build_table() -> Dict[Any, Optional[ApiName]]:
    """The callable -> name table; torch_npu is included only when the script already imported it."""
    table: Dict[Any, Optional[ApiName]] = {}
    import torch.nn.functional as F

    _fill(table, F, naming.PREFIX_FUNCTIONAL)
    tensor_skip = METADATA_TENSOR_METHODS
    for name, obj in vars(torch._C.TensorBase).items():
        _add_tensor_method(table, name, obj, tensor_skip)
    for name, obj in vars(torch.Tensor).items():
        _add_tensor_method(table, name, obj, tensor_skip)
    _fill(table, torch, naming.PREFIX_TORCH, METADATA_TORCH_FUNCTIONS)
    _fill(table, torch._C._VariableFunctions, naming.PREFIX_TORCH, METADATA_TORCH_FUNCTIONS)
    try:
        _fill(table, torch._VF, naming.PREFIX_VF, private=True)
    except Exception:
        pass
    try:
        import torch.distributed as dist

        if dist.is_available():
            _fill(table, dist, naming.PREFIX_DISTRIBUTED, frozenset(
                "get_rank get_world_size is_initialized is_available new_group get_backend get_process_group_ranks "
                "get_global_rank get_group_rank destroy_process_group init_process_group".split()))
    except Exception:
        pass
    npu = sys.modules.get("torch_npu")
    if npu is not None:
        _fill(table, npu, naming.PREFIX_NPU)
    for obj in (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad):
        table[obj] = None
    return table


def _add_tensor_method(table: Dict[Any, Optional[ApiName]], name: str, obj: Any, skip: frozenset) -> None:
    if isinstance(obj, (property, types.GetSetDescriptorType, types.MemberDescriptorType)):
        return
    if not callable(obj):
        return
    if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
        entry = None
    else:
        entry = None if name in skip else (naming.PREFIX_TENSOR, name)
    try:
        table.setdefault(obj, entry)
    except TypeError:
        pass


def table() -> Dict[Any, Optional[ApiName]]:
    global _table
    if _table is None:
        _table = build_table()
    return _table


def op_name(op: Any) -> Optional[ApiName]:
    """Name of a ``torch.ops`` packet or overload: ``npu.fancy_gelu`` -> (NPU, fancy_gelu)."""
    qualified = getattr(op, "_qualified_op_name", None)
    if qualified is None:
        schema = getattr(op, "_schema", None)
        qualified = schema.name if schema is not None else str(op)
    namespace, _, api = str(qualified).partition("::")
    if not api:
        namespace, _, api = str(qualified).partition(".")
    if namespace in SKIPPED_OP_NAMESPACES:
        return None
    prefix = _NAMESPACE_PREFIXES.get(namespace)
    if prefix is None:
        prefix = namespace[:1].upper() + namespace[1:]
    if prefix == naming.PREFIX_DISTRIBUTED:
        api = C10D_OP_NAMES.get(api, api)
    return prefix, api


def resolve(func: Any) -> Optional[ApiName]:
    """Name for a callable seen by the function mode, None for calls never recorded."""
    t = table()
    try:
        return t[func]
    except KeyError:
        pass
    except TypeError:
        return _fallback_name(func)
    name = _fallback_name(func)
    try:
        t[func] = name
    except TypeError:
        pass
    return name


def _fallback_name(func: Any) -> Optional[ApiName]:
    if isinstance(func, type):
        return None  # constructors such as torch.device / torch.Size
    kind = type(func).__name__
    if kind in ("method-wrapper", "getset_descriptor", "member_descriptor"):
        return None  # property getters and setters
    if isinstance(func, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return op_name(func)
    name = getattr(func, "__name__", None) or type(func).__name__
    qual = getattr(func, "__qualname__", name) or name
    module = getattr(func, "__module__", None) or ""
    if qual.startswith(("TensorBase.", "Tensor.")) or kind in ("method_descriptor", "wrapper_descriptor"):
        if name in METADATA_TENSOR_METHODS:
            return None
        return naming.PREFIX_TENSOR, name
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return naming.PREFIX_FUNCTIONAL, name
    if module.startswith("torch.distributed"):
        return naming.PREFIX_DISTRIBUTED, name
    if module.startswith("torch_npu"):
        return naming.PREFIX_NPU, name
    if name in METADATA_TORCH_FUNCTIONS:
        return None
    if module.startswith("torch") or not module:
        return naming.PREFIX_TORCH, name
    return naming.PREFIX_TORCH, "%s.%s" % (module, qual)
