"""The base of every config model: strict types, no silent extras.

Strict mode means booleans are booleans (`"true"` is an error, not True), integers are integers (`3.0` and `"3"`
are errors), and numbers never come from strings. Unknown keys are found before pydantic runs, by
`schemas.keys.check_keys`, which knows msprobe's foreign keys and suggests the closest real key;
`extra="forbid"` stays as the backstop for models built directly in Python.
"""

from typing import Any, ClassVar, Dict, Tuple

from pydantic import BaseModel, ConfigDict

__all__ = ["ConfigModel"]


def _schema_rules(schema: Dict[str, Any], cls: type) -> None:
    """Pydantic's model-level schema hook: the model's own `json_schema_rules` (see `schemas.schema_rules`)."""
    rules = getattr(cls, "json_schema_rules", None)
    if rules is not None:
        rules(schema)


class ConfigModel(BaseModel):
    # defer_build: a model's validator and serializer are built at its first use, not when its class is defined;
    # a run validates one task's models, and building all of them cost a debugged training process ~2 MB of
    # resident memory (issue 21, docs/CAPTURE.md "Memory (issue 21)").
    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, json_schema_extra=_schema_rules,
                              defer_build=True)

    # Scopes of `schemas.foreign.FOREIGN_KEYS` whose keys may appear in this object: msprobe keys we accept with
    # one warning each and drop. Empty: none.
    foreign_scope: ClassVar[Tuple[str, ...]] = ()
