"""Which ranks of a run hold the same model replica, as pipeline stages of tensor-parallel shards.

From a layout description (:class:`schemas.layout.ParallelLayout`, for dumps without placements: Megatron-style
manual tensor parallel, msprobe's) or, without one, from the device meshes the dump records (docs/FORMAT.md
``tensors.dist``): ranks linked by a mesh form one group. Each group becomes one merged piece, numbered by its
data-parallel index (the piece of replica 0 pairs with rank 0 of a single-process run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.dumps.source import DumpSource
from schemas.layout import ParallelLayout


@dataclass(frozen=True)
class Group:
    piece: int  # the merged piece's rank id
    stages: Tuple[Tuple[int, ...], ...]  # pipeline stages in model order, each its tensor-parallel ranks in order
    # data-parallel replicas of a recorded 2-d layout: the tensor-parallel sub-meshes (each holds one batch slice)
    replicas: Tuple[Tuple[int, ...], ...] = ()

    @property
    def ranks(self) -> List[int]:
        return [r for stage in self.stages for r in stage]


@dataclass(frozen=True)
class SideLayout:
    groups: Tuple[Group, ...]
    origin: str  # "description" or "placements"

    @property
    def merges(self) -> bool:
        return any(len(g.ranks) > 1 for g in self.groups)

    def shape(self) -> Tuple[Tuple[Tuple[int, ...], ...], ...]:
        return tuple(g.stages for g in self.groups)

    def describe(self) -> str:
        g = self.groups[0]
        if self.origin != "description":
            return "{} group(s) of {} rank(s){} (from the recorded placements)".format(
                len(self.groups), len(g.ranks), ", data-parallel replicas of {}".format(len(g.replicas[0]))
                if g.replicas else "")
        return "{} group(s) of {} rank(s) (tp {}, pp {}; from the layout description)".format(
            len(self.groups), len(g.ranks), len(g.stages[0]), len(g.stages))


class LayoutError(ValueError):
    """The layout does not fit the dump (one line)."""


def from_description(layout: ParallelLayout, ranks: Sequence[int], field_name: str) -> SideLayout:
    present = set(ranks)
    if present != set(range(layout.ranks)):
        raise LayoutError("{}: the layout describes ranks 0-{} but the dump holds ranks {}".format(
            field_name, layout.ranks - 1, _span(sorted(present))))
    by_dp: Dict[Tuple[int, int, int], Dict[Tuple[int, int], int]] = {}
    for rank in range(layout.ranks):
        c = layout.coords(rank)
        by_dp.setdefault((c["dp"], c.get("cp", 0), c.get("ep", 0)), {})[(c["pp"], c["tp"])] = rank
    groups = []
    for piece, key in enumerate(sorted(by_dp)):
        cells = by_dp[key]
        stages = tuple(tuple(cells[(s, t)] for t in range(layout.tp)) for s in range(layout.pp))
        groups.append(Group(piece, stages))
    return SideLayout(tuple(groups), "description")


def from_placements(source: DumpSource) -> Optional[SideLayout]:
    """Groups of ranks linked by the device meshes the dump records (the first step of each rank); None when the
    dump records none (or is not ours)."""
    reader_of = getattr(source, "_reader", None)
    if reader_of is None:
        return None
    ranks = source.ranks()
    parent = {r: r for r in ranks}

    def find(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    seen_mesh = False
    activation_meshes: Dict[Tuple[int, ...], None] = {}
    for rank in ranks:
        steps = source.steps(rank)
        if not steps:
            continue
        try:
            cols = reader_of(rank).tensors(step=steps[0], columns=["dist", "slot"])
        except (KeyError, ValueError):
            return None
        texts = cols["dist"]
        for text, slot in set(zip(texts.tolist(), cols["slot"].tolist())):
            if str(slot).startswith(("input", "output")) and _mesh_dims(text) == 1:
                activation_meshes[tuple(_mesh_ranks(text))] = None
        for text in set(texts.tolist()):
            members = _mesh_ranks(text)
            members = [m for m in members if m in parent]
            if len(members) < 2:
                continue
            seen_mesh = True
            root = find(members[0])
            for m in members[1:]:
                parent[find(m)] = root
    if not seen_mesh:
        return None
    comps: Dict[int, List[int]] = {}
    for r in ranks:
        comps.setdefault(find(r), []).append(r)
    groups = tuple(Group(i, (tuple(sorted(c)),), _replicas(c, list(activation_meshes)))
                   for i, c in enumerate(sorted(comps.values(), key=min)))
    return SideLayout(groups, "placements")


def _replicas(component: List[int], meshes: List[Tuple[int, ...]]) -> Tuple[Tuple[int, ...], ...]:
    """The 1-d meshes of the activations that split a group into equal, disjoint, smaller sub-groups (tensor
    parallel inside data parallel); () when they do not."""
    subs = sorted({m for m in meshes if set(m) <= set(component) and len(m) < len(component)}, key=min)
    members = [r for m in subs for r in m]
    if not subs or len(set(len(m) for m in subs)) != 1 or sorted(members) != sorted(component):
        return ()
    return tuple(subs)


def _mesh_dims(text: str) -> int:
    try:
        return len(json.loads(text).get("placements") or ()) if text and '"mesh"' in text else 0
    except (ValueError, AttributeError):
        return 0


def _mesh_ranks(text: str) -> List[int]:
    if not text or '"mesh"' not in text:
        return []
    try:
        mesh = json.loads(text).get("mesh")
        return [int(v) for v in np.asarray(mesh, dtype=np.int64).reshape(-1).tolist()]
    except (ValueError, TypeError, AttributeError):
        return []


def _span(ranks: List[int]) -> str:
    if ranks and ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return "{}-{}".format(ranks[0], ranks[-1])
    return ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")
