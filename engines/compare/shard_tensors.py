"""Tensor data of a merged piece: whole tensors assembled from their shards, and which rank's shard diverged.

:class:`MergedTensorSpec` is a tensor spec like the readers' (picklable; ``open()`` gives ``info(loc)`` and
``read(loc, start, stop)``), so the tensor compare streams merged rows as it streams any other. A whole tensor is
assembled once when first read (the last one is kept: the compare reads a tensor's element ranges in order), so
memory holds one whole tensor per worker at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.compare.shard_merge import Part, Recipe


@dataclass(frozen=True)
class MergedTensorSpec:
    bases: Tuple[Tuple[int, Any], ...]  # (rank, that rank's tensor spec)
    entries: Tuple[Any, ...]  # (rank, loc) or Recipe, indexed by a merged row's ``data``

    def open(self) -> "MergedTensorReader":
        return MergedTensorReader(self)


class MergedTensorReader:
    def __init__(self, spec: MergedTensorSpec):
        self.spec = spec
        self._bases: Dict[int, Any] = {}
        self._specs = dict(spec.bases)
        self._held: Tuple[int, Optional[np.ndarray]] = (-1, None)

    def _base(self, rank: int) -> Any:
        reader = self._bases.get(rank)
        if reader is None:
            reader = self._bases[rank] = self._specs[rank].open()
        return reader

    def info(self, loc: int) -> Tuple[np.dtype, int, tuple]:
        entry = self.spec.entries[loc]
        if isinstance(entry, Recipe):
            first = entry.parts[0]
            while first.inner is not None:  # a merged part: its first stored part says the dtype
                first = first.inner.parts[0]
            dtype, _, _ = self._base(first.rank).info(first.loc)
            return dtype, int(np.prod(entry.shape)) if entry.shape else 1, entry.shape
        rank, base_loc = entry
        return self._base(rank).info(base_loc)

    def read(self, loc: int, start: int, stop: int) -> np.ndarray:
        entry = self.spec.entries[loc]
        if not isinstance(entry, Recipe):
            rank, base_loc = entry
            return self._base(rank).read(base_loc, start, stop)
        return self.whole(loc).reshape(-1)[start:stop]

    def part(self, rank: int, loc: int) -> np.ndarray:
        reader = self._base(rank)
        _, numel, _ = reader.info(loc)
        return reader.read(loc, 0, numel)

    def whole(self, loc: int) -> np.ndarray:
        held_loc, held = self._held
        if held_loc == loc and held is not None:
            return held
        whole = self.assemble(self.spec.entries[loc])
        self._held = (loc, whole)
        return whole

    def assemble(self, recipe: Recipe) -> np.ndarray:
        return recipe.assemble([self.array(p) for p in recipe.parts])

    def array(self, part: Part) -> np.ndarray:
        """One part's data, flat (a merged part assembled)."""
        if part.inner is not None:
            return self.assemble(part.inner).reshape(-1)
        return self.part(part.rank, part.loc)

    def close(self) -> None:
        for reader in self._bases.values():
            reader.close()
        self._bases.clear()
        self._held = (-1, None)


def shard_errors(recipe: Recipe, reader: MergedTensorReader, golden: np.ndarray) -> Optional[List[Tuple[Part, float]]]:
    """(part, ‖shard − golden slice‖ / ‖golden slice‖) for every shard of a whole tensor; None when its parts are
    not slices of it (a partial placement)."""
    boxes = recipe.boxes()
    if boxes is None:
        return None
    whole = golden.reshape(recipe.shape).astype(np.float64, copy=False)
    out = []
    for part, offset in boxes:
        index = tuple(slice(o, o + s) for o, s in zip(offset, part.shape))
        g = whole[index]
        t = reader.array(part).reshape(part.shape).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            diff = float(np.linalg.norm((t - g)[np.isfinite(t - g)]))
            norm = float(np.linalg.norm(g[np.isfinite(g)]))
            bad = bool((np.isfinite(t) != np.isfinite(g)).any())
        out.append((part, np.inf if bad else (diff / norm if norm > 0 else (0.0 if diff == 0 else np.inf))))
    return out
