"""Top-level keys shared by jobs, in layers: every job < jobs that run a target < collection < dump-style.

    JobBase       task, comment, dump_path, output              (every job, analysis ones included)
    RunJob        + target, framework, seed                     (jobs that run training: collection, monitor)
    CollectionJob + rank, step                                  (statistics ... grad_probe)
    DumpJob       + level, async_dump, precision                (statistics, tensor, overflow_check, free_benchmark)

Each concrete job narrows `task` to its literal (the union's discriminator), narrows `level` to the levels the
task supports, and adds its section named after the task.
"""

from typing import Any, ClassVar, Dict, Literal, Optional, Tuple, get_args

from pydantic import ValidationInfo, field_validator, model_validator

from .base import ConfigModel
from .errors import warn_from_context
from .output import OutputSpec
from .schema_rules import add_rules, inside, note, nullable
from .target import TargetSpec, expand_target_shorthand, target_field_schema
from .types import RankList, config_error, field

__all__ = ["l2_message", "ALL_LEVELS", "MAX_COMMENT_CHARS", "LEVEL_NOTES", "JobBase", "RunJob", "CollectionJob", "DumpJob", "level_field",
           "section_field"]

ALL_LEVELS = ("L0", "L1", "mix", "L2", "debug")
LEVEL_NOTES = {
    "L0": "module level: hooks on every submodule (needs the model)",
    "L1": "API level: every torch/mindspore API call",
    "mix": "L0 and L1 together, APIs placed inside their modules",
    "L2": "kernels of compiled (graph-mode) execution: MindSpore only; not available with PyTorch",
    "debug": "no hooks: only what the script passes to save(); statistics and tensor tasks only",
}



def l2_message(framework: str = "auto") -> str:
    """Why a level L2 job does not run, and what to use instead (one line; the same words at load and at run)."""
    pytorch = ("L2 (kernel dump through the device runtime) is not offered by probe-tui: use level L1 (every "
               "API call, forward and backward; task tensor saves the real tensors, 'list' narrows them) or mix "
               "(the APIs inside their modules)")
    mindspore = ("L2 (MindSpore graph-mode kernels) runs for statistics, tensor and overflow_check under "
                 "`probe-tui run` only (not from PrecisionDebugger): docs/MINDSPORE.md")
    if framework == "pytorch":
        return pytorch
    if framework == "mindspore":
        return mindspore
    return f"{pytorch}; {mindspore}"


# The comment is copied into run.json and the store's metadata; a longer one is refused (exit 2), not cut.
MAX_COMMENT_CHARS = 10_000


class JobBase(ConfigModel):
    """Keys every job has."""

    foreign_scope: ClassVar[Tuple[str, ...]] = ("job",)

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        required = schema.setdefault("required", [])
        if "task" not in required:
            required.insert(0, "task")
        schema.setdefault("properties", {})["_comment"] = {
            "description": "msprobe's spelling of comment, used when comment is absent (then ignored)."}
        add_rules(schema, {"if": {"required": ["comment"]}, "else": inside(
            ["_comment"], {"type": ["string", "null"], "maxLength": MAX_COMMENT_CHARS})})
        add_rules(schema, inside(["dump_path"], {"pattern": "^[^\\x00]*$"}))
        note(schema, "a config file is at most 4 MiB, nests at most 64 levels and its integers have at most 100 "
                     "digits; an integer field takes no fractional number (3.0 is refused); a rank or step range "
                     "'a-b' needs a <= b; dump_path holds at most 4095 bytes and each of its components at most 255; the loader also takes msprobe's shapes and keys (its separate monitor "
                     "and compare files, a config without task, msprobe-only keys with a warning, the sections of "
                     "other tasks beside this one).")

    task: str = field(..., "What this job does; selects the section that holds its options.")
    comment: Optional[str] = field(None, "Free text for people reading the file; ignored by the tool "
                                         "(`_comment` is accepted too). At most 10,000 characters: it is stored "
                                         "with every run.", advanced=True, max_length=MAX_COMMENT_CHARS)
    dump_path: str = field(
        "./probe_dump", "Folder that receives this job's run folders: each run writes <dump_path>/<run-id>/ "
                        "and updates <dump_path>/latest; earlier runs are never overwritten.", min_length=1)
    output: OutputSpec = field(default_factory=OutputSpec,
                               description="How the HDF5 store is written: compression, disk budget, store mode.",
                               advanced=True)

    @classmethod
    def task_name(cls) -> str:
        return cls.model_fields["task"].default

    @model_validator(mode="before")
    @classmethod
    def _normalise_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "_comment" in data and "comment" not in data:
            data["comment"] = data.pop("_comment")
        section = cls.task_name() if "task" in cls.model_fields else None
        if section and section in cls.model_fields and section in data and data[section] is None:
            data[section] = {}
        return data

    @field_validator("dump_path")
    @classmethod
    def _dump_path_is_a_path(cls, value: str) -> str:
        """What no file system takes is refused here, not by a traceback when the run creates the folder."""
        if "\x00" in value:
            raise config_error("contains a NUL byte, which no path can hold")
        encoded = value.encode("utf-8", "surrogatepass")
        if len(encoded) > _PATH_MAX:
            raise config_error(f"{len(encoded)} bytes long; paths hold at most {_PATH_MAX}")
        for part in value.split("/"):
            size = len(part.encode("utf-8", "surrogatepass"))
            if size > _NAME_MAX:
                raise config_error(f"a component of {size} bytes ({part[:20]}...); file names hold at most "
                                   f"{_NAME_MAX}")
        return value


#: Linux limits (limits.h): a path component's bytes, a whole path's bytes.
_NAME_MAX = 255
_PATH_MAX = 4095


class RunJob(JobBase):
    """Jobs that run training (the demo, a script, a callable) under instrumentation."""

    target: Optional[TargetSpec] = field(
        None, 'What to run with `probe-tui --run`: {"demo": {...knobs}} (or just "demo"), {"script": '
              '"train.py", "args": [...]}, or {"callable": "pkg.module:function"}. Not needed when the script '
              'itself uses the in-script API.', json_schema_extra=target_field_schema)
    framework: Literal["pytorch", "mindspore", "auto"] = field(
        "auto", "Framework to instrument. auto: the one the target uses (the demo runs on PyTorch when it is "
                "installed, else MindSpore).")
    seed: Optional[int] = field(
        None, "If set, seed every generator (python, numpy, the framework) before the target starts and record "
              "it in the run metadata, like msprobe's seed_all.", ge=0, lt=2 ** 32, advanced=True)

    @field_validator("target", mode="before")
    @classmethod
    def _target_shorthand(cls, value: Any) -> Any:
        return expand_target_shorthand(value)


class CollectionJob(RunJob):
    """Jobs that select ranks and steps."""

    rank: RankList = field(
        default_factory=list,
        description='Ranks to capture: integers and inclusive ranges such as [0, "4-6"]; empty = every rank. '
                    "Normalised to a sorted list without duplicates.")
    step: RankList = field(
        default_factory=list,
        description='Steps to capture (0-based): integers and inclusive ranges such as [0, "2-3"]; empty = '
                    "every step. After the last listed step the tool turns itself off.")


class DumpJob(CollectionJob):
    """The dump-style tasks: a capture level, async mode and statistic precision."""

    level: str = field("L1", "Capture level.")
    async_dump: bool = field(
        False, "Keep captured data on the device and write it at step end, without a host sync per tensor "
               "(faster, uses device memory). statistics and tensor only; the tensor task then needs a 'list'; "
               "not with summary_mode md5 or hash.", advanced=True)
    precision: Literal["low", "high"] = field(
        "low", "Statistic precision: low computes in the tensor's dtype; high computes in float32 or wider "
               "(float64 stays float64, integers are summed exactly).", advanced=True)

    @classmethod
    def allowed_levels(cls) -> Tuple[str, ...]:
        return tuple(get_args(cls.model_fields["level"].annotation)) or ALL_LEVELS

    @field_validator("level", mode="before")
    @classmethod
    def _level_for_task(cls, value: Any) -> Any:
        allowed = cls.allowed_levels()
        if isinstance(value, str) and value in ALL_LEVELS and value not in allowed:
            listed = ", ".join(allowed)
            raise config_error(f"level {value} is not available for task {cls.task_name()} (use {listed})",
                               f"{value} = {LEVEL_NOTES[value]}")
        return value

    def section(self) -> Any:
        return getattr(self, self.task)

    def _warn(self, info: ValidationInfo, path: str, message: str) -> None:
        warn_from_context(info.context)(path, message)


def level_field(default: str, levels: Tuple[str, ...]) -> Any:
    lines = "; ".join(f"{lv}: {LEVEL_NOTES[lv]}" for lv in levels)
    return field(default, f"Capture level. {lines}.")


def section_field(model: type, description: str) -> Any:
    """A task's own section; null reads as the defaults."""
    return field(default_factory=model, description=description, json_schema_extra=nullable)
