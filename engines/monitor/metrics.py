"""Metric and series definitions of the monitor (docs/reference/msprobe-tasks.md §10.3), shared by the hooks, the store and the views.

A *series* is one number per collected step, keyed by ``(tag, name, metric)``:

- ``tag`` says what was measured: ``actv`` (module forward inputs/outputs), ``actv_grad`` (their gradients),
  ``grad_reduced`` (weight gradients read at the optimizer step: after any data-parallel reduction),
  ``grad_unreduced`` (weight gradients when accumulated, before reduction; distributed runs only),
  ``exp_avg`` / ``exp_avg_sq`` (Adam moments), ``update`` (Adam's bias-corrected step direction
  ``m / (sqrt(v) + eps)``), ``update_ratio`` (``lr * |update| / |param|``), ``param_origin`` / ``param_updated``
  (parameters before / after the step), ``mg_direction`` (gradient / momentum sign agreement) and ``train``
  (``loss``, ``grad_norm``: the total gradient norm).
- ``name`` is a module slot (``layers.0.mlp.output_0``, ``layers.0.mlp.input_1``) or a parameter
  (``layers.0.mlp.fc1.weight``).
- ``metric`` is one of :data:`NUMERIC_OPS` (``value`` for single numbers such as the loss).

Definitions: ``min``/``max`` as the tensor holds them; ``mean`` and ``norm`` in float64; ``zeros`` the fraction
of elements with ``|x| < eps``; ``nans`` and ``infs`` counts; ``id`` the value of a 0-dim tensor (NaN otherwise).
"""

from typing import Iterable, List, Tuple

# Order in which the hooks compute and stack the metrics of one tensor.
NUMERIC_OPS = ("min", "max", "mean", "norm", "zeros", "nans", "infs", "id")
# msprobe also accepts these; they describe the tensor and are kept as series metadata, not as values.
DESCRIPTIVE_OPS = ("shape", "dtype")
KNOWN_OPS = NUMERIC_OPS + DESCRIPTIVE_OPS
DEFAULT_OPS = ("norm",)
VALUE = "value"

TAGS = (
    "actv",
    "actv_grad",
    "grad_reduced",
    "grad_unreduced",
    "exp_avg",
    "exp_avg_sq",
    "update",
    "update_ratio",
    "param_origin",
    "param_updated",
    "mg_direction",
    "train",
)

# Metrics the turbulence rule judges (msprobe: norm and mean), plus single-value series (the loss).
TURBULENCE_METRICS = ("norm", "mean", VALUE)


def normalise_ops(ops: Iterable[str]) -> Tuple[List[str], List[str]]:
    """``(numeric ops in canonical order, unknown ops dropped)``; no numeric op left means ``["norm"]``."""
    wanted = [str(op) for op in (ops or [])]
    unknown = [op for op in wanted if op not in KNOWN_OPS]
    numeric = [op for op in NUMERIC_OPS if op in wanted]
    return (numeric or list(DEFAULT_OPS)), unknown


def module_of(tag: str, name: str) -> str:
    """The module a series belongs to: a parameter's owning module, an activation slot's module."""
    if tag == "train":
        return ""
    if tag in ("actv", "actv_grad"):
        module, _, _slot = name.rpartition(".")
        return module
    module, _, _leaf = name.rpartition(".")
    return module


def series_key(tag: str, name: str, metric: str) -> str:
    return f"{tag}/{name}/{metric}"
