"""The diagnose job: from two runs (or two targets) to the operator that introduced their difference.

Stage 1 compares statistics and ranks suspects; stage 2 (unless `stats_only`) re-runs both targets capturing
real tensors only for the suspect region, one step, and ranks again (docs/DIAGNOSE.md).
"""

from typing import Any, Dict, Literal, Optional

from pydantic import field_validator, model_validator

from .base import ConfigModel
from .common import JobBase
from .errors import RuleCollector
from .schema_rules import add_rules, given
from .target import TargetSpec, expand_target_shorthand, target_field_schema
from .types import field

__all__ = ["DiagnoseSide", "DiagnoseSection", "DiagnoseJob"]


class DiagnoseSide(ConfigModel):
    """One side of a diagnose: exactly one of `path`, `config`, `target`."""

    path: Optional[str] = field(
        None, "An existing run or dump, read as it is: a run folder (or its `latest`), a rank folder, an msprobe "
              "dump.json or step folder. Stage 2 re-runs it only when it is one of our runs whose run.json "
              "records its target.", min_length=1)
    config: Optional[str] = field(
        None, "A statistics or tensor config file: its target, framework, seed and level are run.", min_length=1)
    target: Optional[TargetSpec] = field(
        None, 'A target to run, as a collection job\'s: {"demo": {...}} (or "demo"), {"script": "train.py", '
              '"args": [...]}, {"callable": "pkg.module:function"}.', json_schema_extra=target_field_schema)
    framework: Literal["pytorch", "mindspore", "auto"] = field(
        "auto", "Framework of a `target` side (auto: the one the target uses).", advanced=True)

    @field_validator("target", mode="before")
    @classmethod
    def _target_shorthand(cls, value: Any) -> Any:
        return expand_target_shorthand(value)

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        add_rules(schema, {"oneOf": [given("path"), given("config"), given("target")]})

    @model_validator(mode="after")
    def _exactly_one(self) -> "DiagnoseSide":
        rules = RuleCollector()
        chosen = [k for k in ("path", "config", "target") if getattr(self, k) is not None]
        if len(chosen) != 1:
            rules.add("", "a side needs exactly one of path, config, target (got {})".format(
                " and ".join(chosen) if chosen else "none"),
                'for example {"path": "./probe_dump/demo_fp32/latest"} or {"target": "demo"}')
        rules.raise_if_any()
        return self

    @property
    def kind(self) -> str:
        return "path" if self.path is not None else "config" if self.config is not None else "target"


class DiagnoseSection(ConfigModel):
    target: DiagnoseSide = field(..., "The side under test (msprobe's npu side).")
    golden: DiagnoseSide = field(..., "The reference side (msprobe's bench side).")
    stats_only: bool = field(
        False, "Stop after stage 1 (statistics): no re-run capturing tensors for the suspect region.")
    suspects: int = field(
        3, "How many top suspects stage 2 captures in tensors (with the ops that produced their inputs).", ge=1,
        le=50)
    level: Literal["L1", "mix"] = field(
        "mix", "Capture level of the runs diagnose makes: mix places every API call in its module (module paths, "
               "per-module shares of the error); L1 records API calls only.", advanced=True)
    steps: int = field(
        1, "Steps stage 1 captures from a target it runs (the first N; stage 2 captures one of them).", ge=1,
        le=1000, advanced=True)
    score_min: float = field(
        4.0, "Conclusive only when the top suspect adds at least this many times the error of its inputs (or "
             "what its dtypes explain).", gt=1, advanced=True)
    ratio_min: float = field(
        2.0, "Conclusive only when the top suspect's score is at least this many times the runner-up's.", ge=1,
        advanced=True)
    fuzzy_match: bool = field(
        True, "Match calls whose indices differ (compare's fuzzy_match). On by default: a fault that adds or "
              "removes calls (one kernel replaced by several ops) shifts the indices of every later call of the "
              "same APIs, and exact names then pair the wrong calls.", advanced=True)
    output_path: Optional[str] = field(
        None, "Folder for the result (verdict.json, the two compares, the runs diagnose made). Unset: a new run "
              "folder under dump_path.", min_length=1)


class DiagnoseJob(JobBase):
    """Name the operator that introduced the difference between two runs, with its evidence: statistics first,
    then tensors of the suspect region only."""

    task: Literal["diagnose"] = field("diagnose", "Find the guilty operator between two runs or targets.")
    diagnose: DiagnoseSection = field(..., "The two sides and how to diagnose them.")
