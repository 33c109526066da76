"""A grad compare result (``engines.grad_compare``: per rank ``similarities.csv``, ``rule_violations.csv``,
``layer_ratios.csv``) read for the grad compare view, with the thresholds the job used (from ``run.json``)."""

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

SIMILARITIES, VIOLATIONS, LAYERS = "similarities.csv", "rule_violations.csv", "layer_ratios.csv"


class GradResultError(Exception):
    """Not a readable grad compare result (one line naming the file)."""


def rank_dirs(path: Path) -> Dict[int, Path]:
    path = Path(path)
    found = {}
    if (path / SIMILARITIES).is_file():
        name = path.name
        found[int(name[4:]) if name.startswith("rank") and name[4:].isdigit() else 0] = path
        return found
    try:
        children = list(path.iterdir())
    except OSError:
        return {}
    for child in children:
        if child.name.startswith("rank") and child.name[4:].isdigit() and (child / SIMILARITIES).is_file():
            found[int(child.name[4:])] = child
    return dict(sorted(found.items()))


def is_grad_result(path: Path) -> bool:
    return Path(path).is_dir() and bool(rank_dirs(path))


def _float(text: str) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):
        return math.nan


@dataclass
class Violation:
    step: int
    param: str
    similarity: float
    previous: float
    reason: str

    def describe(self, threshold: float, drop: float) -> str:
        if self.reason == "below_threshold":
            return "{:.4f} < {} at its first step".format(self.similarity, threshold)
        return "dropped {:.4f} > {} (from {:.4f})".format(self.previous - self.similarity, drop, self.previous)


@dataclass
class RankResult:
    rank: int
    steps: List[int]
    params: List[str]
    similarity: np.ndarray  # params x steps, NaN where not compared
    summary: Optional[np.ndarray]  # the element-weighted summary row, per step
    violations: List[Violation]
    layers: List[str] = field(default_factory=list)
    layer_steps: List[int] = field(default_factory=list)
    ratio: Optional[np.ndarray] = None  # layers x steps
    over: Optional[np.ndarray] = None
    first_over: Dict[int, int] = field(default_factory=dict)  # step -> layer depth

    def violations_of(self, param: str) -> List[Violation]:
        return [v for v in self.violations if v.param == param]


def read_rank(rank: int, folder: Path) -> RankResult:
    path = folder / SIMILARITIES
    try:
        with open(path, newline="", encoding="utf-8") as handle:
            table = list(csv.reader(handle))
    except OSError as exc:
        raise GradResultError("{}: {}".format(path, exc.strerror or exc)) from None
    if not table or not table[0] or table[0][0] != "step":
        raise GradResultError("{}: not a similarities.csv (its first cell is not 'step')".format(path))
    steps = [int(s) for s in table[0][1:]]
    params, values, summary = [], [], None
    for row in table[1:]:
        if not row:
            continue
        numbers = [_float(v) for v in row[1:]] + [math.nan] * (len(steps) - len(row) + 1)
        if row[0] == "summary":
            summary = np.array(numbers[:len(steps)])
        else:
            params.append(row[0])
            values.append(numbers[:len(steps)])
    similarity = np.array(values, dtype=np.float64).reshape(len(params), len(steps))
    out = RankResult(rank, steps, params, similarity, summary, _violations(folder / VIOLATIONS))
    _layers(folder / LAYERS, out)
    return out


def _violations(path: Path) -> List[Violation]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8") as handle:
        return [Violation(int(r["step"]), r["param"], _float(r["similarity"]), _float(r["previous"]), r["reason"])
                for r in csv.DictReader(handle)]


def _layers(path: Path, out: RankResult) -> None:
    if not path.is_file():
        return
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    steps = sorted({int(r["step"]) for r in rows})
    ratio = np.full((len(layers), len(steps)), np.nan)
    over = np.zeros((len(layers), len(steps)), dtype=bool)
    li = {name: i for i, name in enumerate(layers)}
    si = {s: i for i, s in enumerate(steps)}
    for r in rows:
        i, j = li[r["layer"]], si[int(r["step"])]
        ratio[i, j] = _float(r["ratio"])
        over[i, j] = r["over_tolerance"] == "1"
        if r["first_over"] == "1":
            out.first_over[int(r["step"])] = i
    out.layers, out.layer_steps, out.ratio, out.over = layers, steps, ratio, over


@dataclass
class GradResult:
    path: Path
    ranks: Dict[int, RankResult]
    threshold: float = 0.97
    drop: float = 0.03
    tolerance: float = 0.1
    summary: Dict[str, object] = field(default_factory=dict)

    @classmethod
    def read(cls, path) -> "GradResult":
        path = Path(path)
        dirs = rank_dirs(path)
        if not dirs:
            raise GradResultError("{}: no rank folder with a similarities.csv (is it a grad compare result?)"
                                  .format(path))
        out = cls(path, {rank: read_rank(rank, folder) for rank, folder in dirs.items()})
        run_json = path / "run.json"
        if run_json.is_file():
            try:
                run = json.loads(run_json.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                run = {}
            section = (run.get("config") or {}).get("grad_compare") or {}
            out.threshold = float(section.get("similarity_threshold") or out.threshold)
            out.drop = float(section.get("drop_threshold") or out.drop)
            out.tolerance = float(section.get("layer_tolerance") or out.tolerance)
            out.summary = run.get("summary") or {}
        return out
