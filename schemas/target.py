"""What a job runs: the built-in demo (with its knobs and injectable faults), a script, or a callable.

`DEMO_PRESETS` holds the demo's sizes so that the schema can check a fault's layer against the layer count; the
demo engine reads its sizes from here (`DemoKnobs.sizes()`), so the numbers live in one place. `default` is the
reference workload of docs/decisions/0021-reference-workload.md; `tiny` runs a step in milliseconds on one CPU core.
"""

import re
from typing import Any, Dict, List, Literal, Optional

from pydantic import (
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from .base import ConfigModel
from .errors import RuleCollector, echo
from .schema_rules import add_rules, given, note, when
from .types import field

__all__ = [
    "DEMO_PRESETS",
    "DEMO_SIZE_KEYS",
    "FaultAt",
    "FaultLayer",
    "GradExplosion",
    "DemoFaults",
    "DemoKnobs",
    "TargetSpec",
    "expand_target_shorthand",
    "target_field_schema",
]

DEMO_SIZE_KEYS = ("n_layer", "d_model", "n_head", "d_mlp", "vocab", "seq", "batch")
DEMO_PRESETS: Dict[str, Dict[str, int]] = {
    "default": {"n_layer": 4, "d_model": 256, "n_head": 4, "d_mlp": 1024, "vocab": 1000, "seq": 64, "batch": 8},
    "tiny": {"n_layer": 2, "d_model": 32, "n_head": 4, "d_mlp": 128, "vocab": 1000, "seq": 8, "batch": 2},
}


class FaultLayer(ConfigModel):
    layer: int = field(..., "Index of the transformer block the fault is injected into (0-based).", ge=0)


class FaultAt(FaultLayer):
    from_step: int = field(0, "First training step (0-based) at which the fault is active; it stays on after.", ge=0)


class GradExplosion(ConfigModel):
    step: int = field(..., "The training step (0-based) whose gradients are scaled.", ge=0)
    layer: int = field(..., "Index of the block whose parameter gradients are scaled (0-based).", ge=0)
    scale: float = field(1e4, "Factor applied to that block's gradients at that step.", gt=0)


class DemoFaults(ConfigModel):
    """Faults the demo can inject, each defined by its numeric effect (docs/decisions/0015-demo-faults-by-numeric-effect.md)."""

    fp16_overflow: Optional[FaultAt] = field(
        None, "Scale one op's input in the given block so that float16 exp gives inf (for overflow_check).")
    lowp_softmax: Optional[FaultAt] = field(
        None, "Compute that block's attention softmax exp and sum in bfloat16 without max-subtraction "
              "(relative error >= 1e-2 on the demo's logits).")
    wrong_eps: Optional[FaultLayer] = field(None, "Give that block's layer norm eps = 1e-1 instead of 1e-5.")
    grad_explosion: Optional[GradExplosion] = field(
        None, "Multiply one block's parameter gradients by `scale` at one step (for monitor alerts).")

    def active(self) -> List[str]:
        return [name for name in type(self).model_fields if getattr(self, name) is not None]


class DemoKnobs(ConfigModel):
    """The built-in demo: a small GPT-style transformer trained on seed-generated tokens with AdamW."""

    preset: Literal["default", "tiny"] = field(
        "default", "Size preset. default: 4 blocks, d_model 256, 4 heads, MLP 1024, vocab 1000, seq 64, batch 8 "
                   "(the reference workload); tiny: 2 blocks, d_model 32, 4 heads, MLP 128, vocab 1000, seq 8, "
                   "batch 2 (per-op overhead dominates, as on a fast accelerator).")
    steps: int = field(5, "Number of training steps.", ge=1)
    n_layer: Optional[int] = field(None, "Number of transformer blocks (default: the preset's).", ge=1, advanced=True)
    d_model: Optional[int] = field(None, "Model width (default: the preset's).", ge=1, advanced=True)
    n_head: Optional[int] = field(None, "Attention heads; d_model must divide by it (default: the preset's).",
                                  ge=1, advanced=True)
    d_mlp: Optional[int] = field(None, "MLP hidden width (default: the preset's).", ge=1, advanced=True)
    vocab: Optional[int] = field(None, "Vocabulary size (default: the preset's).", ge=2, advanced=True)
    seq: Optional[int] = field(None, "Sequence length (default: the preset's).", ge=1, advanced=True)
    batch: Optional[int] = field(None, "Batch size (default: the preset's).", ge=1, advanced=True)
    lr: float = field(1e-3, "AdamW learning rate.", gt=0, advanced=True)
    seed: int = field(1234, "Seed of the initial weights and the token stream (same numbers in both frameworks).",
                      ge=0, lt=2 ** 32, advanced=True)
    dtype: Literal["fp32", "bf16", "fp16"] = field(
        "fp32", "Autocast dtype of the forward pass: fp32 (no autocast), bf16 or fp16.")
    faults: DemoFaults = field(default_factory=DemoFaults, description="Faults to inject (none by default).")

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        note(schema, "d_model divides by n_head; a fault's layer exists (below n_layer, the preset's or the "
                     "explicit one) and its from_step/step is below steps.")

    def sizes(self) -> Dict[str, int]:
        """The effective model sizes: the preset's values with the explicit overrides applied."""
        sizes = dict(DEMO_PRESETS[self.preset])
        for key in DEMO_SIZE_KEYS:
            value = getattr(self, key)
            if value is not None:
                sizes[key] = value
        return sizes

    @model_validator(mode="after")
    def _check_sizes_and_faults(self) -> "DemoKnobs":
        rules = RuleCollector()
        sizes = self.sizes()
        if sizes["d_model"] % sizes["n_head"]:
            where = "d_model" if self.d_model is not None else "n_head"
            rules.add(where, f"d_model {sizes['d_model']} does not divide by n_head {sizes['n_head']}",
                      "pick sizes with d_model % n_head == 0")
        n_layer = sizes["n_layer"]
        for name in self.faults.active():
            fault = getattr(self.faults, name)
            if fault.layer >= n_layer:
                rules.add(f"faults.{name}.layer", f"layer {fault.layer} does not exist: the model has "
                          f"{n_layer} blocks (0..{n_layer - 1})")
            step = getattr(fault, "from_step", getattr(fault, "step", None))
            if step is not None and step >= self.steps:
                which = "from_step" if hasattr(fault, "from_step") else "step"
                rules.add(f"faults.{name}.{which}", f"step {step} is never reached: the demo runs {self.steps} "
                          f"steps (0..{self.steps - 1})")
        rules.raise_if_any()
        return self


_CALLABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*"
                       r"(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def expand_target_shorthand(value: Any) -> Any:
    """`"demo"` is shorthand for `{"demo": {}}` (docs/decisions/0004-config-shape.md)."""
    if value == "demo":
        return {"demo": {}}
    return value


def target_field_schema(schema: Dict[str, Any]) -> None:
    schema["anyOf"] = [{"const": "demo", "type": "string"}] + list(schema.get("anyOf", []))


class TargetSpec(ConfigModel):
    """Exactly one of `demo`, `script`, `callable`."""

    demo: Optional[DemoKnobs] = field(None, "Run the built-in demo model with these knobs.")
    script: Optional[str] = field(
        None, "A training script to run in this process (like `python train.py ...`); it calls the in-script "
              "API or is instrumented from outside.", min_length=1)
    args: List[str] = field(default_factory=list, description="Command-line arguments of the script.")
    cwd: Optional[str] = field(None, "Working directory of the script (default: the current one).",
                               min_length=1, advanced=True)
    env: Dict[str, str] = field(default_factory=dict, description="Extra environment variables for the script.",
                                advanced=True)
    callable: Optional[str] = field(
        None, 'A function to call, as "package.module:function" (importable from the working directory).',
        json_schema_extra={"pattern": _CALLABLE.pattern})
    kwargs: Dict[str, Any] = field(default_factory=dict, description="Keyword arguments for the callable.",
                                   advanced=True)

    @field_validator("callable")
    @classmethod
    def _callable_form(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not _CALLABLE.match(value):
            raise ValueError(f"{echo(value)} is not of the form \"package.module:function\"")
        return value

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        add_rules(schema,
                  {"oneOf": [given("demo"), given("script"), given("callable")]},
                  when({"not": given("script")}, {"properties": {"args": {"maxItems": 0}, "cwd": {"type": "null"},
                                                                 "env": {"maxProperties": 0}}}),
                  when({"not": given("callable")}, {"properties": {"kwargs": {"maxProperties": 0}}}))

    @model_serializer(mode="wrap")
    def _only_own_keys(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Dict[str, Any]:
        """Dump only the keys of this target's kind: no empty `args`/`env` beside a demo."""
        data = handler(self)
        keep = {"demo": ("demo",), "script": ("script", "args", "cwd", "env"),
                "callable": ("callable", "kwargs")}.get(self.kind, tuple(data))
        return {k: v for k, v in data.items() if k in keep}

    @property
    def kind(self) -> str:
        return "demo" if self.demo is not None else "script" if self.script is not None else "callable"

    @model_validator(mode="after")
    def _exactly_one(self) -> "TargetSpec":
        rules = RuleCollector()
        given = [k for k in ("demo", "script", "callable") if getattr(self, k) is not None]
        if len(given) != 1:
            what = "none" if not given else " and ".join(given)
            rules.add("", f"a target needs exactly one of demo, script, callable (got {what})",
                      'for example {"demo": {}} or {"script": "train.py", "args": []}')
        else:
            if self.script is None:
                for key in ("args", "cwd", "env"):
                    if getattr(self, key):
                        rules.add(key, f"applies to script targets only (this target is {given[0]})")
            if self.callable is None and self.kwargs:
                rules.add("kwargs", f"applies to callable targets only (this target is {given[0]})")
        rules.raise_if_any()
        return self
