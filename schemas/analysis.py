"""Analysis jobs: compare two runs, compare two grad_probe runs, classify an overflow_check run's overflows.
They read stores; only analyze_overflow needs a framework (to replay the flagged calls).

Results go to a new run folder under `dump_path` (`<dump_path>/<run-id>/`, with run.json and `latest`), like a
collection run, so the app lists and opens them the same way; `output_path` names a folder instead.
"""

from typing import Annotated, Any, Dict, List, Literal, Optional, Union

from pydantic import PlainValidator, WithJsonSchema, field_validator, model_validator

from .base import ConfigModel
from .common import JobBase
from .errors import RuleCollector, echo
from .layout import ParallelLayout
from .schema_rules import NON_BLANK, add_rules, inside, note, when
from .types import RankList, config_error, field

__all__ = ["MetricLimits", "CompareThresholds", "CompareSection", "CompareJob", "GradCompareSection",
           "GradCompareJob", "AnalyzeOverflowSection", "AnalyzeOverflowJob"]

RESULT_FORMATS = ("hdf5", "csv", "xlsx")


def _result_formats(value: List[str]) -> List[str]:
    return ["hdf5"] + [f for i, f in enumerate(value) if f != "hdf5" and f not in value[:i]]


class MetricLimits(ConfigModel):
    """Where a metric turns a row into a warning or an error. Unset: that level is not judged on this metric."""

    warning: Optional[float] = field(None, "Limit at which a row becomes a warning.")
    error: Optional[float] = field(None, "Limit at which a row becomes an error.")


def _limits(warning: Optional[float], error: Optional[float]) -> Any:
    return lambda: MetricLimits(warning=warning, error=error)


class CompareThresholds(ConfigModel):
    """Pass/warning/error limits. For cosine and the error ratios lower is worse (the row fails below the
    limit); for the error metrics higher is worse (the row fails above it)."""

    rel_err: MetricLimits = field(
        default_factory=_limits(1e-3, 1e-2),
        description="Norm-wise relative error ||target - golden|| / ||golden|| in float64 (tensor mode; matching "
                    "non-finite and mask-fill values excluded); higher is worse.")
    cosine: MetricLimits = field(default_factory=_limits(0.99, 0.9),
                                 description="Cosine similarity (tensor mode); lower is worse.")
    max_abs_err: MetricLimits = field(default_factory=_limits(1e-3, 1.0),
                                      description="Largest absolute difference (tensor mode); higher is worse.")
    max_rel_err: MetricLimits = field(default_factory=_limits(None, None),
                                      description="Largest relative difference (tensor mode); higher is worse.")
    one_thousandth_err_ratio: MetricLimits = field(
        default_factory=_limits(None, None),
        description="Fraction of elements with relative error below 0.001 (tensor mode); lower is worse.")
    stats_rel_err: MetricLimits = field(
        default_factory=_limits(0.1, 0.5),
        description="Largest relative difference of max/min/mean/norm (statistics mode), each difference over "
                    "max(|golden statistic|, rms of the golden tensor) so a mean near 0 does not explode; higher "
                    "is worse.")

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        note(schema, "error is not above warning for cosine and one_thousandth_err_ratio, and not below it for "
                     "the others.")

    @model_validator(mode="after")
    def _ordered(self) -> "CompareThresholds":
        rules = RuleCollector()
        for name in ("cosine", "one_thousandth_err_ratio"):
            lim = getattr(self, name)
            if lim.warning is not None and lim.error is not None and lim.error > lim.warning:
                rules.add(f"{name}.error", f"lower is worse for {name}, so error ({lim.error}) must not be above "
                                           f"warning ({lim.warning})")
        for name in ("rel_err", "max_abs_err", "max_rel_err", "stats_rel_err"):
            lim = getattr(self, name)
            if lim.warning is not None and lim.error is not None and lim.error < lim.warning:
                rules.add(f"{name}.error", f"higher is worse for {name}, so error ({lim.error}) must not be below "
                                           f"warning ({lim.warning})")
        rules.raise_if_any()
        return self


def _path_or_true(value: Any) -> Any:
    if value is None or value is True:
        return value
    if value is False:
        return None
    if isinstance(value, str) and value.strip():
        return value
    raise config_error(f"must be true (built-in mapping) or a YAML file path (got {echo(value)})")


MappingOption = Annotated[
    Union[str, bool, None],
    PlainValidator(_path_or_true),
    WithJsonSchema({"anyOf": [{"type": "string", "pattern": NON_BLANK}, {"type": "boolean"}, {"type": "null"}]}),
]
"""`true` for a built-in mapping, or the path of a YAML mapping file."""


class CompareSection(ConfigModel):
    foreign_scope = ("compare",)

    target_path: str = field(
        ..., "The run under test (msprobe's npu_path): a run folder (or its `latest`), a rank folder, a step "
             "folder, or an msprobe dump.json.", min_length=1)
    golden_path: str = field(
        ..., "The reference run (msprobe's bench_path), same kinds of path as target_path.", min_length=1)
    mode: Literal["auto", "tensor", "statistics", "md5"] = field(
        "auto", "What to compare. auto: real tensors when both sides have them, else checksums when both have "
                "them, else statistics.")
    fuzzy_match: bool = field(False, "Match calls whose indices differ (an aligned match on name, shape, dtype) "
                                     "instead of exact names.")
    data_mapping: Optional[str] = field(None, "YAML file mapping target names to golden names, row by row.",
                                        min_length=1, advanced=True)
    api_mapping: MappingOption = field(
        None, "MindSpore-vs-PyTorch API name mapping: true for the built-in table, or a YAML file adding to it.",
        advanced=True)
    cell_mapping: MappingOption = field(
        None, "MindSpore Cell to PyTorch Module name mapping: true for Cell->Module only, or a YAML file.",
        advanced=True)
    layer_mapping: Optional[str] = field(None, "YAML file mapping layer scopes between the two models.",
                                         min_length=1, advanced=True)
    rank: RankList = field(default_factory=list, description="Ranks to compare (ids, paired by id); empty = all.")
    step: RankList = field(default_factory=list, description="Steps to compare; empty = all.")
    rel_eps: Optional[float] = field(
        None, "Epsilon added where the golden value is 0 in relative errors. Unset: the machine epsilon of the "
              "compared dtype promoted to at least float32 (1.1920929e-07 for fp16/bf16/fp32 data, 2.220446e-16 "
              "for fp64), as msprobe 26.2.", gt=0, advanced=True)
    small_value: float = field(
        0.0, "Where |golden| is at most this, relative errors are replaced by absolute errors (0: never).",
        ge=0, advanced=True)
    thresholds: CompareThresholds = field(default_factory=CompareThresholds,
                                          description="Pass/warning/error limits per metric.", advanced=True)
    highlight: Literal["none", "classic"] = field(
        "none", "Colour rows of the xlsx report: classic = msprobe's red/yellow rules (needs xlsx in formats).",
        advanced=True)
    first_divergence: bool = field(True, "Rank the calls most likely to have introduced the difference.")
    top: int = field(10, "How many entries of the first-divergence ranking the summary lists (top suspects, suspect "
                         "groups); the full ranking is in the result file.", ge=1)
    formats: List[Literal["hdf5", "csv", "xlsx"]] = field(
        default_factory=lambda: ["hdf5", "csv"],
        description="Result files: hdf5 (always), csv, xlsx (refused above Excel's row limit).")
    output_path: Optional[str] = field(
        None, "Folder for the results. Unset: a new run folder under dump_path.", min_length=1)
    merge_ranks: Literal["auto", "on", "off"] = field(
        "auto", "Merge the ranks of a parallel side into whole tensors before matching when the two runs' "
                "layouts differ (TP=2 against one process), from the recorded placements or "
                "target_layout/golden_layout. auto: when the sides have different numbers of ranks or a layout "
                "is given; on: also for equal numbers of ranks (TP=2 against DP=2); off: ranks pair by id.",
        advanced=True)
    target_layout: Optional[ParallelLayout] = field(
        None, "The target's parallel layout when its dump records no placements (Megatron-style manual tensor "
              "parallel, msprobe dumps), as msprobe's parallel merge takes it.", advanced=True)
    golden_layout: Optional[ParallelLayout] = field(
        None, "The golden's parallel layout, as target_layout.", advanced=True)
    workers: Optional[int] = field(
        None, "Processes comparing (rank, step) pairs at once on this machine (one process writes the results, "
              "the same as with 1); with one pair, processes streaming its tensors. Unset: as many as cores and "
              "pairs allow, once the first pair shows the compare is worth it. Under torchrun or srun each "
              "launched process takes its share of the pairs (docs/COMPARE.md).", ge=1, advanced=True)

    @field_validator("formats")
    @classmethod
    def _formats(cls, value: List[str]) -> List[str]:
        return _result_formats(value)

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        add_rules(schema, when({"required": ["highlight"], **inside(["highlight"], {"const": "classic"})},
                               {"required": ["formats"], **inside(["formats"], {"contains": {"const": "xlsx"}})}))

    @model_validator(mode="after")
    def _cross_field(self) -> "CompareSection":
        rules = RuleCollector()
        if self.highlight == "classic" and "xlsx" not in self.formats:
            rules.add("highlight", "colours the xlsx report, which formats does not include",
                      'add "xlsx" to formats')
        rules.raise_if_any()
        return self


class CompareJob(JobBase):
    """Compare a run against a reference run, call by call, and rank where they start to differ."""

    task: Literal["compare"] = field("compare", "Compare two runs.")
    compare: CompareSection = field(..., "What to compare and how.")


class GradCompareSection(ConfigModel):
    target_path: str = field(..., "grad_probe run under test (run folder or its `latest`).", min_length=1)
    golden_path: str = field(..., "Reference grad_probe run.", min_length=1)
    similarity_threshold: float = field(
        0.97, "A parameter is flagged when the fraction of gradient signs equal on both sides falls below this.",
        gt=0, le=1)
    drop_threshold: float = field(
        0.03, "A parameter is also flagged when its similarity drops by more than this from one step to the next.",
        ge=0, lt=1)
    layer_tolerance: float = field(
        0.1, "Layer-wise view: a layer whose gradient-norm ratio target/golden deviates from 1 by more than this "
             "(0.1 = 10%) is over tolerance; the first such layer counting from the output is marked.", ge=0,
        advanced=True)
    plots: bool = field(True, "Draw PNG charts next to the CSVs: summary similarity per step, similarity per "
                                   "parameter and step, and the layer-wise norm ratios (needs matplotlib).")
    rank: RankList = field(default_factory=list, description="Ranks to compare; empty = all.")
    step: RankList = field(default_factory=list, description="Steps to compare; empty = all.")
    output_path: Optional[str] = field(None, "Folder for the results. Unset: a new run folder under dump_path.",
                                       min_length=1)


class GradCompareJob(JobBase):
    """Compare the gradient sign maps of two grad_probe runs and flag where they drift apart."""

    task: Literal["grad_compare"] = field("grad_compare", "Compare two grad_probe runs.")
    grad_compare: GradCompareSection = field(..., "What to compare and how.")


class AnalyzeOverflowSection(ConfigModel):
    path: str = field(
        ..., "An overflow_check run: its folder, its `latest` pointer, the dump_path it wrote to, or one rank "
             "folder.", min_length=1)
    dtype: Literal["float32", "float64"] = field(
        "float64", "Precision of the replay: each flagged call is run again from its saved inputs in this dtype.")
    device: str = field("cpu", "Where the replay runs (cpu, cuda, cuda:1, npu:0...).", min_length=1,
                        advanced=True)
    output_path: Optional[str] = field(None, "Folder for the results. Unset: a new run folder under dump_path.",
                                       min_length=1)


class AnalyzeOverflowJob(JobBase):
    """Replay each call that overflow_check flagged, in high precision, and say whether the overflow is a real
    range problem (high precision overflows too) or an artefact of the low-precision dtype."""

    task: Literal["analyze_overflow"] = field("analyze_overflow", "Classify the overflows of an overflow_check "
                                                                  "run.")
    analyze_overflow: AnalyzeOverflowSection = field(..., "Which run to analyse and how.")
