"""Merge the rows that the ranks of one tensor-parallel group hold for one step into rows of whole tensors.

A row (record + slot) present on every rank of the group becomes one row:

- recorded placements (docs/FORMAT.md ``tensors.dist``): the whole tensor is ``Shard(d)`` shards concatenated along
  ``d`` in mesh-coordinate order, one ``Replicate`` copy, or the sum (mean, max, min) of ``Partial`` copies, mesh
  dimension by mesh dimension from the last, as torch lays them out;
- a plain tensor: one copy when every rank holds the same (equal hashes, else equal shape and statistics);
  otherwise a shard of the golden's tensor when exactly one dimension explains the local shapes (the locals equal
  the golden elsewhere and their sizes along it add up to the golden's), concatenated in the group's rank order.

Statistics merge exactly where the maths allows: max of maxes, min of mins, mean from per-shard mean × count
sums, norm from squared norms; a ``Partial(sum)`` tensor keeps its mean only. Hashes of a whole tensor cannot be
built from its shards' hashes: a merged row has none. What cannot merge stays per rank (:data:`PER_RANK`) or is
left out of the comparison (:data:`LOCAL`), with the reason (docs/COMPARE.md, "Across parallel layouts").
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import numpy as np

from engines.dumps.rows import FIELDS, V_MAX, V_MEAN, V_MIN, V_NORM, RowBuilder, RowTable, parse_shape

#: how a row of a merged piece came to be (``MergedPiece.how``)
WHOLE, COPY, SHARDS, PER_RANK, LOCAL = 0, 1, 2, 3, 4

_PLACEMENT = re.compile(r"^(?:S\((-?\d+)\)|Shard\(dim=(-?\d+)\)|R|Replicate\(\)|P\((\w+)\)|P|Partial\((\w+)\))$")
_I = {name: i for i, name in enumerate(FIELDS)}
X = TypeVar("X")
Placement = Tuple[str, int]  # ("S", dim) | ("R", 0) | ("P", 0) with the reduce op in the kind: "P:sum"


class Unmergeable(ValueError):
    """A row's shards cannot be merged (the message says why; the row stays per rank)."""


def parse_placement(text: str, ndim: int) -> Placement:
    m = _PLACEMENT.match(text.strip())
    if not m:
        raise Unmergeable("placement {!r} is not merged".format(text))
    dim = m.group(1) or m.group(2)
    if dim is not None:
        d = int(dim)
        if not -ndim <= d < ndim:
            raise Unmergeable("placement {} does not fit a {}-d tensor".format(text, ndim))
        return ("S", d % ndim)
    if text.strip().startswith("R"):
        return ("R", 0)
    op = (m.group(3) or m.group(4) or "sum").lower()
    if op not in ("sum", "avg", "max", "min"):
        raise Unmergeable("placement {} is not merged".format(text))
    return ("P:" + op, 0)


@dataclass(frozen=True)
class Part:
    rank: int
    loc: int  # the rank's tensor locator (-1: no data, or ``inner`` builds it)
    coord: Tuple[int, ...]
    shape: Tuple[int, ...]
    inner: Optional["Recipe"] = None  # a part that is itself merged (a rank's micro-batches, concatenated)
    label: str = ""  # how messages name it ("rank 1", "rank 0 micro-batch 1")

    @property
    def has_data(self) -> bool:
        return self.loc >= 0 or self.inner is not None

    @property
    def name(self) -> str:
        return self.label or "rank {}".format(self.rank)


@dataclass(frozen=True)
class Recipe:
    """How one whole tensor is built from its shards (picklable: worker processes assemble it)."""

    parts: Tuple[Part, ...]
    mesh_shape: Tuple[int, ...]
    placements: Tuple[Placement, ...]
    shape: Tuple[int, ...]

    def reduce(self, values: Dict[Tuple[int, ...], X], combine: Callable[[Placement, List[X]], X]) -> X:
        """Fold per-coordinate values over the mesh, last mesh dimension first (torch shards mesh dim 0 first)."""
        level: Dict[Tuple[int, ...], Any] = dict(values)
        for dim in reversed(range(len(self.mesh_shape))):
            groups: Dict[Tuple[int, ...], List[Tuple[int, Any]]] = {}
            for coord, value in level.items():
                groups.setdefault(coord[:dim], []).append((coord[dim], value))
            level = {p: combine(self.placements[dim], [v for _, v in sorted(items, key=lambda cv: cv[0])])
                     for p, items in groups.items()}
        return level[()]

    def assemble(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        """The whole tensor from each part's array (in ``parts`` order)."""
        return self.reduce({p.coord: a.reshape(p.shape) for p, a in zip(self.parts, arrays)}, _combine_arrays)

    def boxes(self) -> Optional[List[Tuple[Part, Tuple[int, ...]]]]:
        """(part, offset) of each part inside the whole tensor; None when a partial placement makes parts
        overlap (no part is a slice of the whole)."""
        if any(kind.startswith("P") for kind, _ in self.placements):
            return None
        start = {p.coord: ([(p, (0,) * len(p.shape))], p.shape) for p in self.parts}
        return self.reduce(start, _combine_boxes)[0]


def _combine_arrays(placement: Placement, xs: List[np.ndarray]) -> np.ndarray:
    kind, dim = placement
    if kind == "S":
        return np.concatenate(xs, axis=dim)
    if kind == "R":
        return xs[0]
    if kind == "P:max":
        return np.maximum.reduce(xs)
    if kind == "P:min":
        return np.minimum.reduce(xs)
    total = xs[0].copy()
    for x in xs[1:]:
        total += x
    return total / len(xs) if kind == "P:avg" else total


def _combine_boxes(placement: Placement, xs: List[Any]) -> Any:
    kind, dim = placement
    if kind == "R":
        return [item for items, _ in xs for item in items], xs[0][1]
    out, shift = [], 0
    for items, shape in xs:
        for part, off in items:
            out.append((part, off[:dim] + (off[dim] + shift,) + off[dim + 1:]))
        shift += shape[dim]
    first = xs[0][1]
    return out, first[:dim] + (shift,) + first[dim + 1:]


@dataclass
class _Stat:
    max: float
    min: float
    total: float  # mean × count
    sq: float  # norm²
    n: int
    valid: int
    nonfinite: int


def _stat_of(t: RowTable, j: int) -> _Stat:
    n = int(t.numel[j])
    valid = int(t.valid[j])
    if n < 0:
        valid &= ~V_MEAN
    return _Stat(float(t.max[j]), float(t.min[j]), float(t.mean[j]) * max(n, 0), float(t.norm[j]) ** 2, n, valid,
                 int(t.nonfinite[j]))


def _combine_stats(placement: Placement, xs: List[_Stat]) -> _Stat:
    kind, _ = placement
    valid = V_MAX | V_MIN | V_MEAN | V_NORM
    for x in xs:
        valid &= x.valid
    if kind == "R":
        return xs[0]
    if kind == "S":
        nonfinite = -1 if any(x.nonfinite < 0 for x in xs) else sum(x.nonfinite for x in xs)
        return _Stat(_nanmax([x.max for x in xs]), -_nanmax([-x.min for x in xs]), sum(x.total for x in xs),
                     sum(x.sq for x in xs), sum(x.n for x in xs), valid, nonfinite)
    nan = math.nan
    if kind == "P:max":
        return _Stat(_nanmax([x.max for x in xs]), nan, nan, nan, xs[0].n, valid & V_MAX, -1)
    if kind == "P:min":
        return _Stat(nan, -_nanmax([-x.min for x in xs]), nan, nan, xs[0].n, valid & V_MIN, -1)
    total = sum(x.total for x in xs)
    return _Stat(nan, nan, total / len(xs) if kind == "P:avg" else total, nan, xs[0].n, valid & V_MEAN, -1)


def _nanmax(values: Sequence[float]) -> float:
    return math.nan if any(math.isnan(v) for v in values) else max(values)


@dataclass
class MergedPiece:
    """The rows of one merged piece. ``data`` of a row indexes ``entries``: ``(rank, loc)`` of one stored tensor,
    or the :class:`Recipe` of a whole one. ``how`` says how each row came to be, ``why`` the reason of a row that
    stays per rank or is left out."""

    rows: RowTable
    entries: List[Any]
    how: np.ndarray
    why: List[str]


class _Out:
    """Builds a merged piece row by row."""

    def __init__(self) -> None:
        self.builder = RowBuilder()
        self.entries: List[Any] = []
        self.how: List[int] = []
        self.why: List[str] = []
        self.args: Dict[str, str] = {}

    def copy(self, t: RowTable, j: int, rank: int, how: int, why: str, entry: Any) -> None:
        """Row ``j`` of ``t`` as it is; ``entry`` its tensor data (None: none, or not to be read)."""
        row = [getattr(t, f)[j] for f in FIELDS]
        row[_I["rank"]] = rank
        row[_I["data"]] = self._entry(entry)
        self.builder.append(tuple(row))
        self.how.append(how)
        self.why.append(why)

    def merged(self, t: RowTable, j: int, rank: int, recipe: Recipe, stat: _Stat, has_data: bool) -> None:
        row = [getattr(t, f)[j] for f in FIELDS]
        shape = recipe.shape
        n = int(np.prod(shape)) if shape else 1
        row[_I["rank"]] = rank
        row[_I["shape"]] = json.dumps(list(shape))
        row[_I["numel"]] = n
        row[_I["max"]], row[_I["min"]] = stat.max, stat.min
        row[_I["mean"]] = stat.total / stat.n if stat.n > 0 else math.nan
        row[_I["norm"]] = math.sqrt(stat.sq) if stat.sq >= 0 else math.nan
        row[_I["valid"]] = stat.valid
        row[_I["nonfinite"]] = stat.nonfinite
        row[_I["crc32"]] = ""  # a whole tensor's hash is not known from its shards' hashes
        row[_I["data"]] = self._entry(recipe if has_data else None)
        self.builder.append(tuple(row))
        self.how.append(SHARDS)
        self.why.append("")

    def leave_out_misshapen(self, golden_shapes: Dict[str, str]) -> None:
        """A row kept per rank whose shape is not the golden's would only say so (a shape error): left out."""
        rows = self.builder.rows
        for i, how in enumerate(self.how):
            if how != PER_RANK:
                continue
            name, shape = rows[i][_I["name"]], rows[i][_I["shape"]]
            whole = golden_shapes.get(name)
            if whole is not None and parse_shape(whole) is not None and parse_shape(whole) != parse_shape(shape):
                row = list(rows[i])
                row[_I["data"]] = -1
                rows[i] = tuple(row)
                self.how[i] = LOCAL
                self.why[i] += "; its shape is not the golden's {}: not compared".format(whole)

    def _entry(self, entry: Any) -> int:
        if entry is None:
            return -1
        self.entries.append(entry)
        return len(self.entries) - 1

    def build(self) -> MergedPiece:
        rows = self.builder.build()
        rows.args = self.args
        rows.dist = np.full(len(rows), "", dtype=object)
        rows.order[:] = np.arange(len(rows))
        return MergedPiece(rows, self.entries, np.asarray(self.how, dtype=np.uint8), self.why)


_DIST_CACHE: Dict[str, Optional[Dict[str, Any]]] = {}


def _dist(text: Any) -> Optional[Dict[str, Any]]:
    """A row's placement record, None for a plain tensor (and for an awaited async-collective result)."""
    if not text:
        return None
    got = _DIST_CACHE.get(text)
    if got is None and text not in _DIST_CACHE:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        got = value if isinstance(value, dict) and "placements" in value and "global_shape" in value else None
        if len(_DIST_CACHE) > 4096:
            _DIST_CACHE.clear()
        _DIST_CACHE[text] = got
    return got


def _same_copy(t0: RowTable, j0: int, t: RowTable, j: int) -> bool:
    if t0.crc32[j0] and t.crc32[j]:
        return bool(t0.crc32[j0] == t.crc32[j])
    if t0.shape[j0] != t.shape[j] or t0.text[j0] != t.text[j]:
        return False
    for s in ("max", "min", "mean", "norm"):
        a, b = float(getattr(t0, s)[j0]), float(getattr(t, s)[j])
        if not (a == b or (math.isnan(a) and math.isnan(b))):
            return False
    return True


def infer_shard_dim(local: List[Tuple[int, ...]], whole: Tuple[int, ...]) -> Optional[int]:
    """The one dimension along which the local shapes tile the golden's shape, None when none or several do."""
    found = []
    for d in range(len(whole)):
        if any(len(s) != len(whole) for s in local):
            return None
        if all(s[:d] + s[d + 1:] == whole[:d] + whole[d + 1:] for s in local) and \
                sum(s[d] for s in local) == whole[d]:
            found.append(d)
    return found[0] if len(found) == 1 and len(local) > 1 else None


class _Members:
    """The tables being merged: one per rank of a tensor-parallel group, or one per micro-batch of a rank."""

    def __init__(self, tables: Sequence[RowTable], ranks: Sequence[int], entries: Optional[Sequence[Sequence[Any]]],
                 labels: Optional[Sequence[str]], word: str):
        self.tables, self.ranks, self.entries, self.word = tables, list(ranks), entries, word
        self.labels = list(labels) if labels else ["rank {}".format(r) for r in ranks]

    def entry(self, k: int, j: int) -> Any:
        """A row's tensor data: ``(rank, loc)``, a :class:`Recipe`, or None."""
        loc = int(self.tables[k].data[j])
        if loc < 0:
            return None
        return self.entries[k][loc] if self.entries is not None else (self.ranks[k], loc)

    def part(self, k: int, j: int, coord: Tuple[int, ...], shape: Tuple[int, ...]) -> Part:
        e = self.entry(k, j)
        inner = e if isinstance(e, Recipe) else None
        loc = int(e[1]) if isinstance(e, tuple) else -1
        return Part(self.ranks[k], loc, coord, shape, inner, self.labels[k])

    def which(self) -> str:
        return "{} {}".format(self.word, ", ".join(self.labels) if self.word != "ranks" else list(self.ranks))


def merge_group(tables: Sequence[RowTable], ranks: Sequence[int], golden_shapes: Optional[Dict[str, str]], *,
                pieces: Optional[Sequence[MergedPiece]] = None, labels: Optional[Sequence[str]] = None,
                word: str = "ranks") -> MergedPiece:
    """Rows of the ranks of one tensor-parallel group (``ranks`` in shard order, one table each) as one piece.
    ``golden_shapes`` (row name -> shape text of the golden) lets plain shards be recognised. Members that are
    merged pieces themselves are passed as ``pieces`` (their rows kept per rank or left out stay so); ``labels``
    and ``word`` name the members in reasons."""
    if pieces is not None:
        tables = [p.rows for p in pieces]
    m = _Members(tables, ranks, [p.entries for p in pieces] if pieces is not None else None, labels, word)
    out = _Out()
    for t in tables:
        out.args.update(t.args)
    settled = [np.isin(p.how, (PER_RANK, LOCAL)) for p in pieces] if pieces is not None else \
        [np.zeros(len(t), dtype=bool) for t in tables]
    index = [{name: j for j, name in enumerate(t.name.tolist()) if not settled[k][j]} for k, t in enumerate(tables)]
    seen: set = set()
    for k, t in enumerate(tables):  # the first member's rows in its order, then rows some other member alone holds
        for j, name in enumerate(t.name.tolist()):
            if settled[k][j]:
                assert pieces is not None
                out.copy(t, j, int(t.rank[j]), int(pieces[k].how[j]), pieces[k].why[j], m.entry(k, j))
                continue
            if name in seen:
                continue
            seen.add(name)
            where = [(kk, index[kk].get(name)) for kk in range(len(tables))]
            if any(jj is None for _, jj in where):
                held = [m.labels[a] for a, b in where if b is not None]
                for kk, jj in where:
                    if jj is not None:
                        out.copy(tables[kk], jj, m.ranks[kk], PER_RANK, "on {} only".format(", ".join(held)),
                                 m.entry(kk, jj))
                continue
            _merge_row(out, m, [int(jj) for _, jj in where if jj is not None], name, golden_shapes)
    if golden_shapes:
        out.leave_out_misshapen(golden_shapes)
    return out.build()


def _merge_row(out: _Out, m: _Members, js: List[int], name: str, golden_shapes: Optional[Dict[str, str]]) -> None:
    tables, ranks = m.tables, m.ranks
    t0, j0 = tables[0], js[0]
    if len(tables) == 1:
        out.copy(t0, j0, ranks[0], WHOLE, "", m.entry(0, j0))
        return
    dists = [_dist(t.dist[j]) if t.dist is not None else None for t, j in zip(tables, js)]
    if any(d is not None for d in dists):
        try:
            recipe = _placed_recipe(m, js, dists)
            stat = recipe.reduce({p.coord: _stat_of(tables[k], js[k]) for k, p in enumerate(recipe.parts)},
                                 _checked_stats(m))
        except Unmergeable as exc:
            _per_rank(out, m, js, str(exc))
            return
        out.merged(t0, j0, ranks[0], recipe, stat, all(p.has_data for p in recipe.parts))
        return
    if all(_same_copy(t0, j0, t, j) for t, j in zip(tables[1:], js[1:])):
        out.copy(t0, j0, ranks[0], COPY, "", m.entry(0, j0))
        return
    shapes = [parse_shape(t.shape[j]) for t, j in zip(tables, js)]
    whole = parse_shape(golden_shapes.get(name, "")) if golden_shapes else None
    if not bool(t0.is_tensor[j0]) or whole is None or any(s is None for s in shapes):
        _per_rank(out, m, js, "copies differ across {}".format(m.which()))
        return
    if all(s == whole for s in shapes):
        for k, (t, j) in enumerate(zip(tables, js)):
            out.copy(t, j, ranks[k], LOCAL, "local values: the copies on {} differ and each has the golden's "
                                            "shape (a partial sum before its all-reduce?); not compared".format(
                                                m.which()), None)
        return
    d = infer_shard_dim([s for s in shapes if s is not None], whole)
    if d is None:
        for k, (t, j) in enumerate(zip(tables, js)):
            out.copy(t, j, ranks[k], LOCAL, "no one dimension makes shards of shapes {} a tensor of the golden's "
                                            "shape {}: not merged, not compared".format(
                                                [list(s or ()) for s in shapes], list(whole)), None)
        return
    parts = tuple(m.part(k, j, (k,), s or ()) for k, (j, s) in enumerate(zip(js, shapes)))
    recipe = Recipe(parts, (len(parts),), (("S", d),), whole)
    stat = recipe.reduce({p.coord: _stat_of(t, j) for p, t, j in zip(parts, tables, js)}, _combine_stats)
    out.merged(t0, j0, ranks[0], recipe, stat, all(p.has_data for p in parts))


def _per_rank(out: _Out, m: _Members, js: List[int], why: str) -> None:
    for k, (t, j) in enumerate(zip(m.tables, js)):
        out.copy(t, j, m.ranks[k], PER_RANK, why, m.entry(k, j))


def _checked_stats(m: _Members) -> Callable[[Placement, List[_Stat]], _Stat]:
    """Statistics combine that refuses replicated copies that differ (the row then stays per rank)."""

    def combine(placement: Placement, xs: List[_Stat]) -> _Stat:
        if placement[0] == "R":
            a = xs[0]
            for b in xs[1:]:
                if not all(x == y or (math.isnan(x) and math.isnan(y))
                           for x, y in ((a.max, b.max), (a.min, b.min), (a.total, b.total), (a.sq, b.sq))):
                    raise Unmergeable("replicated copies differ across {}".format(m.which()))
        return _combine_stats(placement, xs)

    return combine


def _placed_recipe(m: _Members, js: List[int], dists: List[Optional[Dict[str, Any]]]) -> Recipe:
    if any(d is None for d in dists):
        raise Unmergeable("a shard on some ranks, a plain tensor on others")
    head = dists[0] or {}
    shape = tuple(int(v) for v in head["global_shape"])
    mesh = np.asarray(head.get("mesh"), dtype=np.int64)
    placements = head["placements"]
    while mesh.ndim > len(placements) and mesh.shape[0] == 1:  # [[0, 1]] for a 1-d mesh
        mesh = mesh[0]
    if mesh.ndim != len(placements):
        raise Unmergeable("placements {} do not match a {}-d mesh".format(placements, mesh.ndim))
    parsed = tuple(parse_placement(str(p), len(shape)) for p in placements)
    parts = []
    for k, (d, t, j) in enumerate(zip(dists, m.tables, js)):
        assert d is not None
        if tuple(d["global_shape"]) != tuple(head["global_shape"]) or d["placements"] != placements or \
                d.get("mesh") != head.get("mesh"):
            raise Unmergeable("the shards disagree on placement, mesh or global shape")
        coord = tuple(int(c) for c in d.get("coord") or ())
        local = parse_shape(t.shape[j])
        if len(coord) != mesh.ndim or local is None:
            raise Unmergeable("a shard without its mesh coordinate or shape")
        parts.append(m.part(k, j, coord, local))
    coords = {p.coord for p in parts}
    expected = {tuple(int(c) for c in idx) for idx in np.ndindex(*mesh.shape)}
    if coords != expected or len(coords) != len(parts):
        raise Unmergeable("the mesh {} is not covered once by {}".format(mesh.tolist(), m.which()))
    recipe = Recipe(tuple(parts), tuple(int(s) for s in mesh.shape), parsed, shape)
    if tuple(recipe.reduce({p.coord: _Shape(p.shape) for p in parts}, _combine_shapes).shape) != shape:
        raise Unmergeable("shards of shapes {} do not make the global shape {}".format(
            [list(p.shape) for p in parts], list(shape)))
    return recipe


@dataclass
class _Shape:
    shape: Tuple[int, ...]


def _combine_shapes(placement: Placement, xs: List[_Shape]) -> _Shape:
    kind, dim = placement
    if kind != "S":
        if any(x.shape != xs[0].shape for x in xs):
            raise Unmergeable("copies of different shapes")
        return xs[0]
    first = xs[0].shape
    if any(len(x.shape) != len(first) or x.shape[:dim] + x.shape[dim + 1:] != first[:dim] + first[dim + 1:]
           for x in xs):
        raise Unmergeable("shards of shapes {} do not concatenate".format([list(x.shape) for x in xs]))
    return _Shape(first[:dim] + (sum(x.shape[dim] for x in xs),) + first[dim + 1:])
