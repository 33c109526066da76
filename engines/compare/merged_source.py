"""One side of a compare whose ranks are merged into whole-model pieces (:class:`MergedSource`), and the two hooks
the compare engine calls: :func:`merge_sides` after opening both sides, :func:`after_piece` after comparing a piece.

A piece of a merged side is one model replica (a group of :mod:`engines.compare.layouts`): each pipeline stage's
tensor-parallel ranks merge into whole tensors (:mod:`engines.compare.shard_merge`), and the stages are stitched
in model order (:mod:`engines.compare.pipeline`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.compare import layouts
from engines.compare.layouts import Group, LayoutError, SideLayout
from engines.compare.options import CompareError
from engines.compare.pipeline import fold_micro_batches, micro_batch_count, stitch_stages
from engines.compare.shard_merge import LOCAL, PER_RANK, SHARDS, MergedPiece, Recipe, merge_group
from engines.compare.shard_tensors import MergedTensorSpec, shard_errors
from engines.compare.tensor_metrics import ST_UNMATCHED
from engines.dumps.rows import RowTable, parse_shape
from engines.dumps.source import DumpSource


class MergedSource(DumpSource):
    def __init__(self, base: DumpSource, layout: SideLayout, reference: Optional[DumpSource] = None):
        self.base = base
        self.layout = layout
        self.reference = reference
        self.path = base.path
        self.origin = base.origin
        self._groups = {g.piece: g for g in layout.groups}
        self._held: Optional[Tuple[Tuple[int, int], MergedPiece]] = None
        self._ref_rows: Optional[Tuple[Tuple[int, int], RowTable]] = None
        self.micro_batches = 1
        self.fold_note = ""

    @property
    def framework(self) -> str:
        return self.base.framework

    def ranks(self) -> List[int]:
        return sorted(self._groups)

    def steps(self, rank: int) -> List[int]:
        common: Optional[set] = None
        for r in self._groups[rank].ranks:
            s = set(self.base.steps(r))
            common = s if common is None else common & s
        return sorted(common or ())

    def holds(self) -> Dict[str, bool]:
        return self.base.holds()

    def status(self, rank: int) -> str:
        return self.base.status(self._groups[rank].ranks[0])

    def notes(self) -> List[str]:
        return self.base.notes()

    def describe(self) -> str:
        return "{} (merged: {})".format(self.base.describe(), self.layout.describe())

    def group(self, rank: int) -> Group:
        return self._groups[rank]

    def piece(self, rank: int, step: int) -> MergedPiece:
        if self._held is not None and self._held[0] == (rank, step):
            return self._held[1]
        group = self._groups[rank]
        golden = self._golden_rows(rank, step)
        shapes = dict(zip(golden.name.tolist(), golden.shape.tolist())) if golden is not None else None
        stages = [[self.base.rows(r, step) for r in stage_ranks] for stage_ranks in group.stages]
        m = micro_batch_count([st[0] for st in stages], golden) if golden is not None else 1
        folded = _fold(stages, m) if m > 1 else None
        if m > 1 and folded is None:
            self.fold_note = "micro-batches not merged: the calls of a stage do not divide into {}".format(m)
            m = 1
        trees = [self.base.tree(stage[0], step) for stage in group.stages]
        flat = folded if folded is not None else stages
        renamed, record_mb = stitch_stages(flat, trees) if len(flat) > 1 else ([list(flat[0])], {})
        merged = []
        for tables, stage_ranks in zip(renamed, group.stages):
            if group.replicas and m == 1 and len(group.stages) == 1:
                merged.append(_merge_replicas(tables, list(stage_ranks), group.replicas, shapes))
                continue
            if m == 1:
                merged.append(merge_group(tables, list(stage_ranks), shapes))
                continue
            self.micro_batches = m
            per_rank = [merge_group(tables[k * m:(k + 1) * m], [r] * m, shapes, word="micro-batches",
                                    labels=["rank {} micro-batch {}".format(r, i) for i in range(m)])
                        for k, r in enumerate(stage_ranks)]
            merged.append(per_rank[0] if len(per_rank) == 1 else
                          merge_group([], list(stage_ranks), shapes, pieces=per_rank))
        piece = merged[0] if len(merged) == 1 else _order_stages(_concat(merged), merged, record_mb)
        self._held = ((rank, step), piece)
        return piece

    def _golden_rows(self, rank: int, step: int) -> Optional[RowTable]:
        """The golden piece this piece is compared with (for its shapes and call counts)."""
        ref = self.reference
        if ref is None:
            return None
        ranks = ref.ranks()
        g_rank = rank if rank in ranks else (ranks[0] if len(ranks) == 1 else None)
        if g_rank is None:
            return None
        steps = ref.steps(g_rank)
        g_step = step if step in steps else (steps[0] if len(steps) == 1 else None)
        if g_step is None:
            return None
        if self._ref_rows is not None and self._ref_rows[0] == (g_rank, g_step):
            return self._ref_rows[1]
        rows = ref.rows(g_rank, g_step)
        self._ref_rows = ((g_rank, g_step), rows)
        return rows

    def rows(self, rank: int, step: int) -> RowTable:
        return self.piece(rank, step).rows

    def tensor_spec(self, rank: int, step: int) -> MergedTensorSpec:
        piece = self.piece(rank, step)
        bases = tuple((r, self.base.tensor_spec(r, step)) for r in self._groups[rank].ranks)
        return MergedTensorSpec(bases, tuple(piece.entries))

    def tree(self, rank: int, step: int) -> Dict[str, Optional[str]]:
        out: Dict[str, Optional[str]] = {}
        for stage in self._groups[rank].stages:
            for k, v in self.base.tree(stage[0], step).items():
                out.setdefault(k, v)
        return out

    def close(self) -> None:
        self.base.close()
        if self.reference is not None and self.reference is not self.base:
            pass


def _fold(stages: List[List[RowTable]], m: int) -> Optional[List[List[RowTable]]]:
    """Each stage's tables as its ranks' micro-batch tables (rank 0's m tables, then rank 1's...); None when a
    rank's calls do not divide into m micro-batches."""
    out = []
    for tables in stages:
        flat: List[RowTable] = []
        for t in tables:
            parts = fold_micro_batches(t, m)
            if parts is None:
                return None
            flat.extend(parts)
        out.append(flat)
    return out


def _merge_replicas(tables: List[RowTable], ranks: List[int], replicas: Tuple[Tuple[int, ...], ...],
                    shapes: Optional[Dict[str, str]]) -> MergedPiece:
    """Tensor parallel inside data parallel: rows the whole group merges (shards on the 2-d mesh, identical
    copies) as the group merges them; the others merged within each replica (its batch slice: the golden's shape
    with dimension 0 divided by the replica count), then the replicas concatenated along dimension 0."""
    full = merge_group(tables, ranks, shapes)
    redo = np.isin(full.how, (PER_RANK, LOCAL))
    if not redo.any():
        return full
    by_rank = dict(zip(ranks, tables))
    slice_shapes = _batch_slices(shapes, len(replicas))
    per_replica = [merge_group([by_rank[r] for r in rep], list(rep), slice_shapes) for rep in replicas]
    hier = merge_group([], [rep[0] for rep in replicas], shapes, pieces=per_replica, word="data-parallel replicas",
                       labels=["ranks {}".format("-".join(map(str, rep))) for rep in replicas])
    wanted = set(full.rows.name[redo].tolist())
    keep_hier = np.fromiter((n in wanted for n in hier.rows.name.tolist()), dtype=bool, count=len(hier.rows))
    both = _concat([_subset(full, ~redo), _subset(hier, keep_hier)])
    first = {n: i for i, n in reversed(list(enumerate(full.rows.name.tolist())))}
    key = np.fromiter((first.get(n, len(first)) for n in both.rows.name.tolist()), dtype=np.int64,
                      count=len(both.rows))
    order = np.argsort(key, kind="stable")
    rows = both.rows.take(order)
    rows.order[:] = np.arange(len(rows))
    return MergedPiece(rows, both.entries, both.how[order], [both.why[i] for i in order.tolist()])


def _batch_slices(shapes: Optional[Dict[str, str]], k: int) -> Optional[Dict[str, str]]:
    if shapes is None:
        return None
    out = {}
    for name, text in shapes.items():
        shape = parse_shape(text)
        if shape and shape[0] % k == 0:
            out[name] = json.dumps([shape[0] // k] + list(shape[1:]))
    return out


def _subset(piece: MergedPiece, keep: np.ndarray) -> MergedPiece:
    idx = np.flatnonzero(keep)
    return MergedPiece(piece.rows.take(idx), piece.entries, piece.how[idx], [piece.why[i] for i in idx.tolist()])


def _concat(pieces: List[MergedPiece]) -> MergedPiece:
    entries: List[Any] = []
    tables = []
    for p in pieces:
        rows = p.rows.take(np.arange(len(p.rows)))
        rows.data = np.where(rows.data >= 0, rows.data + len(entries), -1)
        entries.extend(p.entries)
        tables.append(rows)
    table = RowTable.concat(tables)
    return MergedPiece(table, entries, np.concatenate([p.how for p in pieces]), [w for p in pieces for w in p.why])


def _order_stages(piece: MergedPiece, parts: List[MergedPiece], record_mb: Dict[str, int]) -> MergedPiece:
    """Stitched model order, micro-batch by micro-batch: forward rows stage by stage, then backward rows from the
    last stage back, then the rest (the rows of one stage keep their order)."""
    stage = np.concatenate([np.full(len(p.rows), s, np.int64) for s, p in enumerate(parts)])
    rows = piece.rows
    direction = rows.direction.astype(np.int64)
    key_stage = np.where(direction == 1, -stage, stage)
    mb = np.fromiter((record_mb.get(r, 0) for r in rows.record.tolist()), dtype=np.int64, count=len(rows))
    order = np.lexsort((rows.order, key_stage, direction, mb))
    table = rows.take(order)
    table.order[:] = np.arange(len(table))
    return MergedPiece(table, piece.entries, piece.how[order], [piece.why[i] for i in order.tolist()])


def merge_sides(target: DumpSource, golden: DumpSource, opts: Any, notes: List[str]) -> Tuple[DumpSource, DumpSource]:
    """The hook after both sides are opened: merge the ranks of a side whose parallel layout differs from the
    other's (docs/COMPARE.md, "Across parallel layouts"). Sides with the same layout pair rank by rank as before."""
    how = getattr(opts, "merge_ranks", "auto")
    described = opts.target_layout is not None or opts.golden_layout is not None
    if how == "off" or (how == "auto" and not described and len(target.ranks()) == len(golden.ranks())):
        return target, golden  # the same number of ranks and no description: rank by rank, nothing more read
    try:
        t_layout = _layout_of(target, opts.target_layout, "compare.target_layout")
        g_layout = _layout_of(golden, opts.golden_layout, "compare.golden_layout")
    except LayoutError as exc:
        raise CompareError(str(exc)) from None
    t_shape = t_layout.shape() if t_layout is not None else None
    g_shape = g_layout.shape() if g_layout is not None else None
    if t_shape == g_shape and len(target.ranks()) == len(golden.ranks()):
        return target, golden
    if g_layout is not None and g_layout.merges:
        golden = MergedSource(golden, g_layout)
        notes.append("golden ranks merged: " + g_layout.describe())
    if t_layout is not None and t_layout.merges:
        target = MergedSource(target, t_layout, reference=golden)
        notes.append("target ranks merged: " + t_layout.describe())
    return target, golden


def _layout_of(source: DumpSource, description: Any, field_name: str) -> Optional[SideLayout]:
    if description is not None:
        return layouts.from_description(description, source.ranks(), field_name)
    return layouts.from_placements(source)


def after_piece(cols: Dict[str, np.ndarray], target: DumpSource, golden: DumpSource, rank: int, t_step: int,
                g_step: int, mode: str, verdict_codes: Dict[str, int]) -> None:
    """The hook after a piece is compared: rows left out of the comparison become unmatched (with their reason),
    rows kept per rank say why, and in tensor mode every merged row past its warning limit is compared shard by
    shard with the matching slice of the golden tensor: the rank whose shard diverged is named in the row's
    reasons and becomes the rank of its record (so first divergence names it)."""
    if not isinstance(target, MergedSource):
        return
    piece = target.piece(rank, t_step)
    cols["merge_how"] = piece.how.copy()  # for :class:`MergeTally`, wherever this piece was compared
    reasons = cols["reasons"]
    cols["rank"] = cols["rank"].copy()  # the piece's own column: the attribution below changes it
    for i in np.flatnonzero(piece.how == LOCAL):
        cols["matched"][i] = False
        cols["status"][i] = ST_UNMATCHED
        cols["verdict"][i] = verdict_codes["unmatched"]
        cols["rel_err"][i] = math.nan
        reasons[i] = piece.why[i]
    for i in np.flatnonzero(piece.how == PER_RANK):
        reasons[i] = (reasons[i] + "; " if reasons[i] else "") + "kept per rank: " + piece.why[i]
    if mode != "tensor":
        return
    judged = (piece.how == SHARDS) & cols["matched"] & ((cols["verdict"] == verdict_codes["warning"])
                                                        | (cols["verdict"] == verdict_codes["error"]))
    rows = np.flatnonzero(judged & (cols["g_data"] >= 0)) if "g_data" in cols else np.flatnonzero(judged)
    if not rows.size:
        return
    _attribute(cols, piece, target.tensor_spec(rank, t_step), golden, rank, g_step, rows)


def _attribute(cols: Dict[str, np.ndarray], piece: MergedPiece, spec: MergedTensorSpec, golden: DumpSource,
               rank: int, g_step: int, rows: np.ndarray) -> None:
    g_rows = golden.rows(rank, g_step)
    g_index = {name: j for j, name in enumerate(g_rows.name.tolist())}
    t_reader = spec.open()
    g_reader = golden.tensor_spec(rank, g_step).open()
    worst_of_record: Dict[str, Tuple[float, int]] = {}
    try:
        for i in rows.tolist():
            recipe = piece.entries[int(piece.rows.data[i])] if int(piece.rows.data[i]) >= 0 else None
            j = g_index.get(str(cols["golden_name"][i]))
            if not isinstance(recipe, Recipe) or j is None or int(g_rows.data[j]) < 0:
                continue
            try:
                _, numel, _ = g_reader.info(int(g_rows.data[j]))
                errors = shard_errors(recipe, t_reader, g_reader.read(int(g_rows.data[j]), 0, numel))
            except (OSError, ValueError, KeyError):
                continue
            if not errors:
                continue
            text = ", ".join("{} {:.3g}".format(p.name, e) for p, e in errors)
            cols["reasons"][i] = (cols["reasons"][i] + "; " if cols["reasons"][i] else "") + \
                "shards against the golden: " + text
            by_rank: Dict[int, float] = {}
            for p, e in errors:
                by_rank[p.rank] = max(by_rank.get(p.rank, 0.0), e)
            ranked = sorted(by_rank.items(), key=lambda re_: -re_[1])
            top_rank, top = ranked[0]
            rest = ranked[1][1] if len(ranked) > 1 else 0.0
            if top > 0 and top >= 4 * rest:
                record = str(cols["record"][i])
                if top > worst_of_record.get(record, (-1.0, 0))[0]:
                    worst_of_record[record] = (top, top_rank)
    finally:
        t_reader.close()
        g_reader.close()
    for record, (_, r) in worst_of_record.items():
        cols["rank"][cols["record"] == record] = r


@dataclass(frozen=True)
class MergeOptions:
    """What :func:`merge_sides` reads of the compare options (picklable: worker processes merge the sides they
    open themselves)."""

    merge_ranks: str = "auto"
    target_layout: Any = None
    golden_layout: Any = None

    @classmethod
    def of(cls, opts: Any) -> "MergeOptions":
        return cls(getattr(opts, "merge_ranks", "auto"), getattr(opts, "target_layout", None),
                   getattr(opts, "golden_layout", None))


class MergeTally:
    """Counts of the merged rows over the compared pieces (from their ``merge_how`` column, so pieces compared in
    worker processes count too), said in one note a merged side."""

    def __init__(self, target: DumpSource, golden: DumpSource):
        self.target, self.golden = target, golden
        self.counts = np.zeros(LOCAL + 1, dtype=np.int64)
        self.first_why = ""
        self.seen = False

    def add(self, cols: Dict[str, np.ndarray]) -> None:
        how = cols.get("merge_how")
        if how is None:
            return
        self.seen = True
        self.counts += np.bincount(how, minlength=LOCAL + 1)[:LOCAL + 1]
        if not self.first_why:
            for i in np.flatnonzero((how == PER_RANK) | (how == LOCAL))[:1]:
                why = str(cols["reasons"][i]).rpartition("kept per rank: ")[2]
                self.first_why = "{}: {}".format(cols["target_name"][i], why)

    def note(self, notes: List[str], first_piece: Optional[Tuple[int, int]] = None) -> None:
        side = self.target
        if not isinstance(side, MergedSource) or not self.seen:
            return
        if side.micro_batches == 1 and not side.fold_note and first_piece is not None:
            side.piece(*first_piece)  # pieces compared elsewhere: learn the micro-batch count here
        c = self.counts
        text = "target: {} row(s) merged from shards".format(int(c[SHARDS]))
        if side.micro_batches > 1:
            text += " ({} micro-batches a golden call)".format(side.micro_batches)
        elif side.fold_note:
            text += " ({})".format(side.fold_note)
        if c[PER_RANK] or c[LOCAL]:
            text += ", {} kept per rank, {} not compared (first: {})".format(int(c[PER_RANK]), int(c[LOCAL]),
                                                                              self.first_why)
        notes.append(text)
