"""Nested call arguments and results (tuples, lists, dicts, namedtuples), framework-neutral: what free_benchmark
does to them with the tensors inside. ``is_tensor`` is the adapter's test (``isinstance(x, torch.Tensor)``)."""

from typing import Any, Callable, List, Tuple

IsTensor = Callable[[Any], bool]


def tensors_of(obj: Any, is_tensor: IsTensor, out: List[Any]) -> List[Any]:
    """Every tensor inside ``obj``, in order (appended to ``out``)."""
    if is_tensor(obj):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            tensors_of(v, is_tensor, out)
    elif isinstance(obj, dict):
        for v in obj.values():
            tensors_of(v, is_tensor, out)
    return out


def paths(obj: Any, is_tensor: IsTensor, prefix: Tuple, out: List[Tuple[Tuple, Any]]) -> None:
    """``(path, tensor)`` of every tensor inside ``obj``; a path is the indices and keys leading to it."""
    if is_tensor(obj):
        out.append((prefix, obj))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            paths(v, is_tensor, prefix + (i,), out)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            paths(v, is_tensor, prefix + (k,), out)


def put(obj: Any, path: Tuple, value: Any) -> Any:
    """A copy of ``obj`` with ``value`` at ``path`` (lists stay lists, every other sequence becomes a tuple)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        new = dict(obj)
        new[head] = put(obj[head], rest, value)
        return new
    items = list(obj)
    items[head] = put(items[head], rest, value)
    return items if isinstance(obj, list) else tuple(items)


def rebuild(obj: Any, items: list, strict: bool = False) -> Any:
    """A tuple of ``obj``'s type (a namedtuple, torch's ``return_types`` structseq) holding ``items``; a plain
    tuple when that type cannot be built (TypeError instead when ``strict``)."""
    if type(obj) is tuple:
        return tuple(items)
    try:
        return type(obj)(*items)  # namedtuple
    except TypeError:
        try:
            return type(obj)(items)  # structseq
        except TypeError:
            if strict:
                raise
            return tuple(items)


def replace_first(obj: Any, eligible: IsTensor, fn: Callable[[Any], Any]) -> Tuple[Any, bool]:
    """``obj`` with its first ``eligible`` tensor replaced by ``fn(tensor)``; (obj, False) when it has none."""
    if eligible(obj):
        return fn(obj), True
    if isinstance(obj, (list, tuple)):
        items = list(obj)
        for i, v in enumerate(items):
            new, done = replace_first(v, eligible, fn)
            if done:
                items[i] = new
                return (items if isinstance(obj, list) else rebuild(obj, items)), True
        return obj, False
    if isinstance(obj, dict):
        for k, v in obj.items():
            new, done = replace_first(v, eligible, fn)
            if done:
                out = dict(obj)
                out[k] = new
                return out, True
    return obj, False


def map_tensors(obj: Any, is_tensor: IsTensor, fn: Callable[[Any], Any]) -> Any:
    """``obj`` with every tensor ``t`` inside replaced by ``fn(t)``."""
    if is_tensor(obj):
        return fn(obj)
    if isinstance(obj, list):
        return [map_tensors(v, is_tensor, fn) for v in obj]
    if isinstance(obj, tuple):
        return rebuild(obj, [map_tensors(v, is_tensor, fn) for v in obj])
    if isinstance(obj, dict):
        return {k: map_tensors(v, is_tensor, fn) for k, v in obj.items()}
    return obj


def cast_like(new: Any, old: Any, is_tensor: IsTensor, cast_tensor: Callable[[Any, Any], Any]) -> Any:
    """``new`` in ``old``'s structure; ``cast_tensor(new_tensor, old_tensor)`` gives each tensor ``old``'s dtype
    (and device). ValueError when the structures differ, TypeError when ``old``'s tuple type cannot hold them."""
    if is_tensor(old):
        return cast_tensor(new, old)
    if isinstance(old, (list, tuple)):
        if not isinstance(new, (list, tuple)) or len(new) != len(old):
            raise ValueError("the perturbed output has another structure")
        items = [cast_like(n, o, is_tensor, cast_tensor) for n, o in zip(new, old)]
        return items if isinstance(old, list) else rebuild(old, items, strict=True)
    if isinstance(old, dict):
        if not isinstance(new, dict) or set(new) != set(old):
            raise ValueError("the perturbed output has other keys")
        return {k: cast_like(new[k], old[k], is_tensor, cast_tensor) for k in old}
    return old


def is_view_of_input(out: Any, args: tuple, kwargs: Any, is_tensor: IsTensor, storage: Callable[[Any], int]) -> bool:
    """Every output tensor shares storage with an input: the call computed nothing (``storage``: the address of
    a tensor's storage, -1 when unknown)."""
    outs = tensors_of(out, is_tensor, [])
    if not outs:
        return False
    ins = {storage(t) for t in tensors_of((args, kwargs), is_tensor, [])}
    ins.discard(-1)
    ins.discard(0)
    return all(storage(t) in ins for t in outs)


def output_items(out: Any, is_tensor: IsTensor, values_field: bool = False, sizes: Tuple[type, ...] = ()
                 ) -> List[Tuple[int, Any]]:
    """(output_index, value) of every element of a result that is compared. ``values_field``: a tuple with a
    tensor ``.values`` (torch's ``(values, indices)`` results) compares its values only; ``sizes``: tuple types
    that are one value (``torch.Size``)."""
    items: List[Tuple[int, Any]] = []
    if values_field and isinstance(out, tuple):
        values = getattr(out, "values", None)
        if is_tensor(values):
            return [(0, values)]

    def flatten(v: Any) -> None:
        if isinstance(v, (list, tuple)) and not isinstance(v, sizes):
            for x in v:
                flatten(x)
        elif isinstance(v, dict):
            for x in v.values():
                flatten(x)
        else:
            items.append((len(items), v))

    if isinstance(out, (list, tuple, dict)):
        for v in (out.values() if isinstance(out, dict) else out):
            flatten(v)
        return items
    return [(0, out)]
