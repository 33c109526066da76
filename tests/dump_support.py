"""Framework-free helpers shared by the PyTorch and MindSpore capture tests (this module holds no tests)."""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from engines.store import DumpReader

TINY = {"preset": "tiny", "steps": 2}
STAT_COLUMNS = ("max", "min", "mean", "norm")


def rank_dirs(root: Path) -> Callable[[int], Path]:
    return lambda rank: Path(root) / ("rank%d" % rank)


def row_stats(row: Dict[str, Any]):
    return tuple(float(row[c]) for c in STAT_COLUMNS)


class Dump:
    """Read-side conveniences over a rank folder: names per step, one record's rows by slot."""

    def __init__(self, rank_dir: Path) -> None:
        self.path = Path(rank_dir)
        self.reader = DumpReader(rank_dir)
        self._records = self.reader.records()
        self._tensors = self.reader.tensors()

    def steps(self) -> List[int]:
        return self.reader.steps()

    def names(self, step: Optional[int] = None) -> List[str]:
        r = self._records
        if step is None:
            return list(r["name"])
        return [n for n, s in zip(r["name"], r["step"]) if int(s) == step]

    def record_index(self, name: str, step: int = 0) -> int:
        r = self._records
        for i, (n, s) in enumerate(zip(r["name"], r["step"])):
            if n == name and int(s) == step:
                return i
        raise KeyError("%s (step %d) not in the dump" % (name, step))

    def record(self, name: str, step: int = 0) -> Dict[str, Any]:
        i = self.record_index(name, step)
        return {k: v[i] for k, v in self._records.items()}

    def rows(self, name: str, step: int = 0) -> Dict[str, Dict[str, Any]]:
        row = int(self._records["row"][self.record_index(name, step)])
        t = self._tensors
        out = {}
        for i in np.nonzero(t["record"] == row)[0]:
            out[str(t["slot"][i])] = {k: v[i] for k, v in t.items()}
        return out

    def close(self) -> None:
        self.reader.close()
