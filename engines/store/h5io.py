"""Thin h5py helpers: opening files with or without file locking, creating extendible datasets."""

import os
from typing import Optional, Tuple

import h5py
import numpy as np

from .errors import StoreError

#: Format bounds of every segment file: HDF5 1.10 objects (what SWMR needs, and compact chunk indexes), readable
#: by any HDF5 >= 1.10 (h5py >= 2.7) even when the writer links a newer HDF5 whose "latest" format is newer.
LIBVER = ("v110", "v110")

COMPRESSIONS = ("none", "lzf", "gzip")
LOCKING_ENV = "HDF5_USE_FILE_LOCKING"


def open_h5(path, mode: str, *, locking: bool = True, **kwargs) -> h5py.File:
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


def create_extendible(group: h5py.Group, name: str, dtype, *, width: Optional[int], chunk_rows: int,
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


def append_rows(dset: h5py.Dataset, values: np.ndarray) -> None:
    """Grow ``dset`` along axis 0 and write ``values`` at its end (one resize, one write)."""
    n = len(values)
    if n == 0:
        return
    start = dset.shape[0]
    dset.resize(start + n, axis=0)
    dset[start:start + n] = values
