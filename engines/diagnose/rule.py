"""When a ranking names one op, and when it is inconclusive (docs/DIAGNOSE.md, "The inconclusive rule").

A ranking is *conclusive* when its top suspect

1. adds error: its score (output error over the larger of its input error and the error its dtypes explain,
   engines/compare/divergence.py) is at least ``score_min`` (4);
2. stands out: its score is at least ``ratio_min`` (2) times the runner-up's, the runner-up being the best
   suspect that is not the same op (its backward, or a region sharing an op with it);
3. is not explained by its dtypes: its output error is at least ``score_min`` times the error its output dtypes
   explain (the floor: 2^-20, or the unit roundoff of bfloat16/float16 outputs on either side).

Optimizer-update ops are judged only when no forward or backward op differs: they consume gradients, and Adam's
normalisation amplifies any relative error in them, so an error that reaches them from the model is not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional

SCORE_MIN = 4.0
RATIO_MIN = 2.0
_DIRECTIONS = frozenset(("forward", "backward"))


def op_identity(record: str) -> str:
    """A record without its direction: ``Tensor.to.0`` for ``Tensor.to.0.forward`` and ``.backward``."""
    return ".".join(t for t in str(record).split(".") if t not in _DIRECTIONS)


def identity(group: Dict[str, Any]) -> FrozenSet[str]:
    members = group.get("members") or []
    names = members if members else [group["record"]]
    return frozenset(op_identity(m) for m in names)


@dataclass
class Judgement:
    """One stage's reading of its ranking."""

    conclusive: bool
    reason: str
    top: Optional[Dict[str, Any]] = None
    runner_up: Optional[Dict[str, Any]] = None
    ratio: Optional[float] = None
    explained_err: Optional[float] = None
    differs: bool = True  # False: no op's output differs at all

    def to_dict(self) -> Dict[str, Any]:
        return {"conclusive": self.conclusive, "reason": self.reason, "differs": self.differs,
                "top": _brief(self.top), "runner_up": _brief(self.runner_up), "ratio": self.ratio,
                "explained_err": self.explained_err}


def _brief(group: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    if group is None:
        return None
    from engines.diagnose.evidence import key_op

    keys = ("record", "kind", "direction", "phase", "score", "out_err", "in_err", "rank", "step", "steps", "where",
            "members", "link", "note")
    out = {k: group.get(k) for k in keys}
    out["op"] = key_op(group)
    return out


def _differs(group: Dict[str, Any]) -> bool:
    err = group.get("out_err")
    return err is not None and err > 0


def candidates(groups: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The suspects a verdict may name, best first: forward/backward ones when any of them differs, else the
    optimizer update's."""
    model = [g for g in groups if g.get("phase") != "update" and _differs(g)]
    return model or [g for g in groups if _differs(g)]


def floor_of(divergence: Dict[str, Any], group: Dict[str, Any]) -> float:
    """The error the dtypes of a suspect's outputs explain (the ranking's floor for its best entry)."""
    floors = divergence.get("floor")
    pos = int(group.get("position") or 0) - 1
    if floors is None or not 0 <= pos < len(floors):
        return 2.0 ** -20
    return float(floors[pos])


def judge(groups: List[Dict[str, Any]], divergence: Dict[str, Any], *, score_min: float = SCORE_MIN,
          ratio_min: float = RATIO_MIN) -> Judgement:
    """Whether ``groups`` (a compare's ``suspect_groups``, best first) name one op."""
    ranked = candidates(groups)
    if not ranked:
        return Judgement(False, "no op's output differs between the two runs", differs=False)
    top = ranked[0]
    mine = identity(top)
    runner = next((g for g in ranked[1:] if not (identity(g) & mine)), None)
    score = float(top.get("score") or 0.0)
    floor = floor_of(divergence, top)
    ratio = None
    if runner is not None and runner.get("score"):
        ratio = score / float(runner["score"])
    out_err = float(top.get("out_err") or 0.0)
    reasons = []
    if score < score_min:
        reasons.append("the top suspect adds only {:.3g}x the error of its inputs or dtypes (needs {:g}x)".format(
            score, score_min))
    if runner is not None and ratio is not None and ratio < ratio_min:
        reasons.append("the runner-up {} scores {:.3g}, within {:g}x of the top".format(
            runner["record"], float(runner["score"]), ratio_min))
    if out_err < score_min * floor:
        reasons.append("its output error {:.3g} is within {:g}x of what its dtypes explain ({:.3g})".format(
            out_err, score_min, floor))
    if reasons:
        return Judgement(False, "; ".join(reasons), top, runner, ratio, floor)
    why = "score {:.3g} (output error {:.3g}, input error {:.3g}, dtypes explain {:.3g})".format(
        score, out_err, float(top.get("in_err") or 0.0), floor)
    why += "; {:.3g}x the runner-up".format(ratio) if ratio is not None else "; no runner-up"
    return Judgement(True, why, top, runner, ratio, floor)


def same_culprit(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> bool:
    """Whether two stages' top suspects are the same op (a region and the op inside it count as the same)."""
    return a is not None and b is not None and bool(identity(a) & identity(b))
