"""Keyword arguments a torch Python function forwards with their default values are not recorded.

torch's Python functions hand *every* parameter to ``__torch_function__`` by keyword: ``F.embedding(x, w)``
arrives as ``embedding(x, w, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
sparse=False)``. msprobe wraps the callable and records what the caller wrote, so those scalars would be rows it
never has (unmatched in compare) and bytes in every record. A keyword argument equal to the default of the public
callable's signature is therefore left out of the record; everything else is kept (positional arguments always,
keyword arguments with any other value). Replay rebuilds the call from the record and gets the defaults from the
same signature.

For a kept keyword argument whose parameter has a plain default (None, bool, int, float, str), the default is kept
beside it in the record's ``defaults`` map, so that a comparison against a run that used the default can say what
the other side's value was (``input.eps: 0.1 -> 1e-05``).

The defaults are read once per callable (``inspect.signature``, ~20 us) and cached on its ``ApiInfo``; the check
per call is a dict lookup and an identity or type-strict equality test per keyword argument. C functions and Tensor
methods written in C receive only what the caller passed and have no signature to read: they are left alone.
"""

import inspect
import math
from typing import Any, Dict, Optional, Tuple

import torch

_EMPTY = inspect.Parameter.empty
_SCALARS = (type(None), bool, int, float, str)


def defaults_of(func: Any) -> Optional[Dict[str, Any]]:
    """``{parameter: default}`` of a Python function's keyword-capable parameters, or None (C callables,
    ``*args``-only wrappers whose target is unknown, no defaults)."""
    target = _dispatch_target(func)
    if not inspect.isfunction(target):
        return None
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    out: Dict[str, Any] = {}
    for name, p in sig.parameters.items():
        if p.default is _EMPTY or p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out[name] = p.default
    return out or None


def _dispatch_target(func: Any) -> Any:
    """``F.max_pool2d`` and friends are ``boolean_dispatch`` wrappers with a ``(*args, **kwargs)`` signature; the
    function they dispatch to declares the real defaults (the same for both branches)."""
    internal = getattr(torch, "_jit_internal", None)
    table = getattr(internal, "boolean_dispatched", None)
    if table is not None:
        try:
            entry = table.get(func)
        except TypeError:
            entry = None
        if entry:
            return entry.get("if_false") or func
    return func


def same_as_default(value: Any, default: Any) -> bool:
    """Equal for recording purposes: the same object, or plain values of the same type and value (NaN equals NaN;
    ``True`` is not ``1``; a tensor never equals a default)."""
    if value is default:
        return True
    cls = type(value)
    if cls is not type(default):
        return False
    if cls is float:
        return value == default or (math.isnan(value) and math.isnan(default))
    if cls is int or cls is str or cls is torch.device:
        return value == default
    if cls is tuple or cls is list:
        return len(value) == len(default) and all(same_as_default(a, b) for a, b in zip(value, default))
    return False  # dtypes and layouts are singletons (caught by ``is``); anything else is kept


def split_kwargs(kwargs: Dict[str, Any], defaults: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """``(kwargs to record, defaults of the kept scalar ones or None)``."""
    kept: Dict[str, Any] = {}
    kept_defaults: Optional[Dict[str, Any]] = None
    for key, value in kwargs.items():
        default = defaults.get(key, _EMPTY)
        if default is _EMPTY:
            kept[key] = value
            continue
        if same_as_default(value, default):
            continue
        kept[key] = value
        if type(default) in _SCALARS and not isinstance(value, torch.Tensor):
            if kept_defaults is None:
                kept_defaults = {}
            kept_defaults[key] = default
    return kept, kept_defaults


__all__ = ["defaults_of", "same_as_default", "split_kwargs"]
