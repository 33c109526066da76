"""CSV files of a grad compare, per rank in ``<output>/rank<R>/``.

- ``similarities.csv``: msprobe's shape: first row ``step, s0, s1, ...``, then one row per parameter and a
  ``summary`` row (element-weighted); an empty cell where a parameter was not compared at a step;
- ``rule_violations.csv``: ``step, param, similarity, previous, reason`` for every break of the 0.97 / 0.03 rule,
  in order (the first row is the verdict);
- ``layer_ratios.csv``: ``step, depth, layer, target_norm, golden_norm, ratio, over_tolerance, first_over``.
"""

import csv
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

from engines import safe_fs
from engines.grad_compare.layers import LayerRatios
from engines.grad_compare.rule import RuleVerdict
from engines.grad_compare.similarity import SimilarityTable


def _write(path: Path, header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> Path:
    with safe_fs.atomic_file(path, "w", tmp=path.with_name(path.name + ".partial"), newline="",
                             encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def _num(value: Any) -> Any:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def write_similarities(directory: Path, table: SimilarityTable) -> Path:
    return _write(directory / "similarities.csv", ["step", *table.steps], table.rows())


def write_violations(directory: Path, verdict: RuleVerdict) -> Path:
    rows = [[v.step, v.param, v.similarity, _num(v.previous), v.reason] for v in verdict.violations]
    return _write(directory / "rule_violations.csv", ["step", "param", "similarity", "previous", "reason"], rows)


def write_layer_ratios(directory: Path, layers: LayerRatios) -> Path:
    rows = []
    ratio, over = layers.ratio, layers.over
    for s, step in enumerate(layers.steps):
        first = layers.first_over(s)
        for depth, layer in enumerate(layers.layers):
            rows.append([step, depth, layer, _num(float(layers.target[depth, s])), _num(float(layers.golden[depth, s])),
                         _num(float(ratio[depth, s])), int(bool(over[depth, s])), int(depth == first)])
    header = ["step", "depth", "layer", "target_norm", "golden_norm", "ratio", "over_tolerance", "first_over"]
    return _write(directory / "layer_ratios.csv", header, rows)
