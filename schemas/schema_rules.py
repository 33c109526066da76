"""Helpers that write the validators' cross-field rules into the exported JSON Schema.

A model lists its rules in `json_schema_rules(schema)` (a classmethod, called by `ConfigModel`'s schema hook):
`allOf` entries built from `given`, `when` and `inside`, and `note(...)` for the rules JSON Schema cannot express
(arithmetic between fields, ordering), which go into the model's description so a schema user still reads them.
A key left out counts as its default, as in the validators: `{"properties": {"level": {"const": "L1"}}}` also holds
when `level` is absent, which is what the default L1 needs; use `given(key)` to require the key.
"""

from typing import Any, Dict, Iterable

__all__ = ["NON_BLANK", "given", "is_true", "when", "inside", "add_rules", "note", "items_pattern", "nullable"]

NON_BLANK = r"\S"
"""A string holding something other than whitespace (the validators' `value.strip()` test)."""

Schema = Dict[str, Any]


def given(key: str) -> Schema:
    """`key` is present and not null."""
    return {"required": [key], "properties": {key: {"not": {"type": "null"}}}}


def is_true(key: str) -> Schema:
    return {"required": [key], "properties": {key: {"const": True}}}


def when(condition: Schema, then: Schema) -> Schema:
    return {"if": condition, "then": then}


def inside(path: Iterable[str], schema: Schema) -> Schema:
    """`schema` applied to the value at `path` (object keys), when it is there."""
    for key in reversed(list(path)):
        schema = {"properties": {key: schema}}
    return schema


def add_rules(schema: Schema, *rules: Schema) -> None:
    schema.setdefault("allOf", []).extend(rules)


def note(schema: Schema, *rules: str) -> None:
    """Rules the validator checks that the schema cannot: appended to the description."""
    text = " ".join(rules)
    base = schema.get("description", "").rstrip()
    schema["description"] = f"{base} Also checked by probe-tui, not by this schema: {text}".strip()


def items_pattern(pattern: str) -> Schema:
    """A field `json_schema_extra` (a dict, so the app still reads `advanced` beside it) for a list of strings
    whose every item matches `pattern`."""
    return {"items": {"type": "string", "pattern": pattern}}


def nullable(schema: Schema) -> None:
    """A field `json_schema_extra`: the value may also be null (the validator reads null as the default)."""
    if "$ref" in schema:
        schema["anyOf"] = [{"$ref": schema.pop("$ref")}, {"type": "null"}]
    elif "anyOf" in schema:
        schema["anyOf"].append({"type": "null"})
    else:
        inner = {k: schema.pop(k) for k in list(schema) if k not in ("title", "description", "default", "advanced")}
        schema["anyOf"] = [inner, {"type": "null"}]
