"""Task sections of the dump-style tasks (statistics, tensor): scope, list, data_mode, summary_mode, filters.

Field rules follow docs/reference/msprobe-tasks.md §1.5; the level-dependent rules (scope names per level, L2,
async_dump) live on the job models, which know the level.
"""

import re
from typing import Any, Dict, List, Literal, Optional

from pydantic import field_validator

from .base import ConfigModel
from .errors import echo
from .schema_rules import NON_BLANK, items_pattern
from .types import config_error, field

__all__ = [
    "API_PREFIXES",
    "API_NAME",
    "MODULE_NAME",
    "DATA_MODES",
    "SUMMARY_MODES",
    "ApiFilter",
    "OnlineCheck",
    "DumpSection",
    "StatisticsSection",
    "TensorSection",
]

# msprobe's prefixes plus MindSpeed and MintDistributed, which msprobe forgets (docs/reference/msprobe-tasks.md §13 #18).
API_PREFIXES = ("Distributed", "Functional", "Torch", "Tensor", "Mint", "MintFunctional", "Primitive", "Aten",
                "VF", "NPU", "Jit", "MindSpeed", "MintDistributed")
API_NAME = re.compile(r"^(%s)\..+\.[0-9]+\.(forward|backward)$" % "|".join(API_PREFIXES))
MODULE_NAME = re.compile(r"^(Cell|Module)\..+\.(forward|backward)\.[0-9]+$")  # ASCII digits, like rank strings

DATA_MODES = ("all", "forward", "backward", "input", "output")
SUMMARY_MODES = ("statistics", "md5", "xor", "hash")


def _data_mode_schema(schema: Dict[str, Any]) -> None:
    """["all"] alone, or 1-4 distinct values of forward/backward/input/output; a single string is read as a list."""
    for key in ("type", "items"):
        schema.pop(key, None)
    parts = [m for m in DATA_MODES if m != "all"]
    schema["anyOf"] = [
        {"type": "array", "items": {"const": "all"}, "minItems": 1, "maxItems": 1},
        {"type": "array", "items": {"enum": parts}, "minItems": 1, "maxItems": 4, "uniqueItems": True},
        {"type": "string", "enum": list(DATA_MODES)},
    ]


def _summary_mode_schema(schema: Dict[str, Any]) -> None:
    """One mode, or MindSpore static graph's list of statistic names (md5 when it names md5 or hash)."""
    schema.pop("type", None)
    modes = schema.pop("enum", list(SUMMARY_MODES))
    schema["anyOf"] = [{"type": "string", "enum": modes}, {"type": "array", "items": {"type": "string"}}]


def _nonempty_strings(values: List[str], what: str) -> List[str]:
    for i, value in enumerate(values):
        if not value.strip():
            raise config_error(f"element [{i}] is an empty {what}")
    return values


class ApiFilter(ConfigModel):
    """Our extension: substring patterns that opt API names in or out of API-level (L1/mix) capture."""

    allow: List[str] = field(
        default_factory=list,
        description="Capture APIs whose name contains one of these, even those the default set leaves out "
                    "(e.g. view-like or metadata calls).")
    deny: List[str] = field(
        default_factory=list,
        description="Never capture APIs whose name contains one of these; deny wins over allow.")


class OnlineCheck(ConfigModel):
    """The online check (docs/ACC_CHECK.md, "Online check"): each selected API call re-run on the reference during
    training and judged with acc_check's standards; msprobe's online pre-check and online dispatch, in-process."""

    enabled: bool = field(False, description="Re-run each selected API call on the reference as training runs "
                                             "(levels L1 and mix) and report the failing ones live.")
    api_list: List[str] = field(
        default_factory=list,
        description="Check only APIs whose name contains one of these substrings (Functional.softmax, "
                    "naive_softmax). Empty: every captured API (the whole network; slow).",
        json_schema_extra=items_pattern(NON_BLANK))
    reference: Literal["cpu"] = field(
        "cpu", description="Where the reference runs: the CPU, in float64 for float32 calls and float32 for "
                           "float16/bfloat16 ones (acc_check's reference).")
    level: Literal["api", "aten"] = field(
        "api", description="What is re-run: api, each captured API call (Functional.softmax; levels L1 and mix); "
                           "aten, each aten op at the dispatch level (Aten.gelu.default, the backward's ops "
                           "included; any level; PyTorch only), msprobe's online dispatch.")

    @field_validator("api_list")
    @classmethod
    def _api_list_items(cls, value: List[str]) -> List[str]:
        return _nonempty_strings(value, "pattern")


class DumpSection(ConfigModel):
    """Fields shared by the statistics and tensor sections."""

    foreign_scope = ("dump_section",)

    scope: List[str] = field(
        default_factory=list,
        description="Range to capture: exactly two full names [start, end]; everything executed from the first "
                    "call of start to the call of end is captured, in order. At L1 both are API names "
                    "(Functional.linear.0.forward), at L0 module names (Module.fc.Linear.forward.0), at mix "
                    "either. Empty: no range limit.",
        json_schema_extra={"maxItems": 2, "anyOf": [{"maxItems": 0}, {"minItems": 2}],
                           "items": {"type": "string", "pattern": NON_BLANK}})
    list: List[str] = field(
        default_factory=list,
        description='Capture only names containing one of these substrings ("relu" matches Functional.relu.0.'
                    'forward and Tensor.relu_.3.backward); a full name selects one call; at mix a module name '
                    'captures everything run inside it. Empty: everything.',
        json_schema_extra=items_pattern(NON_BLANK))
    data_mode: List[Literal["all", "forward", "backward", "input", "output"]] = field(
        default_factory=lambda: ["all"],
        description='What to keep: "all", or a combination of forward/backward and input/output (an axis left '
                    'out means both): ["forward", "input"] keeps forward inputs only. Forward-only also skips '
                    'parameter gradients.', json_schema_extra=_data_mode_schema)
    summary_mode: Literal["statistics", "md5", "xor", "hash"] = field(
        "statistics",
        description="Per-tensor summary. statistics: max, min, mean, L2 norm. md5: those plus a CRC-32 of the raw "
                    "contiguous bytes (8 hex digits; msprobe calls it md5). xor: those plus a 64-bit XOR fold of "
                    "the raw bytes computed on the device (cheap; 0-dim tensors get a checksum too). hash: "
                    "statistics plus CRC-32 plus a framework-neutral hash of the values (little-endian, bf16 kept "
                    "as its 16-bit pattern) that matches across PyTorch and MindSpore.",
        json_schema_extra=_summary_mode_schema)
    apis: ApiFilter = field(
        default_factory=ApiFilter,
        description="Our API allow/deny filter for L1/mix capture (substring patterns).", advanced=True)
    online_check: OnlineCheck = field(
        default_factory=OnlineCheck,
        description="Re-run selected API calls on the CPU reference during training and report those that fail "
                    "acc_check's standards (msprobe's online_run_ut / online dispatch).", advanced=True)

    @field_validator("data_mode", mode="before")
    @classmethod
    def _data_mode_shape(cls, value: Any) -> Any:
        if isinstance(value, str):  # msprobe's docs call it a str; accept one value
            return [value]
        return value

    @field_validator("data_mode")
    @classmethod
    def _data_mode_rules(cls, value: List[str]) -> List[str]:
        if not value:
            raise config_error("must not be empty", 'use ["all"] to keep everything')
        if "all" in value and len(value) > 1:
            raise config_error(f"'all' cannot be combined with other values (got {value})",
                               'use ["all"] alone, or list only what you need')
        if len(value) > 4:
            raise config_error(f"takes at most 4 values (got {len(value)})")
        seen = set()
        for item in value:
            if item in seen:
                raise config_error(f"{echo(item)} is listed twice")
            seen.add(item)
        return value

    @field_validator("summary_mode", mode="before")
    @classmethod
    def _summary_list(cls, value: Any) -> Any:
        # MindSpore static graph takes a list of statistic names here; we compute the full set anyway.
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return "md5" if any(v in ("md5", "hash") for v in value) else "statistics"
        return value

    @field_validator("scope")
    @classmethod
    def _scope_shape(cls, value: List[str]) -> List[str]:
        if value and len(value) != 2:
            raise config_error(f"must hold exactly two names [start, end] (got {len(value)})",
                               "for a list of names to capture use 'list'")
        return _nonempty_strings(value, "name")

    @field_validator("list")
    @classmethod
    def _list_items(cls, value: List[str]) -> List[str]:
        return _nonempty_strings(value, "pattern")


class StatisticsSection(DumpSection):
    tensor_list: List[str] = field(
        default_factory=list,
        description="Also save real tensors for names containing one of these substrings (statistics and tensors "
                    "side by side). Levels L0, L1, mix.", advanced=True,
        json_schema_extra=items_pattern(NON_BLANK))

    @field_validator("tensor_list")
    @classmethod
    def _tensor_list_items(cls, value: List[str]) -> List[str]:
        return _nonempty_strings(value, "pattern")


class TensorSection(DumpSection):
    pass


def check_scope_names(scope: List[str], level: str) -> Optional[List[tuple]]:
    """Problems with scope endpoints for a level, as (index, message, hint); None when fine."""
    problems = []
    kinds = []
    for i, name in enumerate(scope):
        is_api, is_module = bool(API_NAME.match(name)), bool(MODULE_NAME.match(name))
        kinds.append("api" if is_api else "module" if is_module else None)
        if level == "L1" and not is_api:
            problems.append((i, f"{echo(name)} is not an API name, which level L1 needs",
                             "API names look like Functional.linear.0.forward"))
        elif level == "L0" and not is_module:
            problems.append((i, f"{echo(name)} is not a module name, which level L0 needs",
                             "module names look like Module.layers.0.Block.forward.0"))
        elif level == "mix" and not (is_api or is_module):
            problems.append((i, f"{echo(name)} is neither an API nor a module name",
                             "e.g. Functional.linear.0.forward or Module.fc.Linear.forward.0"))
    return problems or None
