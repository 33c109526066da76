"""The reference replay of acc_check on PyTorch: one recorded API call run again on the CPU in a wider dtype
(float64 for float32 inputs, float32 for float16/bfloat16: docs/decisions/0026-acc-check-reference.md), forward
and, when asked, backward through autograd with the recorded output gradients. ``configure_reference`` picks
another dtype policy or device (the job's ``acc_check.reference``).

The callable comes from the capture's own API table only (``replay_table``); the arguments from the record's
``args`` skeleton (``engines.overflow.replay.build_call``). Inputs arrive as numpy arrays with their dtype names;
outputs leave as numpy arrays keyed by the slot the capture gives them (``output.0``, ``output.1.2``...).
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from engines.adapters.torch import overflow_replay as ovr
from engines.overflow import replay as rp
from engines.overflow.replay import ReplayError  # noqa: F401 (this module's interface)

Saved = Dict[str, Tuple[np.ndarray, str, List[int]]]
DTYPE_PREFIX = "torch."  # how the results name the reference dtype (engines.acc_check.seam)

_LOW = (torch.float16, torch.bfloat16)


# this process's reference: the dtype policy ("auto", "float64", "float32") and the device
_REFERENCE: Dict[str, Any] = {"dtype": "auto", "device": torch.device("cpu")}


def configure_reference(dtype: str = "auto", device: str = "cpu") -> None:
    """Replay on ``device`` with the dtype policy ``dtype``; a device this process cannot use is a ``ReplayError``
    (one line) before anything runs."""
    if dtype not in ("auto", "float64", "float32"):
        raise ReplayError("dtype %r is none of auto, float64, float32" % dtype)
    try:
        where = torch.device(device)
        if where.type == "meta":
            raise ValueError("a meta tensor holds no values")
        torch.zeros(1, device=where).add_(1)  # the device exists, this build reaches it and it runs a kernel
    except Exception as exc:
        raise ReplayError("%r cannot run the reference here: %s" % (device, rp.one_line(exc))) from None
    _REFERENCE.update(dtype=dtype, device=where)


def reference_dtype(dtypes: List[str]) -> str:
    """The reference dtype of a call whose floating tensors have these dtypes: under the default policy float64
    when all are float32 or wider, float32 as soon as one is float16/bfloat16; else the configured dtype."""
    if _REFERENCE["dtype"] != "auto":
        return str(_REFERENCE["dtype"])
    low = any(("float16" in d or "bfloat16" in d) for d in dtypes)
    return "float32" if low else "float64"


def _tensor(arr: np.ndarray, dtype_name: str, shape: List[int]) -> torch.Tensor:
    dtype = ovr._STORED_DTYPES.get(dtype_name)
    if dtype is None:
        raise ReplayError("a saved tensor has dtype %s, which the replay does not rebuild" % dtype_name)
    t = torch.from_numpy(np.ascontiguousarray(arr))
    return t.to(dtype).reshape(shape).clone()


def _raise(obj: Any, high: torch.dtype) -> Any:
    """A tensor on the reference device, floating ones in the reference dtype (the others copied)."""
    if isinstance(obj, torch.Tensor):
        device = _REFERENCE["device"]
        return obj.to(device, high) if obj.is_floating_point() else obj.to(device, copy=True)
    if isinstance(obj, torch.dtype) and obj.is_floating_point:
        return high
    return obj


def flatten_outputs(out: Any, prefix: str = "output") -> List[Tuple[str, Any]]:
    """(slot, value) of everything a call returned, slots as the capture names them."""
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Size):
        items: List[Tuple[str, Any]] = []
        for i, v in enumerate(out):
            items.extend(flatten_outputs(v, "%s.%d" % (prefix, i)) if isinstance(v, (list, tuple)) else
                         [("%s.%d" % (prefix, i), v)])
        return items
    if isinstance(out, dict):
        return [("%s.%s" % (prefix, k), v) for k, v in out.items()]
    return [(prefix + ".0", out)]


def to_numpy(value: Any) -> Any:
    """A tensor as a numpy array (bfloat16 widened to float32); other values as they are."""
    if isinstance(value, torch.Tensor):
        t = value.detach()
        if t.dtype == torch.bfloat16 or t.dtype == torch.float16:
            t = t.to(torch.float32)
        return t.cpu().numpy()
    return value


def replay_forward(name: str, args_json: str, saved: Saved, grads: Optional[Saved] = None,
                   want: Optional[List[str]] = None, autocast: str = "") -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
    """(reference dtype, {output slot: value}, {input slot: its gradient}) of the call ``name``; ``grads`` maps the
    forward output slots to the recorded gradients flowing into them (the backward record's inputs), and ``want``
    the input slots whose gradients are asked. ``autocast`` (``torch.bfloat16``...): the call ran under autocast,
    so its floating inputs are rounded to that dtype first, as autocast did, and the reference is float32."""
    if name.startswith("Demo."):
        from engines.adapters.torch import demo_model  # noqa: F401  registers the demo's operators (demo::...)
    func = ovr.resolve_callable(name)
    tensors = {slot: _tensor(*v) for slot, v in saved.items()}
    low = ovr._STORED_DTYPES.get(autocast) if autocast else None
    if low is not None:
        tensors = {slot: (t.to(low) if t.is_floating_point() else t) for slot, t in tensors.items()}
    ref = reference_dtype([str(t.dtype) for t in tensors.values() if t.is_floating_point()])
    high = torch.float64 if ref == "float64" else torch.float32
    raised = {slot: _raise(t, high) for slot, t in tensors.items()}
    if grads:
        for slot in want or ():
            t = raised.get(slot)
            if t is not None and t.is_floating_point():
                raised[slot] = t.detach().requires_grad_(True)
    args, kwargs = rp.build_call(args_json, raised, ovr._torch_value, "out")
    if name.split(".")[1:2] == ["__getitem__"] and len(args) > 1 and isinstance(args[1], list):
        args[1] = tuple(args[1])  # an index tuple, which the JSON skeleton keeps as a list
    args = rp.map_nested(args, lambda v: _raise(v, high))
    kwargs = rp.map_nested(kwargs, lambda v: _raise(v, high))
    with torch.set_grad_enabled(bool(grads)):
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            raise ReplayError("%s failed on the reference: %s: %s" % (name, type(exc).__name__, rp.one_line(exc))) \
                from None
    outputs = flatten_outputs(out)
    gradients: Dict[str, Any] = {}
    if grads:
        gradients = _backward(name, outputs, raised, grads, want or [], high)
    return ref, {slot: to_numpy(v) for slot, v in outputs}, gradients


def run_as_saved(name: str, args_json: str, saved: Saved) -> Dict[str, Any]:
    """{output slot: value} of the call run as recorded (its own dtypes) on this machine's CPU: the device under
    test when the inputs were generated from a statistics dump."""
    if name.startswith("Demo."):
        from engines.adapters.torch import demo_model  # noqa: F401  registers the demo's operators (demo::...)
    func = ovr.resolve_callable(name)
    tensors = {slot: _tensor(*v) for slot, v in saved.items()}
    args, kwargs = rp.build_call(args_json, tensors, ovr._torch_value, "out")
    if name.split(".")[1:2] == ["__getitem__"] and len(args) > 1 and isinstance(args[1], list):
        args[1] = tuple(args[1])
    with torch.no_grad():
        try:
            out = func(*args, **kwargs)
        except Exception as exc:
            raise ReplayError("%s failed as recorded: %s: %s" % (name, type(exc).__name__, rp.one_line(exc))) \
                from None
    return {slot: to_numpy(v) for slot, v in flatten_outputs(out)}


def _backward(name: str, outputs: List[Tuple[str, Any]], raised: Dict[str, Any], grads: Saved, want: List[str],
              high: torch.dtype) -> Dict[str, Any]:
    outs, seeds = [], []
    for slot, value in outputs:
        if slot in grads and isinstance(value, torch.Tensor) and value.requires_grad:
            outs.append(value)
            seeds.append(_tensor(*grads[slot]).to(_REFERENCE["device"], high))
    leaves = [(slot, raised[slot]) for slot in want if isinstance(raised.get(slot), torch.Tensor)
              and raised[slot].requires_grad]
    if not outs or not leaves:
        raise ReplayError("%s: no recorded output gradient reaches its inputs" % name)
    try:
        got = torch.autograd.grad(outs, [t for _, t in leaves], seeds, allow_unused=True)
    except Exception as exc:
        raise ReplayError("%s backward failed on the reference: %s: %s" % (name, type(exc).__name__,
                                                                        rp.one_line(exc))) from None
    return {slot: (None if g is None else to_numpy(g)) for (slot, _), g in zip(leaves, got)}


def set_threads(n: int) -> None:
    """Intra-op threads of this process (workers run one thread each)."""
    torch.set_num_threads(max(1, n))


_EXPRESSIONS = {"Tensor": "torch.Tensor.%s", "Functional": "torch.nn.functional.%s", "Torch": "torch.%s",
                "VF": "torch._VF.%s", "Aten": "torch.ops.aten.%s", "NPU": "torch.ops.npu.%s"}


def callable_expression(name: str) -> str:
    """The Python expression a reproduction script calls for the record ``name`` (checked against the capture's
    API table first: a name it does not replay is a ``ReplayError``)."""
    if name.startswith("Demo."):
        from engines.adapters.torch import demo_model  # noqa: F401  registers the demo's operators (demo::...)
    func = ovr.resolve_callable(name)
    prefix, api = rp.split_api_name(name)
    pattern = _EXPRESSIONS.get(prefix)
    if pattern is not None:
        return pattern % api
    packet = getattr(func, "_qualified_op_name", "") or ""
    namespace = packet.split("::")[0] if "::" in packet else prefix.lower()
    return "torch.ops.%s.%s" % (namespace, api)
