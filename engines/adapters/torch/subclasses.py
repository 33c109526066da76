"""Distributed tensor subclasses as the plain tensor a rank holds, and the ``dist`` column that says where it sits.

A ``DTensor`` is recorded as its local shard (``_local_tensor``: an attribute read, no autograd node and no
collective; ``full_tensor()`` or any op on the DTensor itself could launch one and change the training's collective
sequence) with its placements, mesh, coordinate and global shape as JSON text (docs/FORMAT.md, ``tensors.dist``).
An ``AsyncCollectiveTensor`` (what functional collectives and ``DTensor.to_local()`` after a redistribute return)
is waited on with its own ``wait()``, which reads the result without marking the wrapper completed: training's
next use waits again (torch makes that wait idempotent) and sees the same values. Any other wrapper subclass
whose ``__tensor_flatten__`` names exactly one inner tensor of the wrapper's shape and dtype is recorded as that
tensor, with ``{"subclass": "<module.Class>"}``; other subclasses come back as they are (their rows stay without
statistics, ``unsupported``). Plain tensors and parameters pass through untouched, on a fast path.

Classes are recognised by name within ``torch.distributed``, so ``torch.distributed.tensor`` is never imported
by the capture (it is not loaded in most runs and not available on every build).
"""

import json
from typing import Any, Dict, Optional, Tuple

import torch

PLAIN, DTENSOR, ASYNC, WRAPPER = 0, 1, 2, 3
ASYNC_COLLECTIVE = json.dumps({"async_collective": True}, separators=(", ", ": "))

_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)
_KINDS: Dict[type, int] = {}
# tracing tensors hold no values to read (their rows stay unsupported)
_TRACING = ("torch._subclasses", "torch._functorch", "torch._higher_order_ops")
# a DTensor's spec (mesh, placements, global shape, dtype) -> the dist JSON text: a handful of layouts per run
_TEXTS: Dict[Any, str] = {}
_TEXTS_MAX = 4096


def _kind_of(cls: type) -> int:
    kind = _KINDS.get(cls)
    if kind is None:
        kind = PLAIN
        for base in cls.__mro__:
            module = getattr(base, "__module__", "") or ""
            if not module.startswith("torch.distributed"):
                continue
            if base.__name__ == "DTensor":
                kind = DTENSOR
                break
            if base.__name__ == "AsyncCollectiveTensor":
                kind = ASYNC
                break
        if kind == PLAIN and hasattr(cls, "__tensor_flatten__") \
                and not (getattr(cls, "__module__", "") or "").startswith(_TRACING):
            kind = WRAPPER
        _KINDS[cls] = kind
    return kind


def local_view(t: torch.Tensor) -> Tuple[torch.Tensor, str]:
    """(the plain tensor whose values are recorded, the ``dist`` text: "" for a plain tensor).

    Never launches a collective; an unknown subclass comes back as it is (the statistics decide whether they
    can read it)."""
    cls = type(t)
    if cls in _PLAIN_TYPES:
        return t, ""
    kind = _kind_of(cls)
    if kind == PLAIN:
        return t, ""
    if kind == ASYNC:
        return resolved(t), ASYNC_COLLECTIVE
    if kind == WRAPPER:
        return _inner(t)
    local = getattr(t, "_local_tensor", None)
    if not isinstance(local, torch.Tensor):  # a torch without the attribute: the public call (no collective)
        with torch.no_grad():
            local = t.to_local()
    if _kind_of(type(local)) == ASYNC:
        local = resolved(local)
    return local, dtensor_text(t)


def _inner(t: torch.Tensor) -> Tuple[torch.Tensor, str]:
    """A wrapper's one inner tensor of the same shape and dtype (the wrapper itself when there is not one)."""
    try:
        names = t.__tensor_flatten__()[0]
        inner = getattr(t, names[0]) if len(names) == 1 else None
    except Exception:
        return t, ""
    if not isinstance(inner, torch.Tensor) or inner is t or inner.dtype != t.dtype or inner.shape != t.shape:
        return t, ""
    local, dist = local_view(inner)
    if local is inner and type(inner) not in _PLAIN_TYPES and _kind_of(type(inner)) != PLAIN:
        return t, ""  # a wrapper of a wrapper nothing could read
    cls = type(t)
    return local, dist or json.dumps({"subclass": "%s.%s" % (cls.__module__, cls.__qualname__)})


def resolved(t: torch.Tensor) -> torch.Tensor:
    """The plain tensor an AsyncCollectiveTensor stands for, once its collective is done."""
    wait = getattr(t, "wait", None)
    if callable(wait):
        out = wait()
        if isinstance(out, torch.Tensor) and _kind_of(type(out)) != ASYNC:
            return out
    elem = getattr(t, "elem", None)
    return elem if isinstance(elem, torch.Tensor) else t


def dtensor_text(t: Any) -> str:
    """``{"global_shape", "placements", "mesh", "mesh_dims", "coord"}`` of a DTensor as JSON text, cached on its
    spec (hashed once by torch; reading the DTensor's own ``shape`` costs microseconds more)."""
    spec = getattr(t, "_spec", None)
    key: Any = spec
    if spec is None:
        key = (t.device_mesh, tuple(t.placements), tuple(t.shape))
    text = _TEXTS.get(key)
    if text is None:
        if spec is not None:
            info = dtensor_info(spec.mesh, tuple(spec.placements), tuple(spec.shape))
        else:
            info = dtensor_info(*key)
        text = json.dumps(info, separators=(", ", ": "))
        if len(_TEXTS) >= _TEXTS_MAX:
            _TEXTS.clear()
        _TEXTS[key] = text
    return text


def dtensor_info(mesh: Any, placements: Tuple[Any, ...], shape: Tuple[int, ...]) -> Dict[str, Any]:
    names = getattr(mesh, "mesh_dim_names", None)
    coord: Optional[Any] = mesh.get_coordinate()
    return {
        "global_shape": [int(n) for n in shape],
        "placements": [str(p) for p in placements],
        "mesh": mesh.mesh.tolist(),
        "mesh_dims": list(names) if names is not None else None,
        "coord": [int(c) for c in coord] if coord is not None else None,
    }


__all__ = ["ASYNC_COLLECTIVE", "dtensor_text", "local_view", "resolved"]
