"""Reading a grads store (ours) with no framework: steps, per-step parameter rows, unpacked directions."""

import json
from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from engines.grad_probe.store_layout import KIND, TABLE
from engines.safe_fs import PathLike


@dataclass
class GradStep:
    """One step's rows, in record order. ``packed[i]`` is parameter i's packed direction (None without one)."""

    step: int
    names: List[str]
    shapes: List[tuple]
    numels: np.ndarray
    max: np.ndarray
    min: np.ndarray
    norm: np.ndarray
    crc32: np.ndarray
    zero_frac: np.ndarray
    hist: Optional[np.ndarray]
    packed: List[Optional[np.ndarray]]

    def index(self) -> Dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def direction(self, i: int) -> np.ndarray:
        packed = self.packed[i]
        if packed is None:
            raise ValueError(f"{self.names[i]}: no direction stored at step {self.step}")
        return np.unpackbits(packed, count=int(self.numels[i])).astype(bool).reshape(self.shapes[i])


class GradReader:
    """``GradReader(rank_dir)``: the grads store of one rank."""

    def __init__(self, rank_dir: PathLike) -> None:
        from engines.store import StoreReader

        self._store = StoreReader(rank_dir, KIND)
        run_meta = self._store.meta.get("run_meta") or {}
        self.level: str = run_meta.get("grad_level", "L1")
        self.bounds: List[float] = list(run_meta.get("bounds") or [])
        self.rank: int = int(self._store.meta.get("rank", 0))

    def refresh(self) -> bool:
        return self._store.refresh()

    def steps(self) -> List[int]:
        return self._store.steps()

    def read_step(self, step: int, with_directions: bool = True) -> GradStep:
        spec = self._store.table_spec(TABLE)
        columns = [c for c in spec.column_names]
        data = self._store.read(TABLE, columns, steps=[step])
        n = len(data["step"])
        numels = data["numel"].astype(np.int64)
        packed: List[Optional[np.ndarray]] = [None] * n
        offsets = data["dir_offset"].astype(np.int64)
        if with_directions and n and (offsets >= 0).any():
            sizes = (numels + 7) // 8
            valid = offsets >= 0
            lo = int(offsets[valid].min())
            hi = int((offsets[valid] + sizes[valid]).max())
            blob = self._store.read_array({"pool": "uint8", "offset": lo, "numel": hi - lo, "shape": [hi - lo]})
            for i in np.flatnonzero(valid):
                start = int(offsets[i]) - lo
                packed[i] = blob[start:start + int(sizes[i])]
        return GradStep(
            step=step,
            names=[str(x) for x in data["name"]],
            shapes=[tuple(json.loads(s)) for s in data["shape"]],
            numels=numels,
            max=data["max"],
            min=data["min"],
            norm=data["norm"],
            crc32=data["crc32"],
            zero_frac=data["zero_frac"],
            hist=data.get("hist"),
            packed=packed,
        )

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> "GradReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
