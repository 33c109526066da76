"""One rank of a grad compare: match steps and parameters, compute similarities and the norm tables."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

import numpy as np

from engines.capture.naming import clean_module_path
from engines.grad_compare.similarity import SimilarityTable, direction_similarity

if TYPE_CHECKING:
    from engines.grad_compare.sources import GradSource


@dataclass
class RankComparison:
    rank: int
    table: SimilarityTable
    target_norms: np.ndarray  # params x steps
    golden_norms: np.ndarray
    unmatched: List[str] = field(default_factory=list)  # parameters on one side only, or with other sizes
    no_direction: List[str] = field(default_factory=list)  # compared by norm only (an L0 dump)


def param_key(name: str) -> str:
    """The name parameters match on: without a leading DDP ``module.`` and FSDP/compile/checkpoint wrapper
    components, so a DDP run compares with a single-device one (docs/decisions/0014-training-setups.md)."""
    return clean_module_path(name, root_is_data_parallel=True) or name


def compare_rank(target: "GradSource", golden: "GradSource", rank: int, steps: Optional[Sequence[int]] = None) -> RankComparison:
    common = sorted(set(target.steps(rank)) & set(golden.steps(rank)))
    if steps:
        wanted = set(int(s) for s in steps)
        common = [s for s in common if s in wanted]
    params: List[str] = []
    index = {}
    numels = {}
    columns = []
    unmatched, no_direction = set(), set()
    for step in common:
        t = target.load(rank, step)
        g = golden.load(rank, step)
        g_index: Dict[str, int] = {}
        for i, name in enumerate(g.names):
            g_index.setdefault(param_key(name), i)
        t_keys = set()
        column = {}
        for i, name in enumerate(t.names):
            t_keys.add(param_key(name))
            j = g_index.get(param_key(name))
            if j is None or int(t.numels[i]) != int(g.numels[j]):
                unmatched.add(name)
                continue
            if name not in index:
                index[name] = len(params)
                params.append(name)
                numels[name] = int(t.numels[i])
            a, b = t.packed[i], g.packed[j]
            if a is None or b is None:
                no_direction.add(name)
                similarity = float("nan")
            else:
                similarity = direction_similarity(a, b, int(t.numels[i]))
            column[name] = (similarity, float(t.norms[i]), float(g.norms[j]))
        unmatched.update(name for name in g.names if param_key(name) not in t_keys)
        columns.append(column)
    shape = (len(params), len(common))
    values = np.full(shape, np.nan)
    t_norms = np.full(shape, np.nan)
    g_norms = np.full(shape, np.nan)
    for s, column in enumerate(columns):
        for name, (similarity, tn, gn) in column.items():
            p = index[name]
            values[p, s], t_norms[p, s], g_norms[p, s] = similarity, tn, gn
    table = SimilarityTable(common, params, np.array([numels[p] for p in params], dtype=np.int64), values)
    return RankComparison(rank, table, t_norms, g_norms, sorted(unmatched - set(params)), sorted(no_direction))
