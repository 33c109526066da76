"""grad_probe: per-parameter gradient summaries (and sign maps) at every optimizer step (docs/reference/msprobe-tasks.md §9)."""

import math
from typing import Annotated, Any, Dict, List, Literal

from pydantic import AfterValidator, BeforeValidator, PlainValidator, WithJsonSchema, field_validator

from .base import ConfigModel
from .common import CollectionJob, section_field
from .errors import echo
from .schema_rules import NON_BLANK, items_pattern, note
from .types import config_error, field

__all__ = ["GradProbeSection", "GradProbeJob"]

INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


def _bound(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise config_error(f"{echo(value)} is not a number", "bounds are numbers such as -1, 0, 0.5")
    if isinstance(value, float) and not math.isfinite(value):
        raise config_error(f"{echo(value)} is not a finite number")
    if not INT64_MIN <= value <= INT64_MAX:
        raise config_error(f"{echo(value)} is out of the int64 range [-2^63, 2^63-1]")
    return value


def _bounds_list(value: Any) -> Any:
    if not isinstance(value, list):
        raise config_error(f"must be a list of numbers (got {echo(value)})", "for example [-1, 0, 1]")
    return value


def _ascending(values: List[float]) -> List[float]:
    if not values:
        raise config_error("needs at least one boundary", "for example [-1, 0, 1]")
    for i in range(1, len(values)):
        if not values[i] > values[i - 1]:
            raise config_error(f"must be strictly ascending: bounds[{i}] = {echo(values[i])} is not greater than "
                               f"bounds[{i - 1}] = {echo(values[i - 1])}")
    return values


Bounds = Annotated[
    List[Annotated[Any, PlainValidator(_bound)]],
    BeforeValidator(_bounds_list),
    AfterValidator(_ascending),
    WithJsonSchema({"type": "array", "minItems": 1,
                    "items": {"type": "number", "minimum": INT64_MIN, "maximum": INT64_MAX},
                    "$comment": "The bounds must be strictly ascending, which JSON Schema cannot say."}),
]


class GradProbeSection(ConfigModel):
    grad_level: Literal["L0", "L1", "L2"] = field(
        "L1", "Detail per parameter. L0: max, min, norm, shape and a CRC-32 of the fp32 gradient; L1: max, min, "
              "norm, shape and the sign map (grad > 0); L2: L1 plus the fraction of elements in each bounds "
              "interval and the fraction of exact zeros.")
    param_list: List[str] = field(
        default_factory=list,
        description="Exact parameter names (as named_parameters() gives them) to watch; empty = all.",
        json_schema_extra=items_pattern(NON_BLANK))
    bounds: Bounds = field(
        default_factory=lambda: [-1, 0, 1],
        description="Strictly ascending interval boundaries for the L2 distribution: (-inf, b0], (b0, b1], ..., "
                    "(bn, inf).")

    export_csv: bool = field(
        False, "Also write msprobe's grad_summary_{step}.csv per rank next to the HDF5 store.")

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        note(schema, "bounds are strictly ascending.")

    @field_validator("param_list")
    @classmethod
    def _names(cls, value: List[str]) -> List[str]:
        for i, name in enumerate(value):
            if not name.strip():
                raise config_error(f"element [{i}] is an empty name")
        return value


class GradProbeJob(CollectionJob):
    """Summarise every parameter's gradient at each optimizer step (steps count optimizer.step calls)."""

    foreign_scope = ("job", "no_capture_level")

    task: Literal["grad_probe"] = field("grad_probe", "Summarise parameter gradients per optimizer step.")
    grad_probe: GradProbeSection = section_field(GradProbeSection, "Options of grad_probe.")
