"""monitor: training-state statistics of activations, gradients, optimizer state and parameters (docs/reference/msprobe-tasks.md §10).

Every field of msprobe's monitor JSON (docs/reference/msprobe-tasks.md §10.2) is here with its validation, with msprobe's faults fixed:
`module_ranks` takes "a-b" ranges like every rank list; `mg_direction` is validated under its real name; unknown
`ops` are errors with a suggestion (msprobe drops them silently); booleans are booleans; forward_only together
with backward_only is an error (msprobe registers no hook at all then); AnomalyTurbulence has a `direction`
(up, down or both; msprobe only looks up); AnomalyNan also flags +-inf unless `include_inf` is false (msprobe
misses inf without a threshold). Keys msprobe has that we do not implement (collective-communication and
L2-feature monitoring, dynamic on/off, appending to old output) are in `schemas.foreign`.
"""

import re
from typing import Any, Dict, List, Literal, Optional

from pydantic import ValidationInfo, field_validator, model_validator

from .base import ConfigModel
from .common import RunJob, section_field
from .errors import RuleCollector, echo, warn_from_context
from .schema_rules import NON_BLANK, add_rules, inside, is_true, note
from .types import RankList, config_error, field

__all__ = ["MONITOR_OPS", "MonitorTarget", "AlertArgs", "AlertRule", "AlertConfig", "MonitorSection", "MonitorJob"]

MONITOR_OPS = ("norm", "min", "max", "zeros", "nans", "id", "mean", "shape", "dtype")
MONITOR_FORMATS = ("hdf5", "csv", "tensorboard")
_SELECTOR = re.compile(r"^(tensor|tuple\[([0-9]+)\](?::([0-9]+))?)$")
# The schema's form of a selector: the validator strips surrounding whitespace first.
SELECTOR_PATTERN = r"^\s*(tensor|tuple\[[0-9]+\](:[0-9]+)?)\s*$"


class MonitorTarget(ConfigModel):
    """Which element of a module's inputs/outputs to monitor: "tensor", "tuple[n]" (all n) or "tuple[n]:i"."""

    input: Optional[str] = field(None, 'Forward input selector, e.g. "tuple[2]:0" (default: every tensor).')
    output: Optional[str] = field(None, 'Forward output selector, e.g. "tensor".')
    input_grad: Optional[str] = field(None, "Selector of the gradient w.r.t. the forward input.")
    output_grad: Optional[str] = field(None, "Selector of the gradient w.r.t. the forward output.")

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        for name in ("input", "output", "input_grad", "output_grad"):
            schema["properties"][name]["pattern"] = SELECTOR_PATTERN
        note(schema, 'in "tuple[n]:i", i is below n.')

    @field_validator("input", "output", "input_grad", "output_grad")
    @classmethod
    def _selector(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return value
        match = _SELECTOR.match(value.strip())
        if not match:
            raise config_error(f"{echo(value)} is not a selector", 'use "tensor", "tuple[2]" or "tuple[2]:0"')
        if match.group(3) is not None and int(match.group(3)) >= int(match.group(2)):
            raise config_error(f"{echo(value)}: index {match.group(3)} is outside a tuple of {match.group(2)}")
        return value.strip()


class AlertArgs(ConfigModel):
    threshold: Optional[float] = field(
        None, "AnomalyTurbulence: relative deviation from the running mean that alerts (0.5 = 50%). "
              "AnomalyNan: optional absolute limit; |value| above it alerts too.", ge=0)
    direction: Optional[Literal["up", "down", "both"]] = field(
        None, "AnomalyTurbulence only: alert when the value rises above mean*(1+threshold) (up, msprobe's "
              "behaviour and the default), falls below mean*(1-threshold) (down), or either (both).")
    include_inf: Optional[bool] = field(
        None, "AnomalyNan only: also alert on +-inf (default true; msprobe catches nan only).")


class AlertRule(ConfigModel):
    rule_name: Literal["AnomalyTurbulence", "AnomalyNan"] = field(
        ..., "AnomalyTurbulence: |value| deviates from the EMA (beta 0.99) of past |values| by more than "
             "threshold, on norm and mean. AnomalyNan: the value is nan (and +-inf unless include_inf is false), "
             "or |value| exceeds threshold when one is given.")
    args: AlertArgs = field(default_factory=AlertArgs, description="Rule arguments.")

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        add_rules(schema, {
            "if": {"properties": {"rule_name": {"const": "AnomalyTurbulence"}}},
            "then": {"required": ["args"], **inside(["args"], {
                "required": ["threshold"],
                "properties": {"threshold": {"not": {"type": "null"}}, "include_inf": {"type": "null"}}})},
            "else": inside(["args", "direction"], {"type": "null"})})

    @model_validator(mode="after")
    def _args_for_rule(self) -> "AlertRule":
        rules = RuleCollector()
        args = self.args
        if self.rule_name == "AnomalyTurbulence":
            if args.threshold is None:
                rules.add("args.threshold", "is required for AnomalyTurbulence", 'for example {"threshold": 0.5}')
            if args.include_inf is not None:
                rules.add("args.include_inf", "applies to AnomalyNan only")
            if args.direction is None:
                args.direction = "up"
        else:
            if args.direction is not None:
                rules.add("args.direction", "applies to AnomalyTurbulence only")
            if args.include_inf is None:
                args.include_inf = True
        rules.raise_if_any()
        return self


class AlertConfig(ConfigModel):
    foreign_scope = ("monitor_alert",)

    rules: List[AlertRule] = field(
        default_factory=list, description="Anomaly rules, evaluated in order; the first that fires wins.")
    dump: bool = field(False, "Write every anomaly (rank, step, micro step, stage, call id, tag, message) to the "
                              "run's store and an anomaly.json.")


class MonitorSection(ConfigModel):
    foreign_scope = ("monitor",)

    targets: Dict[str, MonitorTarget] = field(
        default_factory=dict,
        description='Modules (named_modules() names) or parameter-name prefixes to monitor, each with optional '
                    'selectors: {"layers.0.mlp": {}, "layers.1": {"input": "tuple[2]:0"}}. Empty: all modules.')
    xy_distribution: bool = field(False, "Monitor activations: forward inputs/outputs and their gradients.")
    all_xy: bool = field(False, "Monitor the activations of every module (targets still refine); forced on when "
                                "targets is empty and xy_distribution is on.", advanced=True)
    forward_only: bool = field(False, "Activations: forward only.", advanced=True)
    backward_only: bool = field(False, "Activations: backward (gradients) only.", advanced=True)
    wg_distribution: bool = field(False, "Monitor weight gradients before and after reduction across ranks.")
    monitor_mbs_grad: bool = field(False, "Weight gradients per micro-batch, before reduction.", advanced=True)
    mv_distribution: bool = field(False, "Monitor Adam's exp_avg (m) and exp_avg_sq (v).")
    ur_distribution: bool = field(False, "Monitor Adam's update m_hat / (sqrt(v_hat) + eps) and the update ratio "
                                         "lr * |update| / |param|.",
                                  advanced=True)
    param_distribution: bool = field(False, "Monitor parameters before and after the optimizer step.")
    mg_direction: bool = field(
        False, "Monitor the fraction of gradient signs that agree with exp_avg's ((sign g * sign m).sum()/numel "
               "+ 1)/2; 1.0 at the first step.", advanced=True)
    ops: List[Literal["norm", "min", "max", "zeros", "nans", "id", "mean", "shape", "dtype"]] = field(
        default_factory=lambda: ["norm", "shape", "dtype"],
        description="Metrics per tensor: norm (L2, float64), min, max, mean (float64), zeros (fraction with |x| < "
                    "eps), nans (count), id (the value of a 0-dim tensor). Empty means [norm]; shape and dtype "
                    "are always added.")
    eps: float = field(1e-8, "Threshold of the zeros metric: |x| < eps counts as zero.", gt=0, advanced=True)
    ndigits: int = field(6, "Digits kept when metrics are exported to CSV (1-20).", ge=1, le=20, advanced=True)
    format: List[Literal["hdf5", "csv", "tensorboard"]] = field(
        default_factory=lambda: ["hdf5"],
        description='Outputs: hdf5 (always written), csv (msprobe-style files), tensorboard (event files). '
                    'msprobe\'s single string ("csv") is accepted.')
    step_count_per_record: int = field(1, "Steps per exported CSV file (1-1000000).", ge=1, le=1_000_000,
                                       advanced=True)
    start_step: int = field(0, "First optimizer step to monitor.", ge=0)
    step_interval: int = field(1, "Monitor every n-th step from start_step.", ge=1)
    collect_times: int = field(100_000_000, "Stop after this many monitored steps and remove every hook.", ge=1)
    module_ranks: RankList = field(
        default_factory=list, description='Ranks to monitor: integers and ranges such as [0, "4-7"]; empty = all.')
    print_struct: bool = field(
        False, "Record the model's module structure (input/output shapes per module) after the first step; "
               "training continues (msprobe stops it).", advanced=True)
    stack_info: bool = field(False, "Record each module's call stack at the first step.", advanced=True)
    alert: AlertConfig = field(default_factory=AlertConfig, description="Anomaly detection rules.")
    squash_name: bool = field(
        False, "Shorten names to their layers.* / embedding.* / final.* / output.* / norm.* tail.", advanced=True)

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        props = schema["properties"]
        props["targets"]["propertyNames"] = {"pattern": NON_BLANK}
        fmt = props["format"]
        fmt["anyOf"] = [{"type": "array", "items": fmt.pop("items")},
                        {"type": "string", "enum": list(MONITOR_FORMATS) + ["api"]}]
        fmt.pop("type", None)
        add_rules(schema, {"not": {"allOf": [is_true("forward_only"), is_true("backward_only")]}})

    @field_validator("format", mode="before")
    @classmethod
    def _format_string(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            if value == "api":
                warn_from_context(info.context)(
                    "monitor.format", "'api' (metrics read in the script only) is not offered; the metrics go to "
                                      "the HDF5 store, which the script can read")
                return ["hdf5"]
            return [value]
        return value

    @field_validator("format")
    @classmethod
    def _hdf5_always(cls, value: List[str]) -> List[str]:
        return ["hdf5"] + [f for i, f in enumerate(value) if f != "hdf5" and f not in value[:i]]

    @field_validator("ops")
    @classmethod
    def _ops(cls, value: List[str]) -> List[str]:
        ops = [op for i, op in enumerate(value) if op not in value[:i] and op not in ("shape", "dtype")]
        return (ops or ["norm"]) + ["shape", "dtype"]

    @field_validator("targets")
    @classmethod
    def _target_names(cls, value: Dict[str, MonitorTarget]) -> Dict[str, MonitorTarget]:
        for name in value:
            if not name.strip():
                raise config_error("a target name is empty", "use a module name from named_modules()")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> "MonitorSection":
        rules = RuleCollector()
        if self.forward_only and self.backward_only:
            rules.add("backward_only", "cannot be combined with forward_only (nothing would be monitored)",
                      "set at most one of them")
        rules.raise_if_any()
        return self

    def anything_enabled(self) -> bool:
        return any((self.xy_distribution, self.wg_distribution, self.mv_distribution, self.ur_distribution,
                    self.param_distribution, self.mg_direction, self.print_struct, self.stack_info))


class MonitorJob(RunJob):
    """Monitor training state cheaply over many steps, with anomaly alerts."""

    foreign_scope = ("job", "no_capture_level")

    task: Literal["monitor"] = field("monitor", "Monitor training state.")
    monitor: MonitorSection = section_field(
        MonitorSection, "The monitor's options: msprobe's monitor JSON keys (a separate msprobe monitor file loads "
                        "as this section).")

    @model_validator(mode="after")
    def _something_to_do(self, info: ValidationInfo) -> "MonitorJob":
        if not self.monitor.anything_enabled():
            warn_from_context(info.context)(
                "monitor", "nothing is enabled: set xy_distribution, wg_distribution, mv_distribution, "
                           "param_distribution or another *_distribution key")
        return self
