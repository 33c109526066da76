"""Replaying a recorded call (analyze-overflow), framework-neutral: rebuilding the call from its record's
``args`` skeleton and saved tensors, running it twice, and reading the finiteness of what it returned.

A record name gives the callable (the adapter's ``resolve_callable``); the record's ``args`` skeleton
(``engines.capture.flatten``) gives the arguments with each tensor position marked by its slot. The call runs
twice outside any gradient graph: with the tensors as saved (does the overflow reproduce here?), and with every
floating tensor and floating dtype argument raised to the replay dtype (float32 or float64). The adapter's
``overflow_replay.replay`` brings the callables, the tensors, its dtype objects and the facts of one tensor.
"""

import json
import re
from typing import Any, Callable, Dict, Optional, Tuple, Type

from engines.overflow import origin as og

REPLAY_DTYPES = ("float32", "float64")


class ReplayError(Exception):
    """The call cannot be rebuilt or run; the message says why in one line."""


class OutputFacts:
    """Finiteness of a replay's floating outputs: kinds of non-finite values and the largest finite |value|."""

    __slots__ = ("kinds", "max_abs", "dtype")

    def __init__(self, kinds: int, max_abs: float, dtype: str) -> None:
        self.kinds = kinds
        self.max_abs = max_abs
        self.dtype = dtype


class ReplayResult:
    __slots__ = ("as_saved", "high", "dtype")

    def __init__(self, as_saved: OutputFacts, high: OutputFacts, dtype: str) -> None:
        self.as_saved = as_saved
        self.high = high
        self.dtype = dtype


class UnsafeApiName(Exception):
    """A record names something no capture could have written (a dotted attribute path, a prefix that is not an
    identifier): the dump is corrupted or crafted, and replay refuses it as bad input (exit code 2)."""


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def split_api_name(name: str) -> Tuple[str, str]:
    """``Torch.exp.0.forward`` (or just ``Torch.exp``) -> ``("Torch", "exp")``.

    Replay resolves a name only through the capture's own API table (each adapter's ``replay_table``), never as an
    attribute path, so a name must be exactly ``<Prefix>.<api>[.<n>.<direction>]`` with both parts identifiers;
    anything else (``Torch.os.system``) raises ``UnsafeApiName``."""
    parts = name.split(".")
    if len(parts) >= 4 and parts[-1] in ("forward", "backward") and parts[-2].isdigit():
        parts = parts[:-2]
    if len(parts) != 2 or not all(_IDENTIFIER.match(p) for p in parts):
        raise UnsafeApiName("record %r does not name an API of the capture's table (<Prefix>.<api>); refusing to "
                            "replay it: the dump is corrupted or crafted" % _clip(name))
    return parts[0], parts[1]


def resolve_named(name: str, resolve: Callable[[str, str], Callable], not_replayable: Type[Exception]) -> Callable:
    """The callable of a record name through an adapter's ``replay_table.resolve``: the name's grammar first
    (``UnsafeApiName``), then the table; a name the table does not replay is a ``ReplayError``."""
    prefix, api = split_api_name(name)
    try:
        return resolve(prefix, api)
    except not_replayable as exc:
        raise ReplayError("%s: %s" % (name, exc)) from None


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def check_dtype(dtype: str) -> None:
    if dtype not in REPLAY_DTYPES:
        raise ReplayError("dtype %r: replay runs in float32 or float64" % dtype)


# -- rebuilding the arguments -------------------------------------------------------------------------------
UNKNOWN = object()  # a framework decoder's answer for a type it does not know


def decode(obj: Any, tensors: Dict[str, Any], framework_value: Callable[[str, Any], Any]) -> Any:
    """The argument a skeleton stands for; ``framework_value(type, value)`` rebuilds the framework's own typed
    values (dtypes, devices...) or answers ``UNKNOWN``."""
    if isinstance(obj, list):
        return [decode(v, tensors, framework_value) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "tensor" in obj and len(obj) == 1:
        slot = obj["tensor"]
        if slot not in tensors:
            raise ReplayError("tensor %s was not saved" % slot)
        return tensors[slot]
    kind = obj.get("type")
    value: Any = obj.get("value")
    if kind == "float":
        return float(value)
    if kind == "slice":
        return slice(*[decode(v, tensors, framework_value) for v in value])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "complex":
        return complex(value[0], value[1])
    if isinstance(kind, str) and kind.startswith("numpy."):
        return value
    if kind is not None:
        got = framework_value(kind, value)
        if got is UNKNOWN:
            raise ReplayError("an argument of type %s cannot be rebuilt" % kind)
        return got
    return {k: decode(v, tensors, framework_value) for k, v in obj.items()}


def build_call(args_json: str, tensors: Dict[str, Any], framework_value: Callable[[str, Any], Any],
               out_keyword: str) -> Tuple[list, dict]:
    """``(args, kwargs)`` of a recorded call; the result keyword (``out``) is dropped, ``inplace`` turned off."""
    skeleton = json.loads(args_json) if args_json else {}
    if not isinstance(skeleton, dict) or "args" not in skeleton:
        raise ReplayError("the record keeps no arguments")
    args = decode(skeleton.get("args") or [], tensors, framework_value)
    kwargs = decode(skeleton.get("kwargs") or {}, tensors, framework_value)
    if not isinstance(kwargs, dict):
        raise ReplayError("keyword arguments cannot be rebuilt")
    kwargs.pop(out_keyword, None)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    return list(args), kwargs


def map_nested(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    """``obj`` with every value inside lists, tuples and dicts replaced by ``leaf(value)``."""
    if isinstance(obj, list):
        return [map_nested(v, leaf) for v in obj]
    if isinstance(obj, tuple):
        return tuple(map_nested(v, leaf) for v in obj)
    if isinstance(obj, dict):
        return {k: map_nested(v, leaf) for k, v in obj.items()}
    return leaf(obj)


# -- running it ---------------------------------------------------------------------------------------------
def output_facts(out: Any, tensor_type: Any, tensor_facts: Callable[[Any], Optional[Tuple[int, float, str]]]
                 ) -> OutputFacts:
    """Finiteness of everything a call returned; ``tensor_facts(t)``: (kinds, largest finite |value|, dtype)
    of a floating, non-empty tensor, None for others."""
    kinds = 0
    max_abs = 0.0
    dtype = ""
    stack = [out]
    while stack:
        obj = stack.pop()
        if isinstance(obj, tensor_type):
            facts = tensor_facts(obj)
            if facts is None:
                continue
            kinds |= facts[0]
            max_abs = max(max_abs, facts[1])
            dtype = dtype or facts[2]
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, float):
            kinds |= og.kinds_of_value(obj)
    return OutputFacts(kinds, max_abs, dtype)


def run_twice(name: str, func: Callable, args: list, kwargs: dict, dtype: str, as_saved: Callable[[Any], Any],
              raised: Callable[[Any], Any], facts: Callable[[Any], OutputFacts], no_grad: Callable[[], Any]
              ) -> ReplayResult:
    """Run the call with ``as_saved`` arguments and with ``raised`` ones (each applied to every argument
    value), under ``no_grad()``; a failure is a one-line ``ReplayError``."""
    with no_grad():
        try:
            saved = facts(func(*map_nested(args, as_saved), **map_nested(kwargs, as_saved)))
        except Exception as exc:
            raise ReplayError("%s failed as saved: %s: %s" % (name, type(exc).__name__, one_line(exc))) from None
        try:
            high = facts(func(*map_nested(args, raised), **map_nested(kwargs, raised)))
        except Exception as exc:
            raise ReplayError("%s failed in %s: %s: %s" % (name, dtype, type(exc).__name__, one_line(exc))) \
                from None
    return ReplayResult(saved, high, dtype)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
