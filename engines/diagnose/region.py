"""What stage 2 captures: the top suspects of stage 1 and the ops that produced their inputs.

Each suspect brings its own record (a target-only region: all its ops and the op it feeds; a backward record:
its forward call too, whose tensors its gradient depends on), and every input's producer along the dataflow links
of the stage-1 target dump (engines/compare/dataflow.py): the re-ranking then sees each suspect's inputs as the
producer wrote them, so an input error the statistics could not see is measured.
"""

from __future__ import annotations

from typing import Any, Dict, List, Set

import numpy as np

from engines.dumps.rows import IO_INPUT, IO_PARAM, KIND_API

_DIRECTIONS = ("forward", "backward")


def _twin(record: str) -> str:
    """The forward call of a backward record (same call index), and the backward of a forward one."""
    tokens = record.split(".")
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i] in _DIRECTIONS:
            tokens[i] = "forward" if tokens[i] == "backward" else "backward"
            return ".".join(tokens)
    return record


def _is_module(record: str) -> bool:
    return record.startswith(("Module.", "Cell."))


def _own_records(group: Dict[str, Any]) -> List[str]:
    names = [group["record"]] + list(group.get("members") or [])
    for key in ("last_op", "link"):
        # a module in `list` captures everything run inside it (mix level): the API calls that consume the
        # region's output stand for a module link (added from the dataflow links)
        if group.get(key) and not _is_module(str(group[key])):
            names.append(str(group[key]))
    if group.get("direction") == "backward":
        names += [_twin(n) for n in list(names)]
    return names


def suspect_region(groups: List[Dict[str, Any]], cols: Dict[str, Any], step: int) -> List[str]:
    """Full record names to capture in stage 2 (dump order where the rows know it), at step ``step``."""
    wanted: Set[str] = set()
    for group in groups:
        wanted.update(_own_records(group))
    if cols and all(k in cols for k in ("record", "io", "step", "t_valid", "order")):
        regions = {str(m) for g in groups for m in (g.get("members") or [])}
        wanted |= _producers(cols, wanted, regions, step)
    order: Dict[str, int] = {}
    if cols and "record" in cols and "order" in cols:
        for rec, pos in zip(cols["record"].tolist(), cols["order"].tolist()):
            order.setdefault(str(rec), int(pos))
    return sorted(wanted, key=lambda r: (order.get(r, 1 << 62), r))


def _producers(cols: Dict[str, Any], records: Set[str], regions: Set[str], step: int) -> Set[str]:
    """The API calls that produced the inputs of ``records``, and those that consume the outputs of the
    target-only ``regions`` (their first matched consumers), at ``step``."""
    from engines.compare import dataflow

    try:
        prod = dataflow.producers(cols, api_only=True)
    except (KeyError, ValueError):  # a result table without the columns the links need
        return set()
    rec = cols["record"]
    names = [str(r) for r in rec.tolist()]
    inputs = (cols["step"] == step) & ((cols["io"] == IO_INPUT) | (cols["io"] == IO_PARAM)) & (prod >= 0)
    mine = np.fromiter((r in records for r in names), bool, len(names))
    out = {names[p] for p in prod[np.flatnonzero(mine & inputs)].tolist()}
    if regions:
        api = cols["kind"] == KIND_API
        fed = np.fromiter((names[p] in regions for p in np.maximum(prod, 0).tolist()), bool, len(names))
        out |= {names[i] for i in np.flatnonzero(inputs & fed & api).tolist() if names[i] not in regions}
    return out
