"""Text <-> value conversions for the form's inputs.

A control holds text; the config holds JSON values. Conversions are lenient on purpose: text that does not fit
the field's type is passed on as text, so that the schema's own validation reports it at the field with the same
message as ``probe-tui validate``.
"""

import json
from typing import Any, List, Sequence, Tuple

_TRUE = {"true", "yes", "on"}
_FALSE = {"false", "no", "off"}


def parse_scalar(text: str, types: Sequence[type]) -> Any:
    """Turn the text of an input into the first type of ``types`` it fits (bool, int, float, str order)."""
    text = text.strip()
    low = text.lower()
    if bool in types and low in _TRUE | _FALSE:
        return low in _TRUE
    if int in types:
        try:
            return int(text)
        except ValueError:
            pass
    if float in types:
        try:
            return float(text)
        except ValueError:
            pass
    return text


def format_scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def split_items(text: str) -> List[str]:
    """Comma-separated items, blanks dropped (``"0, 2-3,"`` -> ``["0", "2-3"]``)."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_list(text: str, item_types: Sequence[type]) -> Any:
    """A list from comma-separated text, or from a JSON list when the text starts with ``[``.

    Raises ValueError for a JSON list that does not parse.
    """
    text = text.strip()
    if text.startswith("["):
        value = parse_json(text)
        if not isinstance(value, list):
            raise ValueError("expected a JSON list")
        return value
    return [parse_scalar(item, item_types) for item in split_items(text)]


def format_list(values: Any) -> str:
    """The text an input shows for a list: comma-separated, or JSON when an item would not survive that."""
    if values is None:
        return ""
    if not isinstance(values, (list, tuple)):
        return format_scalar(values)
    items = list(values)
    if any(not isinstance(v, (str, int, float, bool)) or (isinstance(v, str) and ("," in v or v != v.strip()))
           for v in items):
        return json.dumps(items)
    return ", ".join(format_scalar(v) for v in items)


def parse_json(text: str) -> Any:
    """JSON text to a value; ValueError with line/column on bad JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None


def format_json(value: Any) -> str:
    return "" if value is None else json.dumps(value)


def is_blank(text: str) -> bool:
    return not text.strip()


def split_path(path: str) -> Tuple[str, ...]:
    """``statistics.list[1]`` -> ``("statistics", "list", "[1]")``: an error path as the form's path parts."""
    parts: List[str] = []
    for dotted in path.split("."):
        while "[" in dotted:
            head, _, rest = dotted.partition("[")
            if head:
                parts.append(head)
            index, _, dotted = rest.partition("]")
            parts.append(f"[{index}]")
        if dotted:
            parts.append(dotted)
    return tuple(parts)
