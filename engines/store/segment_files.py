"""A reader's open segment files: an LRU of file handles, kept dataset handles, file locking as the file system
allows."""

from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import h5py
import numpy as np

from . import h5io
from .errors import StoreError

MAX_OPEN = 32
#: Chunk cache of an open pool: several pool chunks, so tensors read one by one out of a compressed pool do not
#: decompress the same chunk again for each tensor.
POOL_CACHE_BYTES = 8 << 20
#: Chunk cache of every other dataset (table columns, strings, the commit log): several of their chunks (16,384
#: rows, 128 KiB for 8-byte columns), enough for reading step after step. Set explicitly: HDF5 2.0 raised its
#: default to 8 MiB a dataset, so a reader of a long dump held up to 8 MiB for each of its ~35 columns.
TABLE_CACHE_BYTES = 1 << 20


class Segment:
    __slots__ = ("path", "swmr", "base", "seen", "live")

    def __init__(self, path: Path, swmr: bool, base: np.ndarray):
        self.path, self.swmr, self.base = path, swmr, base
        self.seen = 0  # commit rows already taken from the file (SWMR)
        # A SWMR file whose writer may still hold it (running, or killed: the file stays marked open for write)
        # is opened in SWMR mode. One its writer closed is opened plainly: HDF5's SWMR reader retries a damaged
        # file's metadata with growing sleeps for a very long time, a plain open fails at once.
        self.live = swmr


class SegmentFiles:
    def __init__(self, locking: bool):
        self.locking = locking
        self.segments: List[Segment] = []
        self._handles: "OrderedDict[int, h5py.File]" = OrderedDict()
        self._dsets: Dict[Tuple[int, str], Tuple[h5py.Dataset, int]] = {}
        self._generation = 0
        #: ``on_open(file, segment)`` checks each file when it is opened (the reader's structure checks).
        self.on_open: Optional[Callable[[h5py.File, Segment], None]] = None

    def add(self, path: Path, swmr: bool, base: np.ndarray) -> int:
        self.segments.append(Segment(path, swmr, base))
        return len(self.segments) - 1

    def grew(self) -> None:
        """New commits were seen: live SWMR datasets must refresh before their next read."""
        self._generation += 1

    def open_file(self, path: Path, swmr: bool) -> h5py.File:
        kwargs: Dict[str, Any] = {"swmr": True} if swmr else {}
        kwargs["rdcc_nbytes"] = TABLE_CACHE_BYTES
        try:
            return h5io.open_h5(path, "r", locking=self.locking, **kwargs)
        except OSError as exc:
            if self.locking and "lock" in str(exc).lower():
                self.locking = False  # a file system whose locks fail though we did not recognise it
                return h5io.open_h5(path, "r", locking=False, **kwargs)
            raise

    def adopt(self, s: int, f: h5py.File) -> None:
        self._handles[s] = f

    def file(self, s: int) -> h5py.File:
        f = self._handles.get(s)
        if f is not None:
            self._handles.move_to_end(s)
            return f
        seg = self.segments[s]
        try:
            f = self.open_file(seg.path, seg.swmr and seg.live)
        except OSError as exc:
            raise StoreError(f"{seg.path}: cannot open ({exc})") from None
        if self.on_open is not None:
            try:
                self.on_open(f, seg)
            except BaseException:
                f.close()
                raise
        self._handles[s] = f
        while len(self._handles) > MAX_OPEN:
            gone, old = self._handles.popitem(last=False)
            for key in [k for k in self._dsets if k[0] == gone]:
                del self._dsets[key]
            old.close()
        return f

    def dataset(self, s: int, path: str) -> Optional[h5py.Dataset]:
        """Dataset handles are kept: each holds its own chunk cache, so reopening one per read would decompress
        the same chunk again and again. None when the segment lacks it (per-step files hold only the datasets
        that got data)."""
        f = self.file(s)
        held = self._dsets.get((s, path))
        if held is None:
            try:
                d = _open_dataset(f, path)
            except KeyError:
                return None
        else:
            d, generation = held
            seg = self.segments[s]
            if generation != self._generation and seg.swmr and seg.live:
                d.refresh()  # a live file grew since this handle last looked
        self._dsets[(s, path)] = (d, self._generation)
        return d

    def need(self, s: int, path: str) -> h5py.Dataset:
        d = self.dataset(s, path)
        if d is None:
            raise StoreError(f"{self.segments[s].path}: {path} is missing")
        return d

    def close(self) -> None:
        self._dsets.clear()
        while self._handles:
            _, f = self._handles.popitem()
            f.close()


def _open_dataset(f: h5py.File, path: str) -> h5py.Dataset:
    if not path.startswith("pools/"):
        return f[path]
    dapl = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    dapl.set_chunk_cache(1009, POOL_CACHE_BYTES, 0.75)
    return h5py.Dataset(h5py.h5d.open(f.id, path.encode(), dapl))
