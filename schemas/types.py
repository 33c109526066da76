"""Reusable field types: rank/step lists with "a-b" ranges, byte sizes, and the field helper.

Every list of ranks or steps goes through `RankList`: ints and `"a"`/`"a-b"` strings, each checked on its own
(so the error names `rank[2]`), then flattened, sorted and deduplicated. Booleans are never numbers here.
"""

import re
from typing import Annotated, Any, Dict, List, Optional, Set, Tuple

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer, PlainValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

from .errors import echo

__all__ = [
    "RANK_STEP_MAX",
    "RankList",
    "parse_rank_item",
    "compact_ranks",
    "parse_size",
    "SizeBytes",
    "config_error",
    "field",
    "ADVANCED",
]

RANK_STEP_MAX = 1_000_000
MAX_LIST_LEN = 1_000_000
ADVANCED = {"advanced": True}


def config_error(message: str, hint: str = "") -> PydanticCustomError:
    """A field-level error with our own message (and hint) instead of pydantic's wording."""
    return PydanticCustomError("config_value", "{message}", {"message": message, "hint": hint})


def field(default: Any = ..., description: str = "", *, advanced: bool = False, **kwargs: Any) -> Any:
    """`Field` with a mandatory description; `advanced=True` marks fields the app folds away at first."""
    extra = kwargs.pop("json_schema_extra", None)
    if advanced:
        if callable(extra):
            inner = extra

            def extra(schema: Dict[str, Any]) -> None:
                inner(schema)
                schema.update(ADVANCED)
        else:
            extra = {**(extra or {}), **ADVANCED}
    if "default_factory" in kwargs:
        return Field(description=description, json_schema_extra=extra, **kwargs)
    return Field(default, description=description, json_schema_extra=extra, **kwargs)


# ---------------------------------------------------------------------------------------------- rank / step
# A rank/step string: "3" or "3-5", ASCII digits only (int() would also take "١-٣"), spaces or tabs around.
# The JSON Schema uses the strict form, which also encodes the bound 0..RANK_STEP_MAX; low <= high it cannot.
_LOOSE = re.compile(r"^[ \t]*([0-9]+)[ \t]*(?:-[ \t]*([0-9]+)[ \t]*)?$")
_NUMBER = r"[ \t]*0*([0-9]{1,6}|1000000)[ \t]*"
RANK_STRING_PATTERN = rf"^{_NUMBER}(-{_NUMBER})?$"
assert RANK_STEP_MAX == 1_000_000, "RANK_STRING_PATTERN spells out the bound"


def _bounded(n: int, text: str) -> int:
    if not 0 <= n <= RANK_STEP_MAX:
        raise config_error(f"{text} is out of range: values must lie in [0, {RANK_STEP_MAX}]")
    return n


def _digits(text: str, item: str) -> int:
    text = text.lstrip("0") or "0"
    if len(text) > len(str(RANK_STEP_MAX)):  # never int() thousands of digits
        raise config_error(f"{echo(item)} is out of range: values must lie in [0, {RANK_STEP_MAX}]")
    return _bounded(int(text), echo(item))


def parse_rank_item(item: Any) -> Tuple[int, int]:
    """One element of a rank/step list -> inclusive (low, high)."""
    if isinstance(item, bool):
        raise config_error(f"{str(item).lower()} is not a rank or step number",
                           'use an integer such as 3 or a range string such as "4-6"')
    if isinstance(item, int):
        if not 0 <= item <= RANK_STEP_MAX:
            raise config_error(f"{echo(item)} is out of range: values must lie in [0, {RANK_STEP_MAX}]")
        return item, item
    if isinstance(item, float):
        raise config_error(f"{echo(item)} is not an integer", 'use an integer such as 3 or a range such as "4-6"')
    if not isinstance(item, str):
        raise config_error(f"{echo(item)} must be an integer or a string like \"3\" or \"4-6\"")
    match = _LOOSE.match(item)
    if not match:
        if item.count("-") == 1:
            raise config_error(f"{echo(item)}: both ends of a range must be whole numbers (digits 0-9)",
                               'for example "3-5"')
        raise config_error(f"{echo(item)} is not a step/rank number or range",
                           'write "3" or an inclusive range "3-5"')
    low = _digits(match.group(1), item)
    high = low if match.group(2) is None else _digits(match.group(2), item)
    if low > high:
        raise config_error(f"{echo(item)}: the left end {low} is greater than the right end {high}",
                           f'write "{high}-{low}"')
    return low, high


def _none_to_empty(value: Any) -> Any:
    return [] if value is None else value


def _check_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise config_error(f"must be a list such as [0, \"2-3\"] (got {echo(value)})")
    if len(value) > MAX_LIST_LEN:
        raise config_error(f"has {len(value)} elements; at most {MAX_LIST_LEN} are allowed")
    return value


def _flatten(spans: List[Tuple[int, int]]) -> List[int]:
    values: Set[int] = set()
    for low, high in spans:
        values.update(range(low, high + 1))
    return sorted(values)


def compact_ranks(values: List[int]) -> List[Any]:
    """[1, 4, 5, 6] -> [1, "4-6"]: runs of three or more become range strings (how dumps store lists)."""
    out: List[Any] = []
    i = 0
    values = sorted(set(values))
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        if j - i >= 2:
            out.append(f"{values[i]}-{values[j]}")
        else:
            out.extend(values[i:j + 1])
        i = j + 1
    return out


_RANK_ITEM_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": RANK_STEP_MAX},
        {"type": "string", "pattern": RANK_STRING_PATTERN},
    ]
}

RankItem = Annotated[Any, PlainValidator(parse_rank_item)]

RankList = Annotated[
    List[RankItem],
    BeforeValidator(_check_list),
    BeforeValidator(_none_to_empty),
    AfterValidator(_flatten),
    PlainSerializer(compact_ranks, return_type=list),
    WithJsonSchema({"anyOf": [{"type": "array", "items": _RANK_ITEM_SCHEMA, "maxItems": MAX_LIST_LEN},
                              {"type": "null"}],
                    "$comment": 'A range "a-b" needs a <= b, which the pattern cannot say.'}),
]
"""A list of non-negative ints; input accepts ints and "a-b" ranges; empty means all."""


# ---------------------------------------------------------------------------------------------- byte sizes
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000 ** 2, "mb": 1000 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3,
    "t": 1000 ** 4, "tb": 1000 ** 4,
    "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "tib": 1024 ** 4,
}
# ASCII digits (float() would also read other scripts' digits), at most 30 before and after the point.
SIZE_PATTERN = r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?)\s*([KkMmGgTt](?:[Ii][Bb]|[Bb])?|[Bb])?\s*$"
_SIZE = re.compile(SIZE_PATTERN)
SIZE_SCHEMA = {
    "anyOf": [
        {"type": "integer", "minimum": 1},
        {"type": "string", "pattern": SIZE_PATTERN},
        {"type": "null"},
    ],
    "$comment": "A string size must come to at least one byte (\"0.1B\" does not), which the pattern cannot say.",
}


def parse_size(value: Any) -> Optional[int]:
    """Bytes as an int, or a string like "20GB" (powers of 1000) or "512MiB" (powers of 1024)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise config_error(f"{str(value).lower()} is not a size", 'give bytes as a number or a string like "20GB"')
    if isinstance(value, int):
        if value <= 0:
            raise config_error(f"must be a positive number of bytes (got {value})", "leave it out for no limit")
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        unit = (match.group(2) or "").lower() if match else None
        if match and unit in _UNITS:
            size = int(float(match.group(1)) * _UNITS[unit])
            if size <= 0:
                raise config_error(f"{echo(value)} is not a positive size")
            return size
        raise config_error(f"{echo(value)} is not a size", 'use bytes or a unit: "500MB", "20GB", "512MiB", "2TiB"')
    raise config_error(f"{echo(value)} is not a size", 'give bytes as a number or a string like "20GB"')


SizeBytes = Annotated[Optional[int], PlainValidator(parse_size), WithJsonSchema(SIZE_SCHEMA)]
"""A byte count: an int or a "20GB"/"512MiB" string, normalised to an int; None = unlimited."""
