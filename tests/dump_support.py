"""Framework-free helpers shared by the PyTorch and MindSpore capture tests (this module holds no tests)."""

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from engines.store import DumpReader

TINY = {"preset": "tiny", "steps": 2}
STAT_COLUMNS = ("max", "min", "mean", "norm")


def rank_dirs(root: Path) -> Callable[[int], Path]:
    return lambda rank: Path(root) / ("rank%d" % rank)


def capture_sinks(root: Path, framework: str, **options: Any):
    """(CaptureOptions of ``options``, the dump sinks writing rank folders under ``root``, their CaptureSummary)."""
    from engines.capture.options import CaptureOptions
    from engines.capture.sink import dump_sink_factory
    from engines.capture.summary import CaptureSummary

    opts = CaptureOptions(**options)
    summary = CaptureSummary()
    return opts, dump_sink_factory(rank_dirs(root), opts, {"framework": framework}, summary), summary


def run_zero_code(root: Path, zero_code: Any, demo: Any, framework: str, knobs: Optional[Dict[str, Any]] = None,
                  **options: Any):
    """A framework's demo trained under its zero-code capture: (Dump of rank 0, summary, DemoResult)."""
    opts, sinks, summary = capture_sinks(root, framework, **options)
    with zero_code(opts, sinks, summary=summary):
        result = demo.train(dict(knobs or TINY))
    written = sorted(Path(root).glob("rank*"))
    return (Dump(written[0]) if written else None), summary, result


def write_config(tmp_path: Path, name: str, **fields: Any) -> Path:
    """``<name>.json``: a mix-level statistics config dumping to ``tmp_path/<name>``, ``fields`` set over it."""
    data = {"task": "statistics", "dump_path": str(tmp_path / name), "level": "mix"}
    data.update(fields)
    path = tmp_path / (name + ".json")
    path.write_text(json.dumps(data))
    return path


def only_run(dump_path: Path) -> Path:
    """The one run folder a dump path holds (``latest`` aside)."""
    runs = sorted(p for p in dump_path.iterdir() if p.is_dir() and p.name != "latest")
    assert len(runs) == 1, runs
    return runs[0]


def forward_counts(names: List[str], expected: Dict[str, int]) -> Counter:
    """How often each API ran forward in ``names``; every API of ``expected`` that often, numbered 0.. in order."""
    forward = Counter(n.rsplit(".", 2)[0] for n in names if n.endswith(".forward"))
    for api, n in expected.items():
        assert forward[api] == n, (api, forward[api])
        assert ["%s.%d.forward" % (api, i) for i in range(n)] == \
            [x for x in names if x.startswith(api + ".") and x.endswith(".forward")]
    return forward


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
