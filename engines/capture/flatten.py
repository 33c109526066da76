"""Walk call arguments and results: tensors are handed to a visitor under their slot, everything else becomes
JSON (scalars, dtypes, devices, slices, sizes...), with tensor positions marked ``{"tensor": "<slot>"}``.

The JSON skeleton is what replay, compare's scalar checks and the API pre-check need (docs/decisions/0011-what-is-recorded.md). The walk is
the same for every framework; an adapter builds its walkers once with ``Walkers(tensor_type, describe, sizes)``:
``describe(obj)`` turns the framework's own objects (dtypes, devices, process groups...) into JSON and returns
None for anything else, and ``sizes`` are the tuple subclasses that are shapes, not argument lists
(``torch.Size``), which ``describe`` also handles.
The functions are closures over those three, so a walk costs what a module-level function costs (it runs for every
captured call).
"""

import math
from typing import Any, Callable, Dict, List, Optional, Tuple

Visitor = Callable[[str, Any], None]
MAX_DEPTH = 32
N_SLOTS = 64  # positional slot names made once
# Scalars that are their own skeleton (what ``walk`` returns unchanged; a subclass such as an IntEnum goes there).
PLAIN = frozenset((bool, int, str))


def _appender(rows: List) -> Visitor:
    return lambda slot, t: rows.append((slot, t))


def no_framework_objects(obj: Any) -> None:
    return None


class Walkers:
    """``walk``, ``walk_call`` (``call_rows``), ``walk_output``, ``tensors_in`` and ``output_tensors`` for one
    tensor type."""

    def __init__(self, tensor_type: Any, describe: Callable[[Any], Any] = no_framework_objects,
                 sizes: Tuple[type, ...] = ()) -> None:
        is_size = sizes if sizes else None
        arg_slots = ["input.%d" % i for i in range(N_SLOTS)]
        kw_slots: Dict[str, str] = {}
        isfinite = math.isfinite

        def walk(obj: Any, slot: str, visit: Optional[Visitor], depth: int = 0) -> Any:
            """JSON-ready skeleton of ``obj``; ``visit(slot, tensor)`` for every tensor inside (when given)."""
            if isinstance(obj, tensor_type):
                if visit is not None:
                    visit(slot, obj)
                return {"tensor": slot}
            if obj is None or isinstance(obj, (bool, int, str)):
                return obj
            if isinstance(obj, float):
                return obj if math.isfinite(obj) else {"type": "float", "value": str(obj)}
            if depth >= MAX_DEPTH:
                return {"type": type(obj).__name__, "truncated": True}
            if is_size is not None and isinstance(obj, is_size):
                return describe(obj)
            if isinstance(obj, (list, tuple)):
                return [walk(v, "%s.%d" % (slot, i), visit, depth + 1) for i, v in enumerate(obj)]
            if isinstance(obj, dict):
                return {str(k): walk(v, "%s.%s" % (slot, k), visit, depth + 1) for k, v in obj.items()}
            known = describe(obj)
            if known is not None:
                return known
            if isinstance(obj, slice):
                return {"type": "slice", "value": [walk(obj.start, slot, None, depth + 1),
                                                   walk(obj.stop, slot, None, depth + 1),
                                                   walk(obj.step, slot, None, depth + 1)]}
            if obj is Ellipsis:
                return {"type": "ellipsis", "value": "..."}
            if isinstance(obj, complex):
                return {"type": "complex", "value": [obj.real, obj.imag]}
            item = getattr(obj, "item", None)
            if item is not None and type(obj).__module__ == "numpy":
                try:
                    return {"type": "numpy." + type(obj).__name__, "value": item()}
                except Exception:
                    pass
            cls = type(obj)
            return {"type": "%s.%s" % (cls.__module__, cls.__qualname__)}

        def walk_call(args: tuple, kwargs: Dict[str, Any], visit: Optional[Visitor]) -> Dict[str, Any]:
            """Skeleton of a call's inputs: positional slots ``input.<i>``, keyword slots ``input.<name>``."""
            out_args: List[Any] = [walk(a, "input.%d" % i, visit) for i, a in enumerate(args)]
            out_kwargs = {str(k): walk(v, "input.%s" % k, visit) for k, v in kwargs.items()} if kwargs else {}
            return {"args": out_args, "kwargs": out_kwargs}

        def call_rows(args: tuple, kwargs: Dict[str, Any], rows: List) -> Dict[str, Any]:
            """``walk_call`` with every ``(slot, tensor)`` appended to ``rows``: the per-call path. A top-level
            tensor or plain scalar (the usual argument; a finite float too, which ``walk`` keeps as it is) is
            handled here with its slot name made once."""
            visit: Optional[Visitor] = None
            out_args: List[Any] = []
            add = out_args.append
            for i, a in enumerate(args):
                if isinstance(a, tensor_type):
                    slot = arg_slots[i] if i < N_SLOTS else "input.%d" % i
                    rows.append((slot, a))
                    add({"tensor": slot})
                elif a is None or type(a) in PLAIN or (type(a) is float and isfinite(a)):
                    add(a)
                else:
                    if visit is None:
                        visit = _appender(rows)
                    add(walk(a, arg_slots[i] if i < N_SLOTS else "input.%d" % i, visit))
            out_kwargs: Dict[str, Any] = {}
            if kwargs:
                for k, v in kwargs.items():
                    known = kw_slots.get(k)
                    if known is None:
                        slot = "input.%s" % k
                        if type(k) is str:
                            kw_slots[k] = slot
                    else:
                        slot = known
                    if isinstance(v, tensor_type):
                        rows.append((slot, v))
                        out_kwargs[str(k)] = {"tensor": slot}
                    elif v is None or type(v) in PLAIN or (type(v) is float and isfinite(v)):
                        out_kwargs[str(k)] = v
                    else:
                        if visit is None:
                            visit = _appender(rows)
                        out_kwargs[str(k)] = walk(v, slot, visit)
            # a tuple (the same JSON): of tensor marks and scalars only, the collector stops tracking it, and then
            # the skeleton; a step's skeletons live until its end
            return {"args": tuple(out_args), "kwargs": out_kwargs}

        def walk_output(out: Any, visit: Optional[Visitor]) -> Any:
            """Skeleton of a result: a single tensor is ``output.0``; tuples and lists number their items."""
            if isinstance(out, (tuple, list)) and not (is_size is not None and isinstance(out, is_size)):
                return [walk(v, "output.%d" % i, visit) for i, v in enumerate(out)]
            return walk(out, "output.0", visit)

        def tensors_in(obj: Any, slot: str, out: List, depth: int = 0) -> None:
            """(slot, tensor) pairs of ``obj`` without building a skeleton."""
            if isinstance(obj, tensor_type):
                out.append((slot, obj))
            elif depth < MAX_DEPTH and isinstance(obj, (list, tuple)) \
                    and not (is_size is not None and isinstance(obj, is_size)):
                for i, v in enumerate(obj):
                    tensors_in(v, "%s.%d" % (slot, i), out, depth + 1)
            elif depth < MAX_DEPTH and isinstance(obj, dict):
                for k, v in obj.items():
                    tensors_in(v, "%s.%s" % (slot, k), out, depth + 1)

        def output_tensors(out: Any) -> List:
            """(slot, tensor) pairs of a call's result, slots as ``walk_output`` names them."""
            pairs: List = []
            if isinstance(out, (tuple, list)) and not (is_size is not None and isinstance(out, is_size)):
                for i, v in enumerate(out):
                    tensors_in(v, "output.%d" % i, pairs)
            else:
                tensors_in(out, "output.0", pairs)
            return pairs

        self.walk = walk
        self.walk_call = walk_call
        self.call_rows = call_rows
        self.walk_output = walk_output
        self.tensors_in = tensors_in
        self.output_tensors = output_tensors
