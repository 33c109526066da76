"""What L1 wraps in MindSpore, and under which msprobe name.

MindSpore has no function-mode hook (nothing like ``torch.overrides.TorchFunctionMode``) and no API-level
callback in PyNative, so L1 replaces the public callables of its namespaces with wrappers while a session runs
(``engines.adapters.mindspore.api_capture`` installs and removes them). Not a whitelist: every public function
of each namespace, every public Tensor method and operator, and every Primitive's ``__call__``; minus metadata,
conversions to Python, autograd/graph transforms and process-group queries, which are never records
(docs/decisions/0011-what-is-recorded.md).

| namespace | prefix |
|---|---|
| ``mindspore.ops`` (functions) | ``Functional`` |
| ``mindspore.mint`` | ``Mint`` |
| ``mindspore.mint.nn.functional`` | ``MintFunctional`` |
| ``mindspore.Tensor`` methods and operators | ``Tensor`` (operators by method name: ``a + b`` is ``Tensor.add``) |
| ``mindspore.communication.comm_func`` | ``Distributed`` |
| ``mindspore.mint.distributed`` | ``MintDistributed`` |
| ``Primitive`` instances called from user code or ``nn`` layers | ``Primitive.<name>`` |
| ``engines.adapters.mindspore.demo_ops`` (the demo's fused operators) | ``Demo`` |
"""

import os
import types
from typing import Any, Dict, Iterator, List, Optional, Tuple

import mindspore
from mindspore import Tensor

from engines.capture import naming

PREFIX_MINT = "Mint"
PREFIX_MINT_FUNCTIONAL = "MintFunctional"
PREFIX_MINT_DISTRIBUTED = "MintDistributed"
PREFIX_PRIMITIVE = "Primitive"
PREFIX_DEMO = "Demo"  # the MindSpore demo's fused operators (``demo_ops``), as the PyTorch demo's torch.ops.demo

# Functions of mindspore.ops that transform functions, read metadata or query the process group.
SKIPPED_FUNCTIONS = frozenset("""
grad value_and_grad vjp jvp jacfwd jacrev vmap get_grad constexpr custom_info_register op_info_register
prim_arg_register prim_attr_register get_vm_impl_fn shape dyn_shape rank size is_tensor is_complex
is_floating_point is_nonzero print_ set_comm_ops_inplace get_backend get_global_rank get_group_rank
get_process_group_ranks get_rank get_world_size is_available is_initialized init_process_group new_group
destroy_process_group get_group_size get_cache_group_rank get_cache_group_size get_group_rank_from_world_rank
get_local_rank get_world_rank_from_group_rank deprecated jit_class
""".split())

METADATA_TENSOR_METHODS = frozenset("""
asnumpy numpy item tolist dim ndimension numel nelement is_contiguous is_floating_point is_complex is_signed
is_init is_pinned is_shared data_ptr storage_offset stride storage untyped_storage get_bytes data_sync
register_hook hooks requires_grad_ set_dtype set_cast_dtype set_init_flag set_device_address set_const_arg
init_data assign_value assign_value_cpp flush_from_cache offload offload_file_path pin_memory wait_pipeline
to_dlpack from_dlpack from_numpy convert_bytes_to_tensor value type set_ move_to remove_hook set_param_info
getitem_index_info setitem_index_info
__repr__ __str__ __format__ __len__ __bool__ __int__ __float__ __index__ __complex__ __array__ __iter__
__contains__ __hash__ __getstate__ __setstate__ __reduce__ __reduce_ex__ __deepcopy__ __copy__ __sizeof__
__dir__ __init__ __new__ __getattribute__ __getattr__ __setattr__ __delattr__ __init_subclass__
__subclasshook__ __class__ __doc__ __module__ __weakref__ __dict__ __array_priority__ __ms_class__
""".split())

# Tensor operators named by the method they compute, as the PyTorch capture names them.
DUNDER_ALIASES = dict(naming.MSPROBE_DUNDER_ALIASES)
DUNDER_ALIASES.update({"__rsub__": "rsub", "__pos__": "positive", "__round__": "round", "__req__": "eq"})

# Primitives that are autograd or graph plumbing rather than computation.
SKIPPED_PRIMITIVES = frozenset(("CellBackwardHook", "HookBackward", "Depend", "UpdateState", "Load",
                                "MakeTuple", "TupleGetItem", "InsertGradientOf"))

# In-place APIs: their first argument is rewritten (entries of it are dropped after the call).
INPLACE_FUNCTIONS = frozenset(("assign", "assign_add", "assign_sub", "scatter_update", "scatter_nd_update",
                               "index_add_", "__setitem__", "copy_", "inplace_update"))


def is_inplace(api: str) -> bool:
    return api in INPLACE_FUNCTIONS or (api.endswith("_") and not api.endswith("__")) or \
        (api.startswith("__i") and api.endswith("__") and api not in ("__index__", "__init__", "__iter__",
                                                                        "__int__", "__invert__"))


def _is_function(obj: Any) -> bool:
    return isinstance(obj, (types.FunctionType, types.BuiltinFunctionType))


def module_functions(namespace: Any, prefix: str) -> Iterator[Tuple[str, Any, str, str]]:
    """(attribute, original, prefix, api) for every public function of a module."""
    for name in sorted(vars(namespace)):
        if name.startswith("_") or name in SKIPPED_FUNCTIONS:
            continue
        obj = vars(namespace)[name]
        if _is_function(obj):
            yield name, obj, prefix, name


def tensor_methods() -> Iterator[Tuple[str, Any, str, str]]:
    """(attribute, original, prefix, api) for every Tensor method and operator that computes."""
    seen = set()
    for cls in Tensor.__mro__:
        if cls is object:
            continue
        for name, obj in vars(cls).items():
            if name in seen:
                continue
            seen.add(name)
            if name in METADATA_TENSOR_METHODS:
                continue
            dunder = name.startswith("__") and name.endswith("__")
            if name.startswith("_") and not dunder:
                continue
            if isinstance(obj, (property, staticmethod, classmethod, types.GetSetDescriptorType,
                                types.MemberDescriptorType)) or not callable(obj):
                continue
            original = getattr(Tensor, name)
            yield name, original, naming.PREFIX_TENSOR, DUNDER_ALIASES.get(name, name)


def namespaces() -> List[Tuple[Any, str]]:
    """(module, prefix) pairs, the optional ones only when they import."""
    from mindspore import mint, ops
    from mindspore.mint.nn import functional as mint_functional

    out: List[Tuple[Any, str]] = [(ops, naming.PREFIX_FUNCTIONAL), (mint, PREFIX_MINT),
                                  (mint_functional, PREFIX_MINT_FUNCTIONAL)]
    for module, prefix in (("mindspore.communication.comm_func", naming.PREFIX_DISTRIBUTED),
                           ("mindspore.mint.distributed", PREFIX_MINT_DISTRIBUTED),
                           ("engines.adapters.mindspore.demo_ops", PREFIX_DEMO)):
        try:
            out.append((__import__(module, fromlist=["_"]), prefix))
        except Exception:
            continue
    return out


def primitive_classes() -> List[type]:
    """``Primitive`` and every subclass with its own ``__call__`` (most generated primitives define one)."""
    from mindspore.ops.primitive import Primitive

    out: List[type] = [Primitive]
    stack = list(Primitive.__subclasses__())
    seen = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        if "__call__" in vars(cls) and cls.__name__ not in SKIPPED_PRIMITIVES:
            out.append(cls)
    return out


_MS_ROOT = os.path.dirname(os.path.abspath(mindspore.__file__)) + os.sep
# MindSpore's own layers are model code: the ops their constructs call are records.
_LAYER_DIRS = tuple(_MS_ROOT + os.path.join(*p) + os.sep for p in (("nn", "layer"), ("nn", "loss"),
                                                                    ("mint", "nn", "layer")))
_internal_cache: Dict[Any, bool] = {}


def internal_caller(code: Any) -> bool:
    """Is this code object MindSpore's machinery (autograd, optimizers, Tensor internals), not model code?"""
    hit = _internal_cache.get(code)
    if hit is None:
        filename = os.path.abspath(code.co_filename)
        hit = filename.startswith(_MS_ROOT) and not filename.startswith(_LAYER_DIRS)
        _internal_cache[code] = hit
    return hit


def primitive_name(prim: Any) -> Optional[str]:
    name = getattr(prim, "name", None) or type(prim).__name__
    if name in SKIPPED_PRIMITIVES:
        return None
    return str(name)


__all__ = ["module_functions", "tensor_methods", "namespaces", "primitive_classes", "internal_caller",
           "is_inplace", "primitive_name", "PREFIX_MINT", "PREFIX_MINT_FUNCTIONAL", "PREFIX_PRIMITIVE"]
