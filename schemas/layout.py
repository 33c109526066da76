"""How the ranks of a parallel run map to tensor-parallel shards and pipeline stages, for runs whose dumps do not
record it (Megatron-style manual tensor parallel, msprobe dumps). Its fields are msprobe's parallel merge
description (``rank_size, tp, pp, vpp, order``); compare uses it to merge the ranks of one side into whole tensors
(docs/COMPARE.md, "Across parallel layouts").
"""

from typing import Any, Dict, List

from pydantic import field_validator, model_validator

from .base import ConfigModel
from .errors import RuleCollector, echo
from .types import config_error, field

__all__ = ["ParallelLayout", "LAYOUT_AXES", "layout_from_text"]

#: The parallel axes an ``order`` may name; cp and ep have size 1 here (the dumps say nothing of them).
LAYOUT_AXES = ("tp", "cp", "ep", "dp", "pp")


class ParallelLayout(ConfigModel):
    """One side's parallel layout. Ranks are numbered as Megatron numbers them: the first axis of ``order`` varies
    fastest (``tp-cp-ep-dp-pp``: ranks 0..tp-1 are the shards of one tensor-parallel group)."""

    ranks: int = field(..., "Number of ranks of the run (msprobe's rank_size).", ge=1, le=1_000_000)
    tp: int = field(1, "Tensor-parallel size: ranks holding shards of the same tensors.", ge=1)
    pp: int = field(1, "Pipeline-parallel size: stages, stitched in model order.", ge=1)
    vpp: int = field(1, "Virtual pipeline stages per rank (only 1 is merged for now).", ge=1, le=1)
    order: str = field("tp-cp-ep-dp-pp", "Axis order of the rank numbering, fastest first: a '-'-joined "
                                         "permutation of tp, cp, ep, dp, pp (cp and ep may be left out).")

    @field_validator("order")
    @classmethod
    def _order(cls, value: str) -> str:
        axes = [a.strip() for a in value.split("-")]
        if len(set(axes)) != len(axes) or not {"tp", "dp", "pp"} <= set(axes) <= set(LAYOUT_AXES):
            raise config_error(f"must be a '-'-joined permutation of tp, cp, ep, dp, pp (got {echo(value)})",
                               "e.g. tp-cp-ep-dp-pp")
        return "-".join(axes)

    @model_validator(mode="after")
    def _sizes(self) -> "ParallelLayout":
        rules = RuleCollector()
        if self.ranks % (self.tp * self.pp):
            rules.add("ranks", f"{self.ranks} ranks do not split into tp={self.tp} x pp={self.pp} groups",
                      "ranks must be a multiple of tp * pp (the rest is data parallel)")
        rules.raise_if_any()
        return self

    @property
    def dp(self) -> int:
        return self.ranks // (self.tp * self.pp)

    def coords(self, rank: int) -> Dict[str, int]:
        """``{"tp": i, "dp": j, "pp": k, ...}`` of a global rank."""
        sizes = {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": 1, "ep": 1}
        out: Dict[str, int] = {}
        stride = 1
        for axis in self.order.split("-"):
            out[axis] = (rank // stride) % sizes[axis]
            stride *= sizes[axis]
        return out


def layout_from_text(text: str) -> Dict[str, Any]:
    """``"ranks=4,tp=2,pp=2,order=tp-dp-pp"`` (the command line's form) as the fields of a :class:`ParallelLayout`;
    ValueError with one line for text that is not ``key=value`` pairs."""
    out: Dict[str, Any] = {}
    names: List[str] = list(ParallelLayout.model_fields)
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in names:
            raise ValueError("layout {!r}: expected key=value pairs of {} (e.g. ranks=4,tp=2,pp=2)".format(
                text, ", ".join(names)))
        if key == "order":
            out[key] = value
        else:
            try:
                out[key] = int(value)
            except ValueError:
                raise ValueError("layout {!r}: {} must be a whole number".format(text, key)) from None
    return out
