"""Full tensors of a msprobe dump: ``dump_tensor_data/<data_name>`` as ``.npy`` or ``.pt``."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Tuple

import numpy as np

from engines.dumps.msprobe.backward_slots import TRANSPOSED
from engines.errors import BadInputError


class TensorFileError(BadInputError, ValueError):
    """A tensor file is missing or unreadable (the row is reported, the compare goes on)."""


def load_tensor_file(path: Path, *, mmap: bool = True) -> np.ndarray:
    """One ``.npy`` (memory-mapped, no pickles) or ``.pt`` (torch, ``weights_only=True``) file."""
    path = Path(path)
    if not path.is_file():
        raise TensorFileError("{}: not found".format(path))
    if path.suffix == ".npy":
        try:
            return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
        except Exception as exc:  # a damaged file: numpy raises OSError, ValueError, EOFError, ...
            raise TensorFileError("{}: cannot read ({}: {})".format(path, type(exc).__name__, exc)) from None
    if path.suffix == ".pt":
        from engines.frameworks import adapter_module

        ptload = adapter_module("pytorch", "ptload")

        if not ptload.torch_available():
            raise TensorFileError("{}: a .pt file needs torch installed".format(path))
        try:
            return ptload.load_pt(path)
        except TensorFileError:
            raise
        except Exception as exc:  # a damaged file: torch raises RuntimeError, IndexError, EOFError, ...
            raise TensorFileError("{}: cannot read ({}: {})".format(path, type(exc).__name__, exc)) from None
    raise TensorFileError("{}: unknown tensor file type (expected .npy or .pt)".format(path))


@dataclass(frozen=True)
class MsprobeTensorSpec:
    """Picklable description of a dump's tensor files; worker processes :meth:`open` it."""

    folder: str
    files: Tuple[str, ...]

    def open(self) -> "MsprobeTensorReader":
        return MsprobeTensorReader(self)


class MsprobeTensorReader:
    """Reads element ranges of tensor files, keeping a few recently used files open."""

    def __init__(self, spec: MsprobeTensorSpec, cache: int = 4):
        self.spec = spec
        self._open: "OrderedDict[int, np.ndarray]" = OrderedDict()
        self._cache = cache

    def _array(self, loc: int) -> np.ndarray:
        arr = self._open.get(loc)
        if arr is None:
            name = self.spec.files[loc]
            transposed = name.endswith(TRANSPOSED)  # msprobe's dwᵀ of a linear backward (backward_slots.py)
            if transposed:
                name = name[:-len(TRANSPOSED)]
            if Path(name).name != name or name in (".", ".."):  # dump.json names files in dump_tensor_data only
                raise TensorFileError("{}: data_name {!r} is not a file name in it".format(self.spec.folder, name))
            arr = load_tensor_file(Path(self.spec.folder) / name)
            if transposed and arr.ndim == 2:
                arr = np.ascontiguousarray(arr.T)
            self._open[loc] = arr
            while len(self._open) > self._cache:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(loc)
        return arr

    def info(self, loc: int) -> Tuple[np.dtype, int, tuple]:
        arr = self._array(loc)
        return arr.dtype, int(arr.size), tuple(arr.shape)

    def read(self, loc: int, start: int, stop: int) -> np.ndarray:
        arr = self._array(loc)
        flat = arr.reshape(-1) if arr.flags.c_contiguous else np.ravel(arr)
        return np.asarray(flat[start:stop])

    def close(self) -> None:
        self._open.clear()
