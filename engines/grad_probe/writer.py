"""Writes GradStepStats into a rank's grads store, and msprobe's CSV beside it when asked."""

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Sequence

from engines.grad_probe.csv_export import write_grad_summary
from engines.grad_probe.levels import has_direction, has_hash, has_histogram
from engines.grad_probe.records import GradStepStats
from engines.grad_probe.store_layout import KIND, SCHEMA_VERSION, TABLE, table_specs
from engines.safe_fs import PathLike

if TYPE_CHECKING:
    from engines.store import StoreWriter


class GradStoreWriter:
    """One per rank. ``csv_dir`` also writes ``grad_summary_{step}.csv`` there (msprobe's export)."""

    def __init__(
        self,
        rank_dir: PathLike,
        *,
        level: str,
        bounds: Sequence[float],
        param_list: Sequence[str] = (),
        rank: int = 0,
        world_size: int = 1,
        framework: str = "pytorch",
        csv_dir: Optional[Path] = None,
        store_options: Optional[Dict[str, Any]] = None,
    ) -> None:
        from engines.store import StoreWriter

        self.level = level
        self.bounds = [float(b) for b in bounds]
        self.csv_dir = Path(csv_dir) if csv_dir is not None else None
        meta = {
            "rank": rank,
            "world_size": world_size,
            "framework": framework,
            "schema_version": SCHEMA_VERSION,
            "grad_level": level,
            "bounds": self.bounds,
            "param_list": list(param_list),
        }
        self._store = StoreWriter(rank_dir, KIND, table_specs(level, self.bounds), meta=meta, **(store_options or {}))
        self.steps = 0
        self.rows = 0

    @property
    def store(self) -> "StoreWriter":
        return self._store

    def write(self, stats: GradStepStats) -> None:
        n = len(stats)
        columns: Dict[str, Any] = {
            "step": [stats.step] * n,
            "name": stats.names,
            "dtype": stats.dtypes,
            "shape": [json.dumps(list(s)) for s in stats.shapes],
            "numel": stats.numels,
            "max": stats.max,
            "min": stats.min,
            "norm": stats.norm,
        }
        if has_hash(self.level):
            columns["crc32"] = stats.crc32
        if has_histogram(self.level):
            columns["hist"] = stats.hist
            columns["zero_frac"] = stats.zero_frac
        if has_direction(self.level) and n and stats.directions is not None and stats.dir_offsets is not None:
            ref = self._store.put_array(stats.directions)
            columns["dir_offset"] = (stats.dir_offsets + ref.offset) if ref is not None else [-1] * n
        if n:
            self._store.append(TABLE, **columns)
        self._store.commit(stats.step, params=n, skipped=len(stats.skipped))
        if self.csv_dir is not None:
            write_grad_summary(self.csv_dir, stats, self.level, self.bounds)
        self.steps += 1
        self.rows += n

    @property
    def bytes_written(self) -> int:
        return self._store.bytes_written

    def close(self, status: str = "finished") -> None:
        self._store.close(status)
