"""Keyword arguments equal to the callable's default are not recorded (framework-neutral part).

A framework's Python functions may forward every parameter by keyword (torch's do: ``F.embedding(x, w)`` reaches
``__torch_function__`` with ``padding_idx=None, max_norm=None, norm_type=2.0, ...``), and a framework's own
modules may pass defaults explicitly (MindSpore's ``nn.Dropout`` passes ``training=True``). msprobe records what the
caller wrote, so such scalars would be rows without a partner in compare, and bytes in every record. A keyword
argument equal to the default of the public callable's signature is left out; everything else is kept
(positional arguments always). For a kept keyword argument whose default is a plain scalar, the default is kept
beside it in the record's ``defaults`` map (compare reports ``input.eps: 0.1 -> 1e-05`` against a run that used the
default). Replay takes omitted arguments from the same signature. docs/CAPTURE.md "Arguments".

Defaults are read once per callable (``signature_defaults``, ~15 us) and cached by the adapter; the check per call
is a dict lookup and an identity or type-strict equality test per keyword argument (~0.1 us each).
"""

import inspect
import math
from typing import Any, Callable, Dict, Optional, Tuple

_EMPTY = inspect.Parameter.empty
_PLAIN = (type(None), bool, int, float, str)
_SKIPPED_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL,
                  inspect.Parameter.VAR_KEYWORD)


def signature_defaults(func: Any) -> Optional[Dict[str, Any]]:
    """``{parameter: default}`` of a Python function's keyword-capable parameters with a default, or None (C
    callables, which receive only what the caller passed and have no signature to read; no defaults)."""
    if not inspect.isfunction(func):
        return None
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    out = {name: p.default for name, p in sig.parameters.items()
           if p.default is not _EMPTY and p.kind not in _SKIPPED_KINDS}
    return out or None


def same_as_default(value: Any, default: Any) -> bool:
    """The same object, or plain values (None, bool, int, float, str, tuples and lists of them) of the same type
    and value: NaN equals NaN, ``True`` is not ``1``, ``2`` is not ``2.0``; a tensor (not a plain value) is never
    equal to a default unless it is the default object itself. dtype objects are singletons (``is``)."""
    if value is default:
        return True
    cls = type(value)
    if cls is not type(default):
        return False
    if cls is float:
        return value == default or (math.isnan(value) and math.isnan(default))
    if cls is int or cls is str:
        return value == default
    if cls is tuple or cls is list:
        return len(value) == len(default) and all(same_as_default(a, b) for a, b in zip(value, default))
    return False


def split_kwargs(kwargs: Dict[str, Any], defaults: Dict[str, Any],
                 is_tensor: Callable[[Any], bool] = lambda v: False
                 ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """``(keyword arguments to record, defaults of the kept non-tensor ones with a plain default, or None)``."""
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
        if type(default) in _PLAIN and not is_tensor(value):
            if kept_defaults is None:
                kept_defaults = {}
            kept_defaults[key] = default
    return kept, kept_defaults


__all__ = ["same_as_default", "signature_defaults", "split_kwargs"]
