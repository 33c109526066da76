"""A msprobe dump as a :class:`engines.dumps.source.DumpSource`."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from engines.dumps.msprobe.companions import read_construct, read_json, read_stacks
from engines.dumps.msprobe.flatten import Flattener
from engines.dumps.msprobe.layout import MsprobeFile, find_dump_files
from engines.dumps.msprobe.tensors import MsprobeTensorSpec
from engines.dumps.rows import RowTable
from engines.dumps.source import DumpSource, DumpSourceError, guarded


class MsprobeSource(DumpSource):
    """dump.json files found under a path, one per (step, rank); loaded lazily and cached."""

    origin = "msprobe"

    def __init__(self, path: Path, files: Optional[List[MsprobeFile]] = None):
        self.path = Path(path)
        files = files if files is not None else find_dump_files(self.path)
        if not files:
            raise DumpSourceError("{}: no msprobe dump.json found".format(self.path))
        self._files: Dict[Tuple[int, int], MsprobeFile] = {(f.rank, f.step): f for f in files}
        self._heads: Dict[Tuple[int, int], dict] = {}
        self._rows: Dict[Tuple[int, int], RowTable] = {}
        self._tensor_files: Dict[Tuple[int, int], List[str]] = {}
        self._pending: Dict[Tuple[int, int], Future] = {}

    # -- DumpSource ---------------------------------------------------------------------------------------
    def ranks(self) -> List[int]:
        return sorted({r for r, _ in self._files})

    def steps(self, rank: int) -> List[int]:
        return sorted(s for r, s in self._files if r == rank)

    @property
    @guarded
    def framework(self) -> str:
        head = self._head(next(iter(self._files)))
        fw = head.get("framework") or ""
        fw = fw if isinstance(fw, str) else ""
        return "mindspore" if "mindspore" in fw else ("pytorch" if fw else "")

    @guarded
    def holds(self) -> Dict[str, bool]:
        key = next(iter(self._files))
        head = self._head(key)
        task = head.get("task", "")
        rows = self.rows(*key)
        tensors = rows.is_tensor
        # any, not all: a linear backward's dwᵀ has its hash left out (engines/dumps/msprobe/backward_slots.py)
        has_hash = bool(tensors.any()) and any(c != "" for c in rows.crc32[tensors])
        has_stats = bool((rows.valid[tensors] != 0).any()) if tensors.any() else True
        return {"tensor": task == "tensor" or bool((rows.data >= 0).any()), "statistics": has_stats,
                "md5": has_hash}

    @guarded
    def rows(self, rank: int, step: int) -> RowTable:
        key = (rank, step)
        table = self._rows.get(key)
        if table is None:
            table = self._load(key)
            self._rows[key] = table
        return table

    @guarded
    def tensor_spec(self, rank: int, step: int) -> MsprobeTensorSpec:
        self.rows(rank, step)
        info = self._files[(rank, step)]
        head = self._head((rank, step))
        folder = info.folder / "dump_tensor_data"
        declared = head.get("dump_data_dir")
        if not folder.is_dir() and isinstance(declared, str) and declared and Path(declared).is_dir():
            folder = Path(declared)
        return MsprobeTensorSpec(str(folder), tuple(self._tensor_files[(rank, step)]))

    def release_others(self, rank: int) -> None:
        for key in [k for k in self._rows if k[0] != rank]:  # each piece parsed stayed held (the heads are small)
            self._rows.pop(key, None)
            self._tensor_files.pop(key, None)

    @guarded
    def tree(self, rank: int, step: int) -> Dict[str, Optional[str]]:
        return read_construct(self._files[(rank, step)].folder)

    def describe(self) -> str:
        return "msprobe dump {} ({} file(s))".format(self.path, len(self._files))

    # -- loading ------------------------------------------------------------------------------------------
    def _head(self, key: Tuple[int, int]) -> dict:
        head = self._heads.get(key)
        if head is None:
            self._load(key)
            head = self._heads[key]
        return head

    def dump_bytes(self) -> int:
        """Bytes of all the dump.json files (what reading them costs)."""
        return sum(f.path.stat().st_size for f in self._files.values() if f.path.is_file())

    def prefetch(self, executor: Executor) -> None:
        """Read every piece not read yet in ``executor`` (another process); ``rows`` then takes the result."""
        for key, info in self._files.items():
            if key not in self._rows and key not in self._pending:
                self._pending[key] = executor.submit(load_piece, info)

    def _load(self, key: Tuple[int, int]) -> RowTable:
        if key not in self._files:
            raise DumpSourceError("{}: no dump for rank {} step {}".format(self.path, key[0], key[1]))
        piece = None
        future = self._pending.pop(key, None)
        if future is not None:
            try:
                piece = future.result()
            except DumpSourceError:
                raise
            except Exception:  # the helper could not run (it died, or was shut down): read the piece here
                piece = None
        head, table, files = piece if piece is not None else load_piece(self._files[key])
        self._heads[key] = head
        self._tensor_files[key] = files
        self._rows[key] = table
        return table


def load_piece(info: MsprobeFile) -> Tuple[dict, RowTable, List[str]]:
    """One dump.json read and flattened: (its other top-level keys, its rows, the tensor files its rows name).
    A module-level function so that a helper process can run it (``MsprobeSource.prefetch``)."""
    raw = read_json(info.path, "dump.json")
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), dict):
        raise DumpSourceError("{}: not a msprobe dump.json (no 'data' object)".format(info.path))
    data = raw.pop("data")
    files: List[str] = []
    index: Dict[str, int] = {}

    def file_index(name: str) -> int:
        pos = index.get(name)
        if pos is None:
            pos = index[name] = len(files)
            files.append(name)
        return pos

    framework = raw.get("framework")
    flat = Flattener(step=info.step, rank=info.rank, parents=read_construct(info.folder),
                     stacks=read_stacks(info.folder), file_index=file_index,
                     framework=framework if isinstance(framework, str) else "pytorch")
    try:
        table = flat.flatten(data)
    except ValueError as exc:
        raise DumpSourceError("{}: {}".format(info.path, exc)) from None
    return raw, table, files
