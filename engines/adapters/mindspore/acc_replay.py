"""The reference replay of acc_check on MindSpore (the seam of ``engines.acc_check.seam``): one recorded API call
of a PyNative dump run again on the CPU in a wider dtype, float64 for float32 inputs and float32 for
float16/bfloat16 (docs/ACC_CHECK.md, "MindSpore"), forward and, when asked, backward through ``mindspore.vjp``
seeded with the recorded output gradients.

The callable comes from the capture's own API table only (``replay_table``, as analyze-overflow); the arguments
from the record's ``args`` skeleton. A call without a float64 CPU kernel (MindSpore 2.10: fast_gelu, relu6,
histc, diff, ...: ``benchmarks/mindspore_float64_kernels.py``) is replayed with a float32 reference instead, and
its rows say so (reference dtype ``mindspore.float32``). A ``Primitive.*`` call is replayed with a primitive built
from the class and ``init_attrs`` its record keeps (``primitive_attrs``); dumps written before those were recorded
list it as not replayed.
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Tensor

from engines.acc_check.standards import short_dtype
from engines.adapters.mindspore import api_table, primitive_attrs
from engines.adapters.mindspore import overflow_replay as ovr
from engines.overflow import replay as rp
from engines.overflow.replay import ReplayError  # noqa: F401 (this module's interface)
from engines.store.dtypes import as_float32

Saved = Dict[str, Tuple[np.ndarray, str, List[int]]]
DTYPE_PREFIX = "mindspore."

_DTYPES = {"float16": ms.float16, "bfloat16": ms.bfloat16, "float32": ms.float32, "float64": ms.float64,
           "int8": ms.int8, "int16": ms.int16, "int32": ms.int32, "int64": ms.int64, "uint8": ms.uint8,
           "bool": ms.bool_, "complex64": ms.complex64, "complex128": ms.complex128}
_LOW = (ms.float16, ms.bfloat16)
_FLOATING = (ms.float16, ms.bfloat16, ms.float32, ms.float64)


# the dtype policy of this process's reference ("auto", "float64", "float32"); it runs on the CPU
_REFERENCE = {"dtype": "auto"}


def configure_reference(dtype: str = "auto", device: str = "cpu") -> None:
    """The dtype policy; the device must be the CPU (MindSpore's device is the process's context, which the
    training run's script sets: a second device in one process is not MindSpore's model)."""
    if dtype not in ("auto", "float64", "float32"):
        raise ReplayError("dtype %r is none of auto, float64, float32" % dtype)
    if device.strip().lower() != "cpu":
        raise ReplayError("%r: a MindSpore dump replays on the CPU only" % device)
    _REFERENCE["dtype"] = dtype


def reference_dtype(dtypes: List[str]) -> str:
    """Under the default policy float64 when all floating inputs are float32 or wider, float32 as soon as one is
    float16/bfloat16; else the configured dtype."""
    if _REFERENCE["dtype"] != "auto":
        return _REFERENCE["dtype"]
    low = any(short_dtype(d) in ("float16", "bfloat16") for d in dtypes)
    return "float32" if low else "float64"


def _tensor(arr: np.ndarray, dtype_name: str, shape: List[int]) -> Tensor:
    """A tensor from the engine's array: bfloat16 arrives as float32 values (or uint16 bits)."""
    dtype = _DTYPES.get(short_dtype(dtype_name))
    if dtype is None:
        raise ReplayError("a saved tensor has dtype %s, which the replay does not rebuild" % dtype_name)
    a = np.ascontiguousarray(arr)
    if dtype == ms.bfloat16:
        values = as_float32(a.view(np.uint16)) if a.dtype == np.uint16 else a.astype(np.float32)
        return Tensor(values.reshape(shape)).astype(ms.bfloat16)
    return Tensor(a.reshape(shape), dtype=dtype)


def _value(kind: str, value: Any) -> Any:
    if kind in ("mindspore.dtype", "torch.dtype"):  # the second: a dtype row of a dump without args JSON
        dtype = _DTYPES.get(short_dtype(str(value)))
        return rp.UNKNOWN if dtype is None else dtype
    return rp.UNKNOWN


def _raise(obj: Any, high: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.astype(high) if obj.dtype in _FLOATING else obj
    if isinstance(obj, ms.dtype.Type) and obj in _FLOATING:
        return high
    return obj


def flatten_outputs(out: Any, prefix: str = "output") -> List[Tuple[str, Any]]:
    """(slot, value) of everything a call returned, slots as the capture names them."""
    if isinstance(out, (list, tuple)):
        items: List[Tuple[str, Any]] = []
        for i, v in enumerate(out):
            items.extend(flatten_outputs(v, "%s.%d" % (prefix, i)) if isinstance(v, (list, tuple)) else
                         [("%s.%d" % (prefix, i), v)])
        return items
    return [(prefix + ".0", out)]


def to_numpy(value: Any) -> Any:
    """A tensor as a numpy array (float16/bfloat16 widened to float32); other values as they are."""
    if isinstance(value, Tensor):
        if value.dtype in _LOW:
            value = value.astype(ms.float32)
        return value.asnumpy()
    return value


def _callable(name: str, args_json: str = "") -> Callable:
    prefix, api = rp.split_api_name(name)
    if prefix == api_table.PREFIX_PRIMITIVE:
        prim: Callable = primitive_attrs.rebuild(api, args_json, _value)
        return prim
    return ovr.resolve_callable(name)


def _call(name: str, func: Callable, args: List[Any], kwargs: Dict[str, Any], what: str) -> Any:
    try:
        return func(*args, **kwargs)
    except Exception as exc:
        raise ReplayError("%s failed %s: %s: %s" % (name, what, type(exc).__name__, rp.one_line(exc))) from None


def replay_forward(name: str, args_json: str, saved: Saved, grads: Optional[Saved] = None,
                   want: Optional[List[str]] = None, autocast: str = "") -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    """(reference dtype, {output slot: value}, {input slot: its gradient}) of the call ``name``; ``grads`` maps the
    forward output slots to the recorded gradients flowing into them, ``want`` the input slots whose gradients are
    asked. A call that fails in float64 is run in float32 (no float64 kernel); ``autocast`` is PyTorch's only."""
    func = _callable(name, args_json)
    tensors = {slot: _tensor(*v) for slot, v in saved.items()}
    ref = reference_dtype([str(t.dtype) for t in tensors.values() if t.dtype in _FLOATING])
    try:
        return ref, *_run(name, func, args_json, tensors, grads, want, _DTYPES[ref])
    except ReplayError:
        if ref != "float64":
            raise
    # no float64 kernel (or the float64 run fails): a float32 reference, named so in the results
    return "float32", *_run(name, func, args_json, tensors, grads, want, ms.float32)


def _run(name: str, func: Callable, args_json: str, tensors: Dict[str, Tensor], grads: Optional[Saved],
         want: Optional[List[str]], high: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    raised = {slot: _raise(t, high) for slot, t in tensors.items()}
    args, kwargs = rp.build_call(args_json, raised, _value, "output")
    args = rp.map_nested(args, lambda v: _raise(v, high))
    kwargs = rp.map_nested(kwargs, lambda v: _raise(v, high))
    if not grads:
        with ovr.no_grad():
            out = _call(name, func, args, kwargs, "on the reference")
        return {slot: to_numpy(v) for slot, v in flatten_outputs(out)}, {}
    leaves = [slot for slot in want or () if slot in raised and raised[slot].dtype in _FLOATING]
    if not leaves:
        raise ReplayError("%s: no floating input to differentiate" % name)
    args_json_leaves = {slot: i for i, slot in enumerate(leaves)}

    def forward(*xs: Tensor) -> Any:
        inputs = dict(raised)
        inputs.update({slot: xs[i] for slot, i in args_json_leaves.items()})
        a, k = rp.build_call(args_json, inputs, _value, "output")
        a = rp.map_nested(a, lambda v: _raise(v, high))
        k = rp.map_nested(k, lambda v: _raise(v, high))
        return func(*a, **k)

    try:
        out, vjp_fn = ms.vjp(forward, *[raised[s] for s in leaves])
    except Exception as exc:
        raise ReplayError("%s failed on the reference: %s: %s" % (name, type(exc).__name__, rp.one_line(exc))) \
            from None
    outputs = flatten_outputs(out)
    seeds = []
    reached = False
    for slot, value in outputs:
        if not isinstance(value, Tensor):
            raise ReplayError("%s: an output is not a tensor; its backward is not replayed" % name)
        if slot in grads:
            seeds.append(_tensor(*grads[slot]).astype(value.dtype))
            reached = True
        else:
            seeds.append(ms.ops.zeros_like(value))
    if not reached:
        raise ReplayError("%s: no recorded output gradient reaches its inputs" % name)
    seed: Any = tuple(seeds) if isinstance(out, (tuple, list)) else seeds[0]
    try:
        got = vjp_fn(seed)
    except Exception as exc:
        raise ReplayError("%s backward failed on the reference: %s: %s" % (name, type(exc).__name__,
                                                                        rp.one_line(exc))) from None
    if not isinstance(got, (tuple, list)):
        got = (got,)
    return {slot: to_numpy(v) for slot, v in outputs}, {slot: to_numpy(g) for slot, g in zip(leaves, got)}


def run_as_saved(name: str, args_json: str, saved: Saved) -> Dict[str, Any]:
    """{output slot: value} of the call run as recorded (its own dtypes) on this machine's CPU: the device under
    test when the inputs were generated from a statistics dump."""
    func = _callable(name, args_json)
    tensors = {slot: _tensor(*v) for slot, v in saved.items()}
    args, kwargs = rp.build_call(args_json, tensors, _value, "output")
    with ovr.no_grad():
        out = _call(name, func, args, kwargs, "as recorded")
    return {slot: to_numpy(v) for slot, v in flatten_outputs(out)}


def set_threads(n: int) -> None:
    """Intra-op threads of this process (workers run one thread each)."""
    try:
        ms.set_context(runtime_num_threads=max(1, n))
    except Exception:  # a MindSpore that fixes its thread count once it ran an op
        pass


_NAMESPACES = {"Functional": "mindspore.ops.%s", "Mint": "mindspore.mint.%s",
               "MintFunctional": "mindspore.mint.nn.functional.%s",
               api_table.PREFIX_DEMO: "engines.adapters.mindspore.demo_ops.%s"}


def callable_expression(name: str) -> str:
    """The Python expression a reproduction script calls for the record ``name`` (checked against the capture's
    API table first: a name it does not replay is a ``ReplayError``)."""
    prefix, api = rp.split_api_name(name)
    if prefix == api_table.PREFIX_PRIMITIVE:
        raise ReplayError("%s: reproduction scripts for primitives are not written yet" % name)
    func = _callable(name)
    pattern = _NAMESPACES.get(prefix)
    if pattern is not None:
        return pattern % api
    for attr, original, _, alias in api_table.tensor_methods():
        if alias == api and (original is func or getattr(original, "__wrapped__", None) is func):
            return "mindspore.Tensor.%s" % attr
    return "mindspore.Tensor.%s" % api
