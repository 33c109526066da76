"""Thin h5py helpers: opening files with or without file locking, creating extendible datasets."""

import os
from typing import Any, Dict, Optional, Tuple

import h5py
import numpy as np
from numpy.typing import DTypeLike

from engines.safe_fs import PathLike

from .errors import StoreError

#: Format bounds of every segment file: HDF5 1.10 objects (what SWMR needs, and compact chunk indexes), readable
#: by any HDF5 >= 1.10 (h5py >= 2.7) even when the writer links a newer HDF5 whose "latest" format is newer.
LIBVER = ("v110", "v110")

COMPRESSIONS = ("none", "lzf", "gzip")
LOCKING_ENV = "HDF5_USE_FILE_LOCKING"


def open_h5(path: PathLike, mode: str, *, locking: bool = True, **kwargs: Any) -> h5py.File:
    """Open an HDF5 file; ``locking=False`` turns HDF5 file locking off for this file only (network file
    systems). Where the HDF5 build cannot take the per-file switch, fall back to the process-wide
    ``HDF5_USE_FILE_LOCKING=FALSE`` (it must be set before HDF5 opens the file)."""
    if locking:
        return h5py.File(path, mode, **kwargs)
    try:
        return h5py.File(path, mode, locking=False, **kwargs)
    except (TypeError, ValueError) as exc:
        if "locking" not in str(exc).lower():
            raise
        os.environ[LOCKING_ENV] = "FALSE"
        return h5py.File(path, mode, **kwargs)


def compression_args(compression: str, level: Optional[int]) -> dict:
    if compression not in COMPRESSIONS:
        raise StoreError(f"compression {compression!r}: expected one of {', '.join(COMPRESSIONS)}")
    if compression == "none":
        if level is not None:
            raise StoreError("compression_level: only meaningful with gzip")
        return {}
    if compression == "lzf":
        if level is not None:
            raise StoreError("compression_level: lzf takes no level")
        return {"compression": "lzf"}
    if level is None:
        level = 4
    if not isinstance(level, int) or not 0 <= level <= 9:
        raise StoreError(f"compression_level {level!r}: gzip takes 0..9")
    return {"compression": "gzip", "compression_opts": level}


def create_extendible(group: h5py.Group, name: str, dtype: DTypeLike, *, width: Optional[int], chunk_rows: int,
                      compression: dict) -> h5py.Dataset:
    """An empty dataset that grows along its first axis (``n`` or ``n x width``)."""
    if width is None:
        shape: Tuple[int, ...] = (0,)
        maxshape: Tuple[Optional[int], ...] = (None,)
        chunks: Tuple[int, ...] = (max(1, chunk_rows),)
    else:
        shape, maxshape = (0, width), (None, width)
        chunks = (max(1, chunk_rows // max(1, width)), width)
    return group.create_dataset(name, shape=shape, maxshape=maxshape, dtype=np.dtype(dtype), chunks=chunks,
                                **compression)


# Memory dataspaces by shape: a step appends the same number of rows to every column of a table, and creating
# the space is a fifth of an append's cost. Bounded: cleared when it grows past _SPACES_MAX shapes.
_SPACES: Dict[Tuple[int, ...], Any] = {}
_SPACES_MAX = 256


def _memory_space(shape: Tuple[int, ...]) -> Any:
    space = _SPACES.get(shape)
    if space is None:
        if len(_SPACES) >= _SPACES_MAX:
            _SPACES.clear()
        space = _SPACES[shape] = h5py.h5s.create_simple(shape)
    return space


class Growing:
    """A dataset being appended to, with its row count kept here rather than asked of HDF5 each time, and
    written through h5py's low-level calls: a per-step commit appends to dozens of columns, and the
    high-level ``resize`` + slice assignment costs tens of microseconds each in selection bookkeeping.

    The extent runs ahead of the rows: it grows to the end of the chunk the rows reach (chunks are allocated when
    first written, so this costs no disk), which leaves most appends one hyperslab write into a file space kept
    from the last growth, without ``set_extent`` and ``get_space`` (issue 21: about a third of an append).
    Readers take lengths from the commit log, never from a dataset's shape; ``trim`` (at close) cuts the extent
    back to the rows, so a closed file's datasets hold exactly their rows. ``ahead=False`` keeps the extent at the
    rows (the commit log, whose length plain-h5py readers take as the number of commits)."""

    __slots__ = ("dset", "rows", "extent", "tail", "dtype", "chunk_rows", "ahead", "_dsid", "_fspace", "_mtype")

    def __init__(self, dset: h5py.Dataset, ahead: bool = True):
        self.dset = dset
        self._dsid = dset.id  # h5py's ``id`` is a property, asked once
        self.rows = self.extent = dset.shape[0]
        self.tail = tuple(dset.shape[1:])
        self.dtype = dset.dtype
        chunks = dset.chunks  # fixed at creation; h5py asks HDF5 anew on each read (~10 us)
        self.chunk_rows = int(chunks[0]) if chunks else max(1, self.rows)
        self.ahead = ahead
        self._fspace: Any = None
        # The memory type of every write (values are converted to the dataset's dtype first): made once, not by
        # h5py at each write (~6 us of an ~14 us write, most of it registering the new type object).
        self._mtype = h5py.h5t.py_create(self.dtype)

    def append(self, values: np.ndarray) -> None:
        n = len(values)
        if n == 0:
            return
        values = np.ascontiguousarray(values, dtype=self.dtype)
        if values.shape[1:] != self.tail:
            raise ValueError(f"{self.dset.name}: rows of shape {values.shape[1:]}, expected {self.tail}")
        start = self.rows
        end = start + n
        fspace = self._fspace
        dsid = self._dsid
        if end > self.extent or fspace is None:
            if end > self.extent:
                step = self.chunk_rows if self.ahead else 1
                extent = -(-end // step) * step  # the end of the chunk the rows reach
                dsid.set_extent((extent,) + self.tail)
                self.extent = extent
            fspace = self._fspace = dsid.get_space()
        shape = values.shape
        mspace = _SPACES.get(shape)
        if mspace is None:
            mspace = _memory_space(shape)
        fspace.select_hyperslab((start,) + (0,) * len(self.tail), shape)
        dsid.write(mspace, fspace, values, self._mtype)
        self.rows = end

    def trim(self) -> None:
        """Cut the extent back to the rows written (before the file closes)."""
        if self.extent > self.rows:
            self._dsid.set_extent((self.rows,) + self.tail)
            self.extent = self.rows
            self._fspace = None
