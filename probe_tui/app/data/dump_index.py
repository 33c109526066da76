"""A dump (ours or msprobe's, through ``engines.dumps.source.open_dump``) indexed for the dump browser.

Steps and ranks come from the source; the rows of one (rank, step) piece are read when that piece is first
opened and turned into a record tree: modules, the operators inside them, and each record's rows (tensors and
scalar arguments). Filters (a name search, records with inf/nan) keep the matching records and their ancestors.
Tensor values are read through the source's tensor readers in chunks (``tensor_preview``).

Nothing here imports Textual.
"""

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from engines.dumps.rows import KIND_MODULE, STAT_BITS, RowTable, factorize


class DumpError(Exception):
    """Not a readable dump (one line naming the path)."""


def is_dump(path: Path) -> bool:
    """A probe-tui dump (run or rank folder holding a ``dump`` store) or a msprobe dump folder."""
    path = Path(path)
    if not path.is_dir():
        return False
    try:
        from engines.store import open_rank_dirs, store_kinds

        if "dump" in store_kinds(path):
            return _readable(path)
        with_dump = [p for p in open_rank_dirs(path).values() if "dump" in store_kinds(p)]
        if with_dump:
            return _readable(with_dump[0])
    except Exception:
        pass
    try:
        from engines.dumps.msprobe.layout import find_dump_files

        return bool(find_dump_files(path))
    except Exception:
        return False


def _readable(rank_dir: Path) -> bool:
    """The dump store opens (a broken or foreign file falls back to the run summary)."""
    from engines.store import StoreReader

    try:
        StoreReader(rank_dir, "dump").close()
        return True
    except Exception:
        return False


def nonfinite_rows(rows: RowTable) -> np.ndarray:
    """Rows holding NaN or inf: a positive count where the dump counted them, else a non-finite statistic."""
    mask = rows.nonfinite > 0
    for stat, bit in STAT_BITS.items():
        mask |= ((rows.valid & bit) != 0) & ~np.isfinite(getattr(rows, stat))
    return mask


@dataclass
class RecordNode:
    """One record of a piece (or a module that only appears as a parent): its rows and its children."""

    name: str
    kind: int
    parent: str
    rows: np.ndarray
    children: List[str] = field(default_factory=list)
    nonfinite: bool = False


@dataclass
class Piece:
    """The rows of one (rank, step) and their record tree; ``top`` lists the records without a parent."""

    rank: int
    step: int
    rows: RowTable
    records: Dict[str, RecordNode]
    top: List[str]
    nonfinite: np.ndarray

    @classmethod
    def build(cls, rank: int, step: int, rows: RowTable, modules: Dict[str, Optional[str]]) -> "Piece":
        codes, names = factorize(rows.record) if len(rows) else (np.zeros(0, np.int64), np.empty(0, object))
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
        bad = nonfinite_rows(rows) if len(rows) else np.zeros(0, bool)
        records: Dict[str, RecordNode] = {}
        for code, name in enumerate(names.tolist()):
            members = order[bounds[code]:bounds[code + 1]]
            first = int(members[0])
            records[name] = RecordNode(name, int(rows.kind[first]), str(rows.parent[first] or ""), members,
                                       nonfinite=bool(bad[members].any()))
        # modules known only as parents (no rows of their own: a module level not captured)
        pending = [r.parent for r in records.values() if r.parent and r.parent not in records]
        while pending:
            name = pending.pop()
            if name in records:
                continue
            parent = modules.get(name) or ""
            records[name] = RecordNode(name, KIND_MODULE, parent, np.zeros(0, np.int64))
            if parent and parent not in records:
                pending.append(parent)
        top: List[str] = []
        first_row = {name: (int(node.rows[0]) if node.rows.size else None) for name, node in records.items()}
        for name, node in records.items():
            if node.parent and node.parent in records and node.parent != name:
                records[node.parent].children.append(name)
            else:
                top.append(name)
        # dump order everywhere: a module without rows sorts by its first descendant's row
        def position(name: str) -> int:
            row = first_row.get(name)
            if row is not None:
                return row
            kids = [position(c) for c in records[name].children]
            return min(kids) if kids else 1 << 62

        for node in records.values():
            node.children.sort(key=position)
        top.sort(key=position)
        return cls(rank, step, rows, records, top, bad)

    def keep(self, match=None, nonfinite: bool = False) -> Optional[set]:
        """Names of the records that pass the filters and of their ancestors; None when nothing is filtered."""
        if match is None and not nonfinite:
            return None
        kept = set()
        for name, node in self.records.items():
            if not node.rows.size:
                continue
            if nonfinite and not node.nonfinite:
                continue
            if match is not None and not (match(name) or (node.parent and match(node.parent))):
                continue
            kept.add(name)
        for name in list(kept):
            parent = self.records[name].parent
            while parent and parent in self.records and parent not in kept:
                kept.add(parent)
                parent = self.records[parent].parent
        return kept


class DumpIndex:
    """The dump at ``path``: its (rank, step) pieces, each read and indexed once (thread-safe)."""

    def __init__(self, path) -> None:
        from engines.dumps.opener import open_dump
        from engines.dumps.source import DumpSourceError

        self.path = Path(path)
        try:
            self.source = open_dump(self.path)
            self.ranks = self.source.ranks()
            self.steps_of = {rank: self.source.steps(rank) for rank in self.ranks}
            self.holds = self.source.holds()
        except DumpSourceError as exc:
            raise DumpError(str(exc)) from None
        except Exception as exc:  # a store error, a broken dump.json
            raise DumpError("{}: cannot read the dump: {}".format(self.path, exc)) from None
        self.origin = self.source.origin
        self.framework = self.source.framework
        self._pieces: Dict[Tuple[int, int], Piece] = {}
        self._lock = threading.RLock()

    def steps(self) -> List[int]:
        return sorted({s for steps in self.steps_of.values() for s in steps})

    def ranks_at(self, step: int) -> List[int]:
        return [r for r in self.ranks if step in self.steps_of[r]]

    def piece(self, rank: int, step: int) -> Piece:
        with self._lock:
            found = self._pieces.get((rank, step))
            if found is None:
                rows = self.source.rows(rank, step)
                modules = self.source.tree(rank, step)
                found = self._pieces[(rank, step)] = Piece.build(rank, step, rows, modules)
        return found

    def loaded(self, rank: int, step: int) -> bool:
        return (rank, step) in self._pieces

    def tensor_reader(self, rank: int, step: int):
        return self.source.tensor_spec(rank, step).open()

    def close(self) -> None:
        with self._lock:
            self.source.close()
