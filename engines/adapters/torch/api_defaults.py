"""torch's side of "keyword arguments equal to the callable's default are not recorded" (engines.capture.defaults).

torch's Python functions hand every parameter to ``__torch_function__`` by keyword, so the function mode cannot
tell what the caller wrote; it drops what equals the signature's default. For the ``boolean_dispatch`` wrappers
(``F.max_pool2d`` and friends, ``(*args, **kwargs)`` signatures) the defaults come from the function they dispatch
to (the same for both branches). C functions and Tensor methods written in C receive only what the caller passed
and are left alone.
"""

from typing import Any, Dict, Optional, Tuple

import torch

from engines.capture.defaults import same_as_default, signature_defaults
from engines.capture.defaults import split_kwargs as _split


def defaults_of(func: Any) -> Optional[Dict[str, Any]]:
    return signature_defaults(_dispatch_target(func))


def _dispatch_target(func: Any) -> Any:
    table = getattr(getattr(torch, "_jit_internal", None), "boolean_dispatched", None)
    if table is not None:
        try:
            entry = table.get(func)
        except TypeError:
            entry = None
        if entry:
            return entry.get("if_false") or func
    return func


def _is_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor)


def split_kwargs(kwargs: Dict[str, Any], defaults: Dict[str, Any]) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    return _split(kwargs, defaults, _is_tensor)


__all__ = ["defaults_of", "same_as_default", "split_kwargs"]
