"""The demo model's knobs: size preset, loop settings, dtype and injectable faults.

The config schema (``schemas``) mirrors these fields; here they are plain dataclasses so that the engines and
both framework builds share one resolved, validated description of the run. ``resolve_knobs`` accepts a plain
dict (what ``model_dump()`` gives), an object with ``model_dump()``, or a ``DemoKnobs``; every problem is a
one-line ``DemoKnobError`` naming the field.
"""

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Dict, Iterable, Optional

# The reference workload of docs/decisions/0021-reference-workload.md (3,688,936 parameters), and a size where per-op overhead dominates.
PRESETS: Dict[str, Dict[str, int]] = {
    "default": {"n_layer": 4, "d_model": 256, "n_head": 4, "d_mlp": 1024, "vocab": 1000, "seq": 64, "batch": 8},
    "tiny": {"n_layer": 2, "d_model": 32, "n_head": 4, "d_mlp": 128, "vocab": 1000, "seq": 8, "batch": 2},
}
SIZE_FIELDS = ("n_layer", "d_model", "n_head", "d_mlp", "vocab", "seq", "batch")
DTYPES = ("fp32", "bf16", "fp16")


class DemoKnobError(ValueError):
    """Bad demo knobs; the message is one line naming the field (``demo.faults.wrong_eps.layer: ...``)."""


@dataclass(frozen=True)
class LayerFault:
    """A fault in block ``layer`` that is active on every step >= ``from_step``."""

    layer: int
    from_step: int = 0


@dataclass(frozen=True)
class WrongEps:
    """Block ``layer``'s first LayerNorm uses a wrong eps (fixed when the model is built)."""

    layer: int


@dataclass(frozen=True)
class GradExplosion:
    """At step ``step`` only, the gradient flowing through block ``layer`` is multiplied by ``scale``."""

    step: int
    layer: int
    scale: float = 1e4


@dataclass(frozen=True)
class DemoFaults:
    fp16_overflow: Optional[LayerFault] = None
    lowp_softmax: Optional[LayerFault] = None
    wrong_eps: Optional[WrongEps] = None
    grad_explosion: Optional[GradExplosion] = None

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self))

    def to_dict(self) -> Dict[str, Any]:
        """Only the faults that are on, as plain dicts (for run.json and summaries)."""
        return {f.name: asdict(getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None}


@dataclass(frozen=True)
class DemoKnobs:
    preset: str = "default"
    steps: int = 5
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    d_mlp: int = 1024
    vocab: int = 1000
    seq: int = 64
    batch: int = 8
    lr: float = 1e-3
    seed: int = 1234
    dtype: str = "fp32"
    faults: DemoFaults = field(default_factory=DemoFaults)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> Dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "faults"}
        out["faults"] = self.faults.to_dict()
        return out


def _as_dict(source: Any, where: str) -> Dict[str, Any]:
    if source is None:
        return {}
    if hasattr(source, "model_dump"):
        source = source.model_dump()
    if not isinstance(source, dict):
        raise DemoKnobError(f"{where}: expected a mapping, got {type(source).__name__}")
    return dict(source)


def _int(value: Any, where: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DemoKnobError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise DemoKnobError(f"{where}: must be >= {minimum}, got {value}")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DemoKnobError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _check_keys(data: Dict[str, Any], allowed: Iterable[str], where: str) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise DemoKnobError(f"{where}.{unknown[0]}: unknown key (expected one of {', '.join(sorted(allowed))})")


def _layer(value: Any, where: str, n_layer: int) -> int:
    layer = _int(value, where, 0)
    if layer >= n_layer:
        raise DemoKnobError(f"{where}: block {layer} does not exist (the model has {n_layer} blocks: 0..{n_layer - 1})")
    return layer


def _resolve_faults(raw: Any, n_layer: int, steps: int) -> DemoFaults:
    where = "demo.faults"
    data = {k: v for k, v in _as_dict(raw, where).items() if v is not None}
    _check_keys(data, [f.name for f in fields(DemoFaults)], where)
    out: Dict[str, Any] = {}
    for name in ("fp16_overflow", "lowp_softmax", "wrong_eps"):
        if name not in data:
            continue
        spec = _as_dict(data[name], f"{where}.{name}")
        allowed = ["layer"] if name == "wrong_eps" else ["layer", "from_step"]
        _check_keys(spec, allowed, f"{where}.{name}")
        if "layer" not in spec:
            raise DemoKnobError(f"{where}.{name}.layer: required")
        layer = _layer(spec["layer"], f"{where}.{name}.layer", n_layer)
        if name == "wrong_eps":
            out[name] = WrongEps(layer=layer)
            continue
        from_step = _int(spec.get("from_step", 0) or 0, f"{where}.{name}.from_step", 0)
        if from_step >= steps:
            raise DemoKnobError(f"{where}.{name}.from_step: {from_step} is past the last step ({steps - 1})")
        out[name] = LayerFault(layer=layer, from_step=from_step)
    if "grad_explosion" in data:
        spec = _as_dict(data["grad_explosion"], f"{where}.grad_explosion")
        _check_keys(spec, ["step", "layer", "scale"], f"{where}.grad_explosion")
        for key in ("step", "layer"):
            if key not in spec:
                raise DemoKnobError(f"{where}.grad_explosion.{key}: required")
        step = _int(spec["step"], f"{where}.grad_explosion.step", 0)
        if step >= steps:
            raise DemoKnobError(f"{where}.grad_explosion.step: {step} is past the last step ({steps - 1})")
        scale = _float(spec.get("scale", 1e4), f"{where}.grad_explosion.scale")
        if not scale > 0 or scale == float("inf"):
            raise DemoKnobError(f"{where}.grad_explosion.scale: must be a finite number > 0, got {scale}")
        out["grad_explosion"] = GradExplosion(
            step=step, layer=_layer(spec["layer"], f"{where}.grad_explosion.layer", n_layer), scale=scale
        )
    overflow, lowp = out.get("fp16_overflow"), out.get("lowp_softmax")
    if overflow is not None and lowp is not None and overflow.layer == lowp.layer:
        raise DemoKnobError(
            f"{where}: fp16_overflow and lowp_softmax both replace block {overflow.layer}'s softmax; use two blocks"
        )
    return DemoFaults(**out)


def resolve_knobs(source: Any = None) -> DemoKnobs:
    """Turn a knob mapping (sizes optional, filled from the preset) into validated ``DemoKnobs``."""
    if isinstance(source, DemoKnobs):
        return source
    data = {k: v for k, v in _as_dict(source, "demo").items() if v is not None}
    _check_keys(data, [f.name for f in fields(DemoKnobs)], "demo")
    preset = data.get("preset", "default")
    if preset not in PRESETS:
        raise DemoKnobError(f"demo.preset: unknown preset {preset!r} (expected one of {', '.join(PRESETS)})")
    sizes = dict(PRESETS[preset])
    for name in SIZE_FIELDS:
        if name in data:
            sizes[name] = _int(data[name], f"demo.{name}", 1)
    if sizes["d_model"] % sizes["n_head"]:
        raise DemoKnobError(f"demo.n_head: {sizes['n_head']} does not divide d_model {sizes['d_model']}")
    if sizes["vocab"] < 2:
        raise DemoKnobError(f"demo.vocab: must be >= 2, got {sizes['vocab']}")
    steps = _int(data.get("steps", 5), "demo.steps", 1)
    lr = _float(data.get("lr", 1e-3), "demo.lr")
    if not lr > 0:
        raise DemoKnobError(f"demo.lr: must be > 0, got {lr}")
    seed = _int(data.get("seed", 1234), "demo.seed", 0)
    dtype = data.get("dtype", "fp32")
    if dtype not in DTYPES:
        raise DemoKnobError(f"demo.dtype: unknown dtype {dtype!r} (expected one of {', '.join(DTYPES)})")
    faults = _resolve_faults(data.get("faults"), sizes["n_layer"], steps)
    return DemoKnobs(preset=preset, steps=steps, lr=lr, seed=seed, dtype=dtype, faults=faults, **sizes)
