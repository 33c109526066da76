"""statistics, tensor and overflow_check jobs, with the rules that tie the level to the section."""

from typing import Any, ClassVar, Dict, Literal, Tuple, get_args

from pydantic import ValidationInfo, field_validator, model_validator

from .base import ConfigModel
from .common import DumpJob, l2_message, level_field, section_field
from .dump_sections import (
    API_NAME,
    MODULE_NAME,
    DumpSection,
    StatisticsSection,
    TensorSection,
    check_scope_names,
)
from .errors import RuleCollector
from .schema_rules import add_rules, inside, is_true, when
from .types import config_error, field

__all__ = ["StatisticsJob", "TensorJob", "OverflowCheckSection", "OverflowCheckJob"]

# L2 (msprobe's MindSpore static-graph kernel level) loads for the three tasks; the run refuses it where it is not
# available (engines/task.py ``check_level``: PyTorch), as the framework is known only once the target is read.
StatisticsLevel = Literal["L0", "L1", "mix", "L2", "debug"]
TensorLevel = Literal["L0", "L1", "mix", "L2", "debug"]
OverflowLevel = Literal["L0", "L1", "mix", "L2"]
STATISTICS_LEVELS: Tuple[str, ...] = get_args(StatisticsLevel)
TENSOR_LEVELS: Tuple[str, ...] = get_args(TensorLevel)
OVERFLOW_LEVELS: Tuple[str, ...] = get_args(OverflowLevel)


def check_dump_rules(job: DumpJob, section: DumpSection, info: ValidationInfo) -> None:
    """Rules of docs/reference/msprobe-tasks.md §1.2/§1.4/§1.5 that need both the level and the section."""
    rules = RuleCollector()
    name = job.task
    if section.scope:
        if job.level == "L2":
            rules.add(f"{name}.scope", "is not allowed at level L2", "name the one API in 'list' instead")
        elif job.level != "debug":
            for index, message, hint in check_scope_names(section.scope, job.level) or []:
                rules.add(f"{name}.scope[{index}]", message, hint)
    if job.async_dump:
        if section.summary_mode in ("md5", "hash"):
            rules.add(f"{name}.summary_mode", f"{section.summary_mode} needs a host copy of every tensor and "
                      "cannot run with async_dump", 'use "xor" (computed on the device) or async_dump false')
        if job.level == "L2":
            rules.add("async_dump", "does not apply to the L2 kernel dump")
        if name == "tensor" and job.level not in ("debug", "L2") and not section.list:
            rules.add("tensor.list", "must not be empty when async_dump is true: every tensor would be held "
                      "on the device until the step ends", "list the APIs or modules to save")
    rules.raise_if_any()
    if job.level == "L2":
        job._warn(info, "level", l2_message())
    if job.level == "debug":
        for key in ("scope", "list", "tensor_list"):
            if getattr(section, key, None):
                job._warn(info, f"{name}.{key}", "has no effect at level debug (only save() calls are recorded)")


def _level_is(*levels: str) -> Dict[str, Any]:
    """The job's level is one of ``levels``; an absent level is the default L1."""
    condition: Dict[str, Any] = {"properties": {"level": {"enum": list(levels)}}}
    if "L1" not in levels:
        condition["required"] = ["level"]
    return condition


def dump_schema_rules(schema: Dict[str, Any], task: str, levels: Tuple[str, ...]) -> None:
    """`check_dump_rules` as JSON Schema: scope names per level, no scope at L2, async_dump's limits."""
    scope_items = {"L1": {"pattern": API_NAME.pattern}, "L0": {"pattern": MODULE_NAME.pattern},
                   "mix": {"anyOf": [{"pattern": API_NAME.pattern}, {"pattern": MODULE_NAME.pattern}]}}
    rules = [when(_level_is(level), inside([task, "scope"], {"items": items}))
             for level, items in scope_items.items() if level in levels]
    with_list = {"required": [task], "properties": {task: {"type": "object", "required": ["list"],
                                                           "properties": {"list": {"minItems": 1}}}}}
    if "L2" in levels:
        rules.append(when(_level_is("L2"), inside([task, "scope"], {"maxItems": 0})))
    checksum = {"anyOf": [{"enum": ["md5", "hash"]}, {"type": "array", "contains": {"enum": ["md5", "hash"]}}]}
    async_rules: Dict[str, Any] = {"allOf": [
        inside([task, "summary_mode"], {"not": checksum}),
        {"not": _level_is("L2")},
    ]}
    rules.append(when(is_true("async_dump"), async_rules))
    if task == "tensor":
        rules.append(when({"allOf": [is_true("async_dump"), _level_is("L0", "L1", "mix")]}, with_list))
    add_rules(schema, *rules)


class _DumpTaskJob(DumpJob):
    """statistics and tensor: the dump rules (`check_dump_rules`) on the job's section (named as its task) and
    levels."""

    LEVELS: ClassVar[Tuple[str, ...]]

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        super().json_schema_rules(schema)
        dump_schema_rules(schema, cls.model_fields["task"].default, cls.LEVELS)

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> "_DumpTaskJob":
        check_dump_rules(self, getattr(self, self.task), info)
        return self


class StatisticsJob(_DumpTaskJob):
    """Capture statistics (max, min, mean, norm; optionally checksums) of every tensor at API and/or module level."""

    LEVELS: ClassVar[Tuple[str, ...]] = STATISTICS_LEVELS

    task: Literal["statistics"] = field("statistics", "Capture per-tensor statistics.")
    level: StatisticsLevel = level_field("L1", STATISTICS_LEVELS)
    statistics: StatisticsSection = section_field(StatisticsSection, "Options of the statistics task.")


class TensorJob(_DumpTaskJob):
    """Save real tensors (plus their statistics) for the selected APIs and modules."""

    LEVELS: ClassVar[Tuple[str, ...]] = TENSOR_LEVELS

    task: Literal["tensor"] = field("tensor", "Save real tensors.")
    level: TensorLevel = level_field("L1", TENSOR_LEVELS)
    tensor: TensorSection = section_field(TensorSection, "Options of the tensor task.")


class OverflowCheckSection(ConfigModel):
    foreign_scope = ("overflow_check",)

    overflow_nums: int = field(
        1, "Stop after this many overflowing API/module calls have been recorded; -1 = never stop.",
        json_schema_extra={"anyOf": [{"const": -1}, {"minimum": 1}]})

    @field_validator("overflow_nums")
    @classmethod
    def _minus_one_or_positive(cls, value: int) -> int:
        if value != -1 and value < 1:
            raise config_error(f"must be -1 (no limit) or a positive integer (got {value})")
        return value


class OverflowCheckJob(DumpJob):
    """Find the calls whose outputs (or inputs) hold inf or nan, and keep their tensors."""

    task: Literal["overflow_check"] = field("overflow_check", "Detect inf/nan overflows.")
    level: OverflowLevel = level_field("L1", OVERFLOW_LEVELS)
    overflow_check: OverflowCheckSection = section_field(OverflowCheckSection, "Options of the overflow check.")

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> "OverflowCheckJob":
        if self.async_dump:
            self._warn(info, "async_dump", "has no effect on overflow_check (statistics and tensor only)")
        if self.level == "L2":
            self._warn(info, "level", l2_message())
        return self
