"""free_benchmark: perturb API inputs, re-run, and flag APIs whose output moves more than its dtype allows.

Field rules and cross-field rules follow docs/reference/msprobe-tasks.md §8.1, with msprobe's faults fixed:
booleans are booleans (`"if_preheat": "true"` is an error), `max_sample` defaults to the documented 20, and the
preheat numbers are checked whether or not preheat is on.
"""

from typing import Any, Dict, List, Literal

from pydantic import ValidationInfo, field_validator, model_validator

from .base import ConfigModel
from .common import DumpJob, level_field, section_field
from .dump_sections import API_NAME
from .errors import RuleCollector, echo
from .schema_rules import add_rules, inside, is_true, when
from .types import config_error, field

__all__ = ["PERT_MODES", "FreeBenchmarkSection", "FreeBenchmarkJob"]

PERT_MODES = ("improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu")
FIX_PERT_MODES = ("improve_precision", "to_cpu")


class FreeBenchmarkSection(ConfigModel):
    foreign_scope = ("free_benchmark",)

    scope: List[str] = field(
        default_factory=list,
        description='Exact API calls to check, e.g. ["Torch.matmul.0.forward"] (not a range here). '
                    "Cannot be combined with list.",
        json_schema_extra={"items": {"type": "string", "pattern": API_NAME.pattern}})
    list: List[str] = field(
        default_factory=list,
        description='Check APIs whose name contains one of these substrings, e.g. ["matmul", "softmax"]; '
                    "recommended, since every checked call runs twice. Required for fuzz_stage backward.")
    fuzz_device: Literal["npu", "cpu"] = field(
        "npu", "Where the perturbed call runs. npu: on the training device, whatever it is (msprobe's name); "
               "cpu: on the host, only with pert_mode to_cpu.", advanced=True)
    pert_mode: Literal["improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu"] = field(
        "improve_precision",
        "Perturbation. improve_precision: fp16/bf16 inputs upcast to fp32; add_noise: a dtype-sized epsilon added "
        "where |x| > sqrt(eps); bit_noise: the lowest mantissa bit flipped; change_value: first and last "
        "elements swapped; no_change: identical re-run (non-determinism); to_cpu: re-run on CPU in fp32.")
    handler_type: Literal["check", "fix"] = field(
        "check", "check: report inconsistent APIs; fix: replace the output with the perturbed one (forward "
                 "stage, improve_precision or to_cpu, no preheat) to see whether the loss improves.")
    fuzz_level: Literal["L1"] = field("L1", "Checking granularity; L1 (API level) is the only one.", advanced=True)
    fuzz_stage: Literal["forward", "backward"] = field(
        "forward", "forward: compare outputs; backward: compare input gradients of a vjp with and without the "
                   "perturbation (needs list).")
    if_preheat: bool = field(
        False, "Learn per-API thresholds during the first preheat_step steps, sampling calls and checking them "
               "on CPU (check handler only).", advanced=True)
    preheat_step: int = field(15, "Number of preheat steps.", gt=0, advanced=True)
    max_sample: int = field(20, "Most calls sampled per API per preheat step.", gt=0, advanced=True)

    @field_validator("scope")
    @classmethod
    def _exact_api_names(cls, value: List[str]) -> List[str]:
        for i, name in enumerate(value):
            if not API_NAME.match(name):
                raise config_error(f"element [{i}] {echo(name)} is not a full API call name",
                                   "for example Torch.matmul.0.forward; use list for substrings")
        return value

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        def set_to(key: str, *values: Any) -> Dict[str, Any]:
            return {"required": [key], "properties": {key: {"enum": list(values)}}}

        nonempty = {"type": "array", "minItems": 1}
        add_rules(
            schema,
            {"not": {"required": ["scope", "list"], "properties": {"scope": nonempty, "list": nonempty}}},
            when(set_to("fuzz_device", "cpu"), set_to("pert_mode", "to_cpu")),
            when(set_to("pert_mode", "to_cpu"), set_to("fuzz_device", "cpu")),
            when(set_to("fuzz_stage", "backward"), {"required": ["list"], **inside(["list"], nonempty)}),
            when(set_to("handler_type", "fix"), {"not": {"anyOf": [
                is_true("if_preheat"), set_to("fuzz_stage", "backward"),
                set_to("pert_mode", *[m for m in PERT_MODES if m not in FIX_PERT_MODES])]}}),
        )

    @model_validator(mode="after")
    def _cross_field(self) -> "FreeBenchmarkSection":
        rules = RuleCollector()
        if self.scope and self.list:
            rules.add("list", "cannot be combined with scope", "use one of them")
        if (self.fuzz_device == "cpu") != (self.pert_mode == "to_cpu"):
            if self.fuzz_device == "cpu":
                rules.add("fuzz_device", f"cpu is only for pert_mode to_cpu (pert_mode is {self.pert_mode!r})",
                          'set "fuzz_device": "npu"')
            else:
                rules.add("fuzz_device", 'pert_mode to_cpu needs fuzz_device "cpu"', 'set "fuzz_device": "cpu"')
        if self.fuzz_stage == "backward" and not self.list:
            rules.add("list", "must not be empty when fuzz_stage is backward",
                      "name the APIs whose gradients to check")
        if self.handler_type == "fix":
            if self.if_preheat:
                rules.add("if_preheat", "preheat is not supported with handler_type fix")
            if self.fuzz_stage != "forward":
                rules.add("fuzz_stage", "handler_type fix works on the forward stage only")
            if self.pert_mode not in FIX_PERT_MODES:
                rules.add("pert_mode", f"handler_type fix needs improve_precision or to_cpu (got {self.pert_mode!r})")
        rules.raise_if_any()
        return self


class FreeBenchmarkJob(DumpJob):
    """Check API precision without a reference run by perturbing inputs and re-running (API level only)."""

    task: Literal["free_benchmark"] = field("free_benchmark", "Check APIs without a reference run.")
    level: Literal["L1"] = level_field("L1", ("L1",))
    free_benchmark: FreeBenchmarkSection = section_field(FreeBenchmarkSection, "Options of free_benchmark.")

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> "FreeBenchmarkJob":
        if self.async_dump:
            self._warn(info, "async_dump", "has no effect on free_benchmark (statistics and tensor only)")
        return self
