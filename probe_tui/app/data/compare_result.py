"""A compare result (``compare.h5``, docs/FORMAT.md "Compare results") opened for the compare browser.

The columns the table shows are read once, as numpy arrays; text columns stay dictionary codes (int32) next to
their text tables, so a million rows cost tens of megabytes and a search looks at each distinct name once.
Sorting and filtering are numpy (argsort, masks) on those arrays and return a :class:`ResultView`, the row
numbers in display order. A row's full record (every metric, both sides' statistics, the stack) is read when it
is shown, through the same dictionaries (read once, cached).

Nothing here imports Textual: the screen calls it from thread workers.
"""

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from engines.compare.columns import CLASSIC_COLUMNS, DIVERGENCE_COLUMNS, RESULT_COLUMNS, TREE_COLUMNS
from engines.compare.hdf5_out import KIND, NAME_COLUMNS, SAME_AS_TARGET, summary_of
from engines.compare.verdicts import ERROR, PASS, SKIPPED, UNMATCHED, VERDICTS, WARNING

# how bad a verdict is (higher is worse): skipped < pass < unmatched < warning < error
SEVERITY = np.array([1, 3, 4, 2, 0], dtype=np.int8)
VERDICT_STYLES = {PASS: "", WARNING: "warning", ERROR: "bold error", UNMATCHED: "muted", SKIPPED: "dim"}
VERDICT_FILTERS: Dict[str, Optional[Tuple[int, ...]]] = {
    "all": None,
    "problems": (ERROR, WARNING, UNMATCHED),
    "errors": (ERROR,),
    "warnings": (WARNING,),
    "unmatched": (UNMATCHED,),
}
FILTER_CYCLE = tuple(VERDICT_FILTERS)
SORT_LABELS = {
    "order": "dump order",
    "severity": "worst verdict first",
    "rel_err": "rel_err, largest first",
    "cosine": "cosine, smallest first",
    "max_abs_err": "max_abs_err, largest first",
    "max_rel": "max relative diff, largest first",
    "name": "name",
}
MODE_SORTS = {
    "tensor": ("order", "severity", "rel_err", "cosine", "max_abs_err", "name"),
    "statistics": ("order", "severity", "rel_err", "max_rel", "name"),
    "md5": ("order", "severity", "name"),
}
_TEXT_TYPES = ("str", "json")
_TYPES = {t: dict(cols) for t, cols in (("results", RESULT_COLUMNS + CLASSIC_COLUMNS),
                                         ("divergence", DIVERGENCE_COLUMNS), ("tree", TREE_COLUMNS))}
TABLE_NUMBERS = ("rank", "step", "verdict", "rel_err", "io", "matched")
TABLE_CODES = ("record", "slot", "parent", "target_dtype", "target_shape", "reasons")
MODE_COLUMNS = {
    "tensor": ("cosine", "max_abs_err", "max_rel_err"),
    "statistics": ("max_rel", "min_rel", "mean_rel", "norm_rel"),
    "md5": ("target_crc32", "golden_crc32"),
}


class ResultError(Exception):
    """Not a readable compare result (one line naming the folder)."""


def is_compare_result(path: Path) -> bool:
    """A folder holding a compare result store (``compare.h5`` or its segments)."""
    from engines.store import store_kinds

    path = Path(path)
    try:
        return path.is_dir() and KIND in store_kinds(path)
    except Exception:
        return False


class TextColumn:
    """A dictionary-coded text column: ``codes`` (int32, -1 empty) into ``texts``."""

    def __init__(self, codes: np.ndarray, texts: np.ndarray) -> None:
        self.codes = codes
        self.texts = texts  # object array; its last entry is "" (what code -1 picks)

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    def __getitem__(self, row: int) -> str:
        return self.texts[int(self.codes[row])]

    def decode(self, rows=None) -> np.ndarray:
        return self.texts[self.codes if rows is None else self.codes[rows]]


@dataclass
class ResultView:
    """Row numbers of the result in display order, and where its worst rows are among them: the errors, or the
    warnings when there is no error, or the unmatched rows when there is neither (``problem_level``)."""

    rows: np.ndarray
    error_positions: np.ndarray
    problem_level: int = ERROR
    verdict_filter: str = "all"
    sort: str = "order"
    descending: bool = False
    search: str = ""
    rank: Optional[int] = None

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def position_of(self, row: int) -> Optional[int]:
        """The view position that shows result row ``row`` (None when filtered out)."""
        if self.sort == "order" and not self.descending:
            pos = int(np.searchsorted(self.rows, row))
            return pos if pos < len(self.rows) and self.rows[pos] == row else None
        hits = np.flatnonzero(self.rows == row)
        return int(hits[0]) if hits.size else None

    def next_error(self, position: int, backwards: bool = False) -> Optional[int]:
        """The view position of the next (previous) row of ``problem_level`` after (before) ``position``; wraps
        around."""
        errs = self.error_positions
        if not errs.size:
            return None
        if backwards:
            i = int(np.searchsorted(errs, position, "left")) - 1
            return int(errs[i]) if i >= 0 else int(errs[-1])
        i = int(np.searchsorted(errs, position, "right"))
        return int(errs[i]) if i < errs.size else int(errs[0])


@dataclass
class TreeIndex:
    """The module roll-up (table ``tree``) with its children found by one sort: ``children(piece, parent)``."""

    columns: Dict[str, np.ndarray]
    names: np.ndarray
    pieces: List[Tuple[int, int]]
    piece_of: np.ndarray
    _keys: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))
    _order: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, np.int64))

    @classmethod
    def build(cls, columns: Dict[str, np.ndarray], names: np.ndarray) -> "TreeIndex":
        rank, step = columns["rank"].astype(np.int64), columns["step"].astype(np.int64)
        span = int(step.max()) - int(step.min()) + 1 if len(step) else 1
        low = int(step.min()) if len(step) else 0
        packed, piece_of = np.unique(rank * span + (step - low), return_inverse=True)
        piece_of = piece_of.reshape(-1).astype(np.int64)
        uniq = [(int(p // span), int(p % span) + low) for p in packed.tolist()]
        width = len(names) + 1
        keys = piece_of * width + (columns["parent"].astype(np.int64) + 1)
        order = np.argsort(keys, kind="stable")
        index = cls(columns, names, uniq, piece_of)
        index._keys, index._order = keys[order], order
        return index

    def __len__(self) -> int:
        return int(self.piece_of.shape[0])

    def children(self, piece: int, parent: int = -1) -> np.ndarray:
        """Node indices under ``parent`` (a node's name code; -1 the top) in piece ``piece``, in dump order."""
        key = piece * (len(self.names) + 1) + parent + 1
        lo = int(np.searchsorted(self._keys, key, "left"))
        hi = int(np.searchsorted(self._keys, key, "right"))
        return self._order[lo:hi]

    def has_children(self, node: int) -> bool:
        return len(self.children(int(self.piece_of[node]), int(self.columns["node"][node]))) > 0

    def name(self, node: int) -> str:
        return str(self.names[int(self.columns["node"][node])])

    def first_row(self, node: int) -> int:
        """The first result row of the node, or of the first descendant that has one (-1: none)."""
        stack = [node]
        while stack:
            current = stack.pop(0)
            row = int(self.columns["first_row"][current])
            if row >= 0:
                return row
            stack[:0] = self.children(int(self.piece_of[current]), int(self.columns["node"][current])).tolist()
        return -1


def of_rank(table: Dict[str, np.ndarray], rank: Optional[int]) -> Dict[str, np.ndarray]:
    """The entries of a ranking (or any table with a ``rank`` column) of one rank, in their order; every entry for
    None."""
    if rank is None or "rank" not in table:
        return table
    keep = np.asarray(table["rank"]).astype(np.int64) == int(rank)
    return {c: np.asarray(v)[keep] for c, v in table.items()}


def first_by_rank(table: Dict[str, np.ndarray]) -> Dict[int, int]:
    """Rank -> the position in the first-divergence ranking of that rank's first entry (its best suspect)."""
    if "rank" not in table or not len(table["rank"]):
        return {}
    ranks, first = np.unique(np.asarray(table["rank"]).astype(np.int64), return_index=True)
    return {int(r): int(i) for r, i in zip(ranks.tolist(), first.tolist())}


def diverged(table: Dict[str, np.ndarray], position: int) -> bool:
    """Whether a ranking entry is a divergence, not float noise: its worst row an error or warning, or it adds
    error at the model-signal level (a target-only region has no verdict of its own, only its score)."""
    from engines.compare.divergence import MODEL_SIGNAL

    return int(table["worst_verdict"][position]) in (ERROR, WARNING) or float(table["score"][position]) >= MODEL_SIGNAL


def first_rank(table: Dict[str, np.ndarray]) -> Optional[int]:
    """The rank that diverged first: the rank of the ranking's first entry, when that entry diverges. The ranking
    is across ranks (docs/COMPARE.md "First divergence"), so its head names the origin rank."""
    if "rank" not in table or not len(table["rank"]) or not diverged(table, 0):
        return None
    return int(table["rank"][0])


class CompareResult:
    """The compare result in ``folder``: the table columns in memory, rows and other tables on request.

    Thread-safe: every read of the store goes through one lock (h5py serialises anyway)."""

    def __init__(self, folder) -> None:
        from engines.store import StoreError, StoreReader

        self.folder = Path(folder)
        try:
            self._store = StoreReader(self.folder, KIND)
        except StoreError as exc:
            raise ResultError(str(exc)) from None
        self._lock = threading.RLock()
        self._dicts: Dict[str, np.ndarray] = {}
        run_meta = self._store.meta.get("run_meta") or {}
        self.summary: Dict[str, Any] = dict(summary_of(self._store))  # run_meta, or the commit of a chunked write
        self.mode = str(run_meta.get("mode") or self.summary.get("mode") or "statistics")
        stored = set(self._store.table_spec("results").column_names) if "results" in self._store.tables() else set()
        wanted = [c for c in TABLE_NUMBERS + TABLE_CODES + MODE_COLUMNS.get(self.mode, ()) if c in stored]
        self.n_rows = self._store.num_rows("results") if stored else 0
        raw = self._store.read("results", wanted) if self.n_rows else {c: np.zeros(0) for c in wanted}
        self.columns: Dict[str, np.ndarray] = {}
        self.text: Dict[str, TextColumn] = {}
        for c in wanted:
            if self._is_text("results", c):
                self.text[c] = TextColumn(raw[c].astype(np.int32), self._dictionary("results", c))
            else:
                self.columns[c] = raw[c]
        self.multi_piece = bool(self.n_rows) and (np.any(self.columns["rank"] != self.columns["rank"][0])
                                                  or np.any(self.columns["step"] != self.columns["step"][0]))
        self._divergence: Optional[Dict[str, np.ndarray]] = None
        self._tree: Optional[TreeIndex] = None
        self._name_order: Optional[np.ndarray] = None

    # ---- dictionaries -------------------------------------------------------------------------------------
    @staticmethod
    def _is_text(table: str, column: str) -> bool:
        return _TYPES.get(table, {}).get(column) in _TEXT_TYPES

    @staticmethod
    def _dict_table(table: str, column: str) -> str:
        if column in NAME_COLUMNS.get(table, ()):
            return "names"
        return "dict_" + column if table == "results" else "dict_{}_{}".format(table, column)

    def _dictionary(self, table: str, column: str) -> np.ndarray:
        """The texts of a coded column, with "" appended (the text of code -1)."""
        name = self._dict_table(table, column)
        with self._lock:
            texts = self._dicts.get(name)
            if texts is None:
                found = self._store.read(name, ["text"])["text"] if name in self._store.tables() else []
                texts = np.empty(len(found) + 1, dtype=object)
                texts[:len(found)] = found
                texts[-1] = ""
                self._dicts[name] = texts
        return texts

    @property
    def names(self) -> np.ndarray:
        return self._dictionary("results", "record")

    def _decode(self, table: str, raw: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        out = {}
        for c, values in raw.items():
            if self._is_text(table, c):
                codes = values.astype(np.int64)
                texts = self._dictionary(table, c)
                out[c] = texts[np.where(codes == SAME_AS_TARGET, -1, codes)]
                if c == "golden_name":
                    out["golden_same"] = codes == SAME_AS_TARGET
            else:
                out[c] = values
        return out

    # ---- rows ---------------------------------------------------------------------------------------------
    def name(self, row: int) -> str:
        """The row's name as the report writes it: record + "." + slot."""
        return self.text["record"][row] + "." + self.text["slot"][row]

    def row(self, row: int) -> Dict[str, Any]:
        """Every column of result row ``row`` as Python values (texts decoded)."""
        with self._lock:
            raw = self._store.read("results", None, rows=[int(row)])
        out = {c: v[0] for c, v in self._decode("results", raw).items()}
        out["target_name"] = "{}.{}".format(out.get("record", ""), out.get("slot", ""))
        if out.pop("golden_same", False):
            out["golden_name"] = out["target_name"]
        out["row"] = int(row)
        return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in out.items()}

    def worst_row_of_record(self, first: int, limit: int = 256) -> int:
        """Of the rows of the record that starts at row ``first`` (they are contiguous), the worst: highest
        verdict severity, then largest rel_err, then an output. A suspect is best shown by its worst output, not
        its first input."""
        codes = self.text["record"].codes
        end = min(self.n_rows, first + limit)
        span = np.flatnonzero(codes[first:end] != codes[first])
        stop = first + (int(span[0]) if span.size else end - first)
        severity = SEVERITY[self.columns["verdict"][first:stop]].astype(np.float64)
        rel = np.nan_to_num(self.columns["rel_err"][first:stop].astype(np.float64), nan=-1.0, posinf=np.inf)
        output = (self.columns["io"][first:stop] == 1).astype(np.float64)  # ties: an output before an input
        return first + int(np.lexsort((-output, -rel, -severity))[0])

    # ---- views --------------------------------------------------------------------------------------------
    def sorts(self) -> Sequence[str]:
        return MODE_SORTS.get(self.mode, MODE_SORTS["statistics"])

    def ranks(self) -> List[int]:
        """The ranks the result has rows of."""
        column = self.columns.get("rank")
        return [int(r) for r in np.unique(column)] if column is not None and len(column) else []

    def view(self, verdict_filter: str = "all", search: str = "", sort: str = "order",
             descending: bool = False, rank: Optional[int] = None) -> ResultView:
        """Row numbers that pass the verdict filter, the name search and the rank (None: every rank), in the
        sort's order.

        ``search`` is matched against each row's record and enclosing module (a substring, a glob with ``*?[``,
        a regular expression after ``re:``); a bad expression raises ValueError."""
        verdict = self.columns["verdict"]
        mask = np.ones(self.n_rows, dtype=bool)
        wanted = VERDICT_FILTERS.get(verdict_filter)
        if wanted is not None:
            mask &= np.isin(verdict, np.asarray(wanted, dtype=verdict.dtype))
        if search:
            hit = self._name_hits(search)
            mask &= hit[self.text["record"].codes] | hit[self.text["parent"].codes]
        if rank is not None:
            mask &= self.columns["rank"] == rank
        rows = np.flatnonzero(mask)
        rows = rows[self._order(rows, sort, descending)]
        shown = verdict[rows]
        level, positions = ERROR, np.zeros(0, dtype=np.int64)
        for level in (ERROR, WARNING, UNMATCHED):
            positions = np.flatnonzero(shown == level)
            if positions.size:
                break
        return ResultView(rows, positions, level, verdict_filter, sort, descending, search, rank)

    def _name_hits(self, pattern: str) -> np.ndarray:
        """Per name code (last entry: code -1), whether the name matches ``pattern``."""
        from engines.parse.inspect import name_matcher

        try:
            match = name_matcher(pattern)
        except Exception as exc:  # ParseError: a bad regular expression
            raise ValueError(str(exc).replace("--name ", "search ")) from None
        names = self.names
        return np.fromiter((bool(n) and match(n) for n in names.tolist()), dtype=bool, count=len(names))

    def _order(self, rows: np.ndarray, sort: str, descending: bool) -> np.ndarray:
        """Positions that put ``rows`` in the sort's order (ties keep dump order; NaN last)."""
        if sort == "order" or not rows.size:
            return np.arange(rows.size)[::-1] if descending else np.arange(rows.size)
        if sort == "severity":
            key = -SEVERITY[self.columns["verdict"][rows]].astype(np.float64)
        elif sort == "name":
            key = self._name_rank()[self.text["record"].codes[rows]].astype(np.float64)
        elif sort in self.columns:
            values = self.columns[sort][rows].astype(np.float64)
            smaller_first = sort == "cosine"
            key = values if smaller_first else -values
        else:
            raise ValueError("cannot sort by {!r} (one of: {})".format(sort, ", ".join(self.sorts())))
        if descending:
            key = -key
        key = np.where(np.isnan(key), np.inf, key)
        return np.argsort(key, kind="stable")

    def _name_rank(self) -> np.ndarray:
        if self._name_order is None:
            names = self.names
            order = np.argsort(names[:-1].astype(str), kind="stable") if len(names) > 1 else np.zeros(0, int)
            rank = np.empty(len(names), dtype=np.int64)
            rank[order] = np.arange(order.size)
            rank[-1] = -1
            self._name_order = rank
        return self._name_order

    # ---- the other tables ---------------------------------------------------------------------------------
    def divergence(self) -> Dict[str, np.ndarray]:
        """The first-divergence ranking (best suspect first), texts decoded."""
        if self._divergence is None:
            with self._lock:
                has = "divergence" in self._store.tables() and self._store.num_rows("divergence") > 0
                raw = self._store.read("divergence") if has else {c: np.zeros(0) for c, _ in DIVERGENCE_COLUMNS}
            self._divergence = self._decode("divergence", raw) if has else {
                c: (np.empty(0, dtype=object) if t in _TEXT_TYPES else np.zeros(0)) for c, t in DIVERGENCE_COLUMNS}
        return self._divergence

    def tree(self) -> TreeIndex:
        if self._tree is None:
            with self._lock:
                has = "tree" in self._store.tables() and self._store.num_rows("tree") > 0
                raw = self._store.read("tree") if has else {c: np.zeros(0, np.int64) for c, _ in TREE_COLUMNS}
            names = self._dictionary("tree", "node")
            columns = {c: (v.astype(np.int64) if c in ("node", "parent") else v) for c, v in raw.items()}
            self._tree = TreeIndex.build(columns, names)
        return self._tree

    def verdict_counts(self) -> Dict[str, int]:
        counts = np.bincount(self.columns["verdict"].astype(np.int64), minlength=len(VERDICTS))
        return {VERDICTS[i]: int(counts[i]) for i in range(len(VERDICTS))}

    def close(self) -> None:
        with self._lock:
            self._store.close()
