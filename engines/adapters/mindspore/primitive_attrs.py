"""A MindSpore primitive call's construction attributes: recorded with the call, rebuilt for a replay.

A ``Primitive.<Name>`` call's result depends on what the primitive was built with (``ops.LayerNorm``'s epsilon
and normalized axes), which is not among the call's arguments. The capture adds it to the record's ``args`` as
``"primitive": {"class": <class name>, "init_attrs": {<init argument>: <skeleton>}}`` (docs/FORMAT.md, "API
records"): ``init_attrs`` is the primitive's own record of its ``__init__`` arguments, each value walked like a
call argument. A replay (acc_check) builds the primitive again from that class name and those attributes.

A dump is input anyone may have written: the class is looked up among MindSpore's compute primitives only (the
generated primitives and the math, nn and array operations), never in a namespace with ``getattr``; primitives
that write files, print, run user code or draw random numbers are not in that table.
"""

import functools
import json
from typing import Any, Callable, Dict, Optional

from engines.acc_check.cases import primitive_attrs_recorded as recorded
from engines.acc_check.cases import random_primitive
from engines.adapters.mindspore import flatten
from engines.overflow.replay import ReplayError, decode

KEY = "primitive"  # the same key engines.acc_check.cases reads
_MODULES = ("mindspore.ops.auto_generate.", "mindspore.ops.operations.math_ops", "mindspore.ops.operations.nn_ops",
            "mindspore.ops.operations.array_ops")
_NOT_REPLAYED = ("Summary", "Dump", "Print", "Custom", "PyFunc", "Send", "Receive", "Hook", "Depend")


def record_of(prim: Any) -> Optional[Dict[str, Any]]:
    """``{"primitive": {...}}`` for a call's ``args``; None when the object keeps no ``init_attrs`` dict."""
    attrs = getattr(prim, "init_attrs", None)
    if not isinstance(attrs, dict):
        return None
    walked = {str(k): flatten.walk(v, "", None) for k, v in attrs.items()}
    return {KEY: {"class": type(prim).__name__, "init_attrs": walked}}


@functools.lru_cache(maxsize=None)
def _classes() -> Dict[str, type]:
    """Class name -> the compute primitive class of that name (the first one found when several share it)."""
    from mindspore.ops.primitive import Primitive

    out: Dict[str, type] = {}
    stack = list(Primitive.__subclasses__())
    seen = set()
    while stack:
        cls = stack.pop()
        if cls in seen:
            continue
        seen.add(cls)
        stack.extend(cls.__subclasses__())
        name = cls.__name__
        if (cls.__module__.startswith(_MODULES) and not name.startswith("_") and not random_primitive(name)
                and not any(word in name for word in _NOT_REPLAYED)):
            out.setdefault(name, cls)
    return out


def _tuples(obj: Any) -> Any:
    if isinstance(obj, list):
        return tuple(_tuples(v) for v in obj)
    return obj


def rebuild(api: str, args_json: str, framework_value: Callable[[str, Any], Any]) -> Any:
    """The primitive of the record ``Primitive.<api>``, built from its recorded class and ``init_attrs``."""
    skel = json.loads(args_json) if recorded(args_json) else None
    if skel is None:
        raise ReplayError("Primitive.%s: its attributes are not recorded" % api)
    entry = skel[KEY]
    name = str(entry.get("class") or api)
    cls = _classes().get(name)
    if cls is None:
        raise ReplayError("Primitive.%s: %s is not a compute primitive of this MindSpore" % (api, name))
    attrs = decode(entry["init_attrs"], {}, framework_value)
    if not isinstance(attrs, dict):
        raise ReplayError("Primitive.%s: its attributes cannot be rebuilt" % api)
    errors = []
    for values in ({k: _tuples(v) for k, v in attrs.items()}, attrs):  # JSON keeps tuples as lists
        try:
            return cls(**values)
        except Exception as exc:
            errors.append("%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0][:200] if str(exc).strip()
                                      else ""))
    raise ReplayError("Primitive.%s cannot be built from its attributes: %s" % (api, errors[-1]))


__all__ = ["KEY", "record_of", "recorded", "rebuild"]
