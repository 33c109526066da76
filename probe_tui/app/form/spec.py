"""Describe a pydantic model's fields for the generated config form.

Pure introspection, no widgets: :func:`describe_model` turns each field of a pydantic v2 model into a
:class:`FieldSpec` saying which control edits it (a switch, a select, an input, a nested section, a list of
sections, a choice of variants) together with its help text, default, bounds and whether it is advanced
(``json_schema_extra={"advanced": True}``). A new schema field therefore appears in the app with no app change.
"""

import enum
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

MISSING: Any = PydanticUndefined
"""The default of a required field."""

# Field kinds, one per kind of control.
CONST = "const"  # a Literal with one value (the task discriminator): not shown, always written
BOOL = "bool"  # Switch
CHOICE = "choice"  # Select over Literal / Enum values
SCALAR = "scalar"  # Input; ``scalar_types`` says what the text may become
SCALAR_LIST = "scalar_list"  # Input of comma-separated items
MODEL = "model"  # nested section
MODEL_LIST = "model_list"  # list of nested sections with add/remove
UNION = "union"  # a select of variants, then the chosen variant's section
JSON = "json"  # anything else (dicts, nested lists): JSON text

_UNION_TYPES: Tuple[Any, ...] = (typing.Union,) + ((types.UnionType,) if hasattr(types, "UnionType") else ())
_SCALARS = (bool, int, float, str)


@dataclass
class FieldSpec:
    """How one model field is shown and edited."""

    name: str
    """Key in the config dict (the field's alias when it has one)."""
    kind: str
    description: str = ""
    default: Any = MISSING
    optional: bool = False
    """None is accepted (an empty control means "not set")."""
    advanced: bool = False
    choices: Tuple[Any, ...] = ()
    """CHOICE: the values to pick from; SCALAR_LIST: the values each item may take (when they are fixed)."""
    scalar_types: Tuple[type, ...] = ()
    """SCALAR / SCALAR_LIST: the scalar types the text may turn into (tried in the order bool, int, float, str)."""
    bounds: str = ""
    model: Optional[type] = None
    variants: Dict[str, type] = field(default_factory=dict)
    """UNION: variant label -> model."""
    discriminator: Optional[str] = None
    """UNION: the field whose Literal value names each variant."""

    @property
    def required(self) -> bool:
        return self.default is MISSING

    @property
    def has_default(self) -> bool:
        return self.default is not MISSING

    def default_text(self) -> str:
        """The default as a person reads it ("" when there is none or it is None)."""
        if not self.has_default or self.default is None or self.kind in (MODEL, UNION, MODEL_LIST):
            return ""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, enum.Enum):
            return str(self.default.value)
        if isinstance(self.default, (list, tuple)):
            return ", ".join(str(v) for v in self.default) if self.default else "empty"
        if isinstance(self.default, BaseModel):
            return ""
        return str(self.default)


def describe_model(model: type) -> List[FieldSpec]:
    """One :class:`FieldSpec` per field of ``model``, in declaration order."""
    return [describe_field(name, info) for name, info in model.model_fields.items()]


def describe_field(name: str, info: FieldInfo) -> FieldSpec:
    key = info.alias if isinstance(info.alias, str) and info.alias else name
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    default = info.get_default(call_default_factory=True)
    if isinstance(default, BaseModel):
        default = default.model_dump(mode="json", by_alias=True)
    spec = FieldSpec(
        name=key,
        kind=JSON,
        description=(info.description or "").strip(),
        default=default,
        advanced=bool(extra.get("advanced", False)),
        bounds=_bounds_text(info.metadata),
    )
    annotation, optional = _strip_optional(info.annotation)
    spec.optional = optional or default is None
    _classify(spec, annotation, info.discriminator if isinstance(info.discriminator, str) else None)
    return spec


def _classify(spec: FieldSpec, annotation: Any, discriminator: Optional[str]) -> None:
    annotation = _strip_annotated(annotation)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is bool:
        spec.kind = BOOL
    elif origin is typing.Literal:
        if len(args) == 1 and not spec.optional:
            spec.kind, spec.choices = CONST, args
        else:
            spec.kind, spec.choices = CHOICE, args
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        spec.kind, spec.choices = CHOICE, tuple(m.value for m in annotation)
    elif _is_model(annotation):
        spec.kind, spec.model = MODEL, annotation
    elif origin in (list, List, tuple, set, frozenset) or origin in (typing.Sequence,):
        item = _strip_annotated(args[0]) if args else Any
        item_types = _scalar_types(item)
        if _is_model(item):
            spec.kind, spec.model = MODEL_LIST, item
        elif item_types:
            spec.kind, spec.scalar_types = SCALAR_LIST, item_types
            if typing.get_origin(item) is typing.Literal:
                spec.choices = typing.get_args(item)
        elif item is Any:
            # Items with their own validator (rank/step lists: ints and "a-b" ranges): numbers stay numbers.
            spec.kind, spec.scalar_types = SCALAR_LIST, (int, float, str)
    elif origin in _UNION_TYPES:
        members = [_strip_annotated(a) for a in args]
        if all(_is_model(m) for m in members):
            spec.kind = UNION
            spec.discriminator = discriminator or _common_literal_field(members)
            spec.variants = {_variant_label(m, spec.discriminator): m for m in members}
        elif all(_scalar_types(m) for m in members):
            types_ = tuple(t for m in members for t in _scalar_types(m))
            spec.kind, spec.scalar_types = SCALAR, _ordered_unique(types_)
    else:
        scalar = _scalar_types(annotation)
        if scalar:
            spec.kind, spec.scalar_types = SCALAR, scalar


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _strip_optional(annotation: Any) -> Tuple[Any, bool]:
    annotation = _strip_annotated(annotation)
    if typing.get_origin(annotation) in _UNION_TYPES:
        args = typing.get_args(annotation)
        rest = tuple(a for a in args if a is not type(None))
        if len(rest) < len(args):
            if len(rest) == 1:
                return rest[0], True
            return typing.Union[rest], True  # type: ignore[return-value]
    return annotation, False


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _scalar_types(annotation: Any) -> Tuple[type, ...]:
    annotation = _strip_annotated(annotation)
    if annotation in _SCALARS:
        return (annotation,)
    if typing.get_origin(annotation) is typing.Literal:
        return _ordered_unique(tuple(type(a) for a in typing.get_args(annotation) if type(a) in _SCALARS))
    if typing.get_origin(annotation) in _UNION_TYPES:
        out: Tuple[type, ...] = ()
        for a in typing.get_args(annotation):
            sub = _scalar_types(a)
            if not sub:
                return ()
            out += sub
        return _ordered_unique(out)
    return ()


def _ordered_unique(values: Tuple[type, ...]) -> Tuple[type, ...]:
    return tuple(t for t in _SCALARS if t in values)


def _common_literal_field(models: List[type]) -> Optional[str]:
    """The field every member declares as a one-value Literal (the implicit discriminator)."""
    first = models[0].model_fields
    for name, info in first.items():
        if all(_literal_value(m, name) is not None for m in models):
            return info.alias if isinstance(info.alias, str) and info.alias else name
    return None


def _literal_value(model: type, name: str) -> Any:
    for fname, info in model.model_fields.items():
        if fname == name or info.alias == name:
            ann = _strip_annotated(info.annotation)
            if typing.get_origin(ann) is typing.Literal and len(typing.get_args(ann)) == 1:
                return typing.get_args(ann)[0]
    return None


def _variant_label(model: type, discriminator: Optional[str]) -> str:
    if discriminator:
        value = _literal_value(model, discriminator)
        if value is not None:
            return str(value)
    return model.model_config.get("title") or model.__name__


def _bounds_text(metadata: List[Any]) -> str:
    parts = []
    for m in metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"),
                           ("min_length", "min length"), ("max_length", "max length")):
            value = getattr(m, attr, None)
            if value is not None:
                parts.append(f"{sign} {value}")
    return ", ".join(parts)
