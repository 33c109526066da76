"""One segment file being written: its groups, datasets and commit rows.

SWMR segments create every dataset up front (SWMR cannot create objects later) and stay open for the run.
Per-step segments create only the datasets that receive data, sized to it, and are closed at their commit.
"""

import json
import time
import zlib
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import h5py
import numpy as np
from numpy.typing import DTypeLike

from engines import safe_fs

from . import h5io, space
from .spec import FORMAT_VERSION, POOL_DTYPES, STRINGS_KEY, TableSpec, table_key, tables_to_json

#: Bytes per chunk of the string blob, rows per chunk of the commit log.
STRING_CHUNK_BYTES = 1 << 16
COMMIT_CHUNK_ROWS = 256


def commit_check(step: int, info: int, counts: np.ndarray) -> int:
    """The value a commit row's ``check`` column must hold; a half-written row fails it."""
    payload = np.concatenate([np.array([step, info], dtype="<i8"), counts.astype("<i8")]).tobytes()
    return zlib.crc32(payload) ^ 0x5052_4F42  # "PROB"


class SegmentFile:
    def __init__(self, path: Path, *, swmr: bool, locking: bool, tables: Sequence[TableSpec], arrays: List[str],
                 meta_attrs: Dict[str, object], base: np.ndarray, chunk_rows: int, pool_chunk_bytes: int,
                 compression: dict):
        self.path = path
        self.swmr = swmr
        self.tables = {t.name: t for t in tables}
        self.arrays = arrays
        self.chunk_rows = chunk_rows
        self.pool_chunk_bytes = pool_chunk_bytes
        self.compression = compression
        self.string_bytes = 0  # bytes of /strings/data in this file: string offsets are local to it
        self._growing: Dict[str, h5io.Growing] = {}  # dataset path -> its appender, looked up once
        self.file = h5io.open_h5(path, "w-", locking=locking, libver=h5io.LIBVER,
                                 rdcc_nbytes=self._chunk_cache_bytes(tables))  # "w-": O_EXCL, never through a link
        try:
            safe_fs.restrict_fd(self.file.id.get_vfd_handle())  # mode 0o640 whatever the umask, before any data
            self._create(tables, arrays, meta_attrs, base)
        except BaseException:  # e.g. the disk is full: never leave a half-made HDF5 handle behind
            self.abandon()
            raise

    def _chunk_cache_bytes(self, tables: Sequence[TableSpec]) -> int:
        """The writer's chunk cache per dataset. Appends write whole hyperslabs, so a cache only saves reading
        back the partial last chunk of a compressed dataset: room for that one chunk. Uncompressed chunks are
        written in place, no cache needed. HDF5's default (8 MiB per dataset in HDF5 2.0) let a SWMR writer, whose
        ~60 datasets stay open all run, grow by hundreds of MB over thousands of steps (benchmarks/store_memory.py)."""
        if not self.compression:
            return 0
        widest = max((c.storage_dtype.itemsize * (c.width or 1) for t in tables for c in t.columns), default=8)
        return max(self.pool_chunk_bytes, self.chunk_rows * widest, STRING_CHUNK_BYTES, 8 * COMMIT_CHUNK_ROWS)

    def _create(self, tables: Sequence[TableSpec], arrays: List[str], meta_attrs: Dict[str, object],
                base: np.ndarray) -> None:
        swmr = self.swmr
        meta = self.file.create_group("meta")
        for key, value in meta_attrs.items():
            meta.attrs[key] = value
        meta.attrs["tables"] = tables_to_json(tables)
        meta.attrs["format_version"] = FORMAT_VERSION
        self.file.create_group("tables")
        self.file.create_group("pools")
        commits = self.file.create_group("commits")
        commits.attrs["arrays"] = json.dumps(arrays)
        commits.attrs["base"] = json.dumps([int(x) for x in base])
        rows = COMMIT_CHUNK_ROWS if swmr else 1  # a per-step file holds one commit
        for name, dtype in (("step", "int64"), ("time", "float64"), ("info", "int64"), ("check", "int64")):
            h5io.create_extendible(commits, name, dtype, width=None, chunk_rows=rows, compression={})
        h5io.create_extendible(commits, "counts", "int64", width=len(arrays), chunk_rows=rows * len(arrays),
                               compression={})
        if swmr:
            for t in tables:
                for col in t.columns:
                    self._column(t.name, col.name, 0)
            self._strings(0)
            for d in POOL_DTYPES:
                self._pool(d, 0)

    # -- objects -------------------------------------------------------------------------------------------
    # SWMR files get the configured chunk sizes. Per-step files get chunks sized to the data when it is written
    # at commit (``final``): one chunk per dataset and no chunk index to speak of; data written before the
    # commit (a step too large to hold in memory) gets the configured sizes.
    def _group(self, key: str) -> h5py.Group:
        return self.file.require_group(key)

    def _chunk(self, configured: int, first: int, final: bool) -> int:
        return min(configured, max(1, first)) if final and not self.swmr else configured

    def _appender(self, group_key: str, name: str,
                  create: Optional[Callable[[h5py.Group], h5py.Dataset]] = None, ahead: bool = True
                  ) -> h5io.Growing:
        """The appender of ``group_key/name``, looked up once; ``create(group)`` makes the dataset when the file
        lacks it. ``ahead``: see ``h5io.Growing``."""
        path = "/%s/%s" % (group_key, name)
        grow = self._growing.get(path)
        if grow is None:
            group = self._group(group_key)
            dset = group[name] if create is None or name in group else create(group)
            grow = self._growing[path] = h5io.Growing(dset, ahead)
        return grow

    def _extendible(self, name: str, dtype: DTypeLike, configured: int, first: int, final: bool
                    ) -> Callable[[h5py.Group], h5py.Dataset]:
        """A maker of a one-dimensional extendible dataset for :meth:`_appender`."""
        return lambda group: h5io.create_extendible(group, name, dtype, width=None,
                                                    chunk_rows=self._chunk(configured, first, final),
                                                    compression=self.compression)

    def _column(self, table: str, column: str, first_rows: int, final: bool = False) -> h5io.Growing:
        grow = self._growing.get("/%s/%s" % (table_key(table), column))  # the usual case: no closure to make
        if grow is not None:
            return grow

        def create(group: h5py.Group) -> h5py.Dataset:
            col = self.tables[table].column(column)
            rows = self._chunk(self.chunk_rows, first_rows, final)
            if col.width is not None:
                rows *= col.width  # create_extendible divides by the width
            dset = h5io.create_extendible(group, column, col.storage_dtype, width=col.width, chunk_rows=rows,
                                          compression=self.compression)
            dset.attrs["type"] = col.dtype
            return dset

        return self._appender(table_key(table), column, create)

    def _strings(self, first_rows: int, first_bytes: int = 0, final: bool = False
                 ) -> Tuple[h5io.Growing, h5io.Growing, h5io.Growing]:
        data = self._appender(STRINGS_KEY, "data",
                              self._extendible("data", "uint8", STRING_CHUNK_BYTES, first_bytes, final))
        offset, length = (self._appender(STRINGS_KEY, name,
                                         self._extendible(name, "int64", self.chunk_rows, first_rows, final))
                          for name in ("offset", "length"))
        return data, offset, length

    def _pool(self, dtype: str, first_elems: int, final: bool = False) -> h5io.Growing:
        elems = max(1, self.pool_chunk_bytes // np.dtype(dtype).itemsize)
        return self._appender("pools", dtype, self._extendible(dtype, dtype, elems, first_elems, final))

    def _commit_column(self, name: str) -> h5io.Growing:
        return self._appender("commits", name, ahead=False)  # its length is the number of commits

    # -- writes --------------------------------------------------------------------------------------------
    def write_table(self, table: str, columns: Dict[str, np.ndarray], final: bool = False) -> None:
        for name, values in columns.items():
            self._column(table, name, len(values), final).append(values)

    def write_strings(self, blob: bytes, lengths: np.ndarray, final: bool = False) -> None:
        if len(lengths) == 0:
            return
        data, offset, length = self._strings(len(lengths), len(blob), final)
        offsets = self.string_bytes + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        data.append(np.frombuffer(blob, dtype=np.uint8))
        offset.append(offsets)
        length.append(lengths)
        self.string_bytes += len(blob)

    def write_pool(self, dtype: str, flat: np.ndarray, final: bool = False) -> None:
        self._pool(dtype, flat.size, final).append(flat)

    def write_commit(self, step: int, info: int, counts: np.ndarray) -> None:
        c = self._commit_column
        c("step").append(np.array([step], dtype=np.int64))
        c("time").append(np.array([time.time()], dtype=np.float64))
        c("info").append(np.array([info], dtype=np.int64))
        c("counts").append(counts.reshape(1, -1).astype(np.int64))
        c("check").append(np.array([commit_check(step, info, counts)], dtype=np.int64))

    def start_swmr(self) -> None:
        self.file.swmr_mode = True

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        if self.file.id.valid:
            for grow in self._growing.values():  # extents ran ahead of the rows (h5io.Growing): cut them back
                grow.trim()
            # Flush first: a flush that fails (a full disk) leaves the file in a state ``abandon`` can close; a
            # close that fails half-way through closing its objects does not.
            self.file.flush()
            self.file.close()

    def abandon(self) -> None:
        """Close a file a failed write left unusable, writing nothing more to it (``space.abandon``)."""
        if self.file.id.valid:
            space.abandon(self.file)  # before any dataset handle goes: closing one writes its cached chunks
        self._growing.clear()

    def extents(self) -> Dict[str, Tuple[int, int]]:
        """``{dataset path: (rows, rows a chunk)}`` of the datasets appended to so far."""
        return {path: (g.rows, g.chunk_rows) for path, g in self._growing.items()}

    def size_on_disk(self) -> Optional[int]:
        try:
            return int(self.file.id.get_filesize())
        except Exception:  # closed or unavailable
            return None
