"""Results of the checking tasks for their views: overflow_check (``overflow`` store per rank), analyze_overflow
(``overflow_analysis`` store) and free_benchmark (``free_benchmark`` store per rank), with the run's summary."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

OVERFLOW, ANALYSIS, FREE_BENCHMARK = "overflow", "overflow_analysis", "free_benchmark"


def _kinds(path: Path) -> List[str]:
    from engines.store import store_kinds

    try:
        return store_kinds(path)
    except Exception:
        return []


def rank_dirs_with(path: Path, kind: str) -> Dict[int, Path]:
    """``{rank: folder}`` of the rank folders of ``path`` holding a ``kind`` store (``path`` itself when it is
    one)."""
    path = Path(path)
    if not path.is_dir():
        return {}
    if kind in _kinds(path):
        name = path.name
        return {int(name[4:]) if name.startswith("rank") and name[4:].isdigit() else 0: path}
    from engines.store import open_rank_dirs

    try:
        dirs = open_rank_dirs(path)
    except Exception:
        return {}
    return {r: d for r, d in dirs.items() if kind in _kinds(d)}


def is_overflow_result(path: Path) -> bool:
    """An overflow_check run (rank folders with an ``overflow`` store) or an analyze_overflow result."""
    path = Path(path)
    return bool(rank_dirs_with(path, OVERFLOW)) or (path.is_dir() and ANALYSIS in _kinds(path))


def is_free_benchmark_result(path: Path) -> bool:
    return bool(rank_dirs_with(Path(path), FREE_BENCHMARK))


def run_summary(path: Path) -> Dict[str, Any]:
    """run.json's summary (empty when there is none)."""
    for candidate in (Path(path), Path(path).parent):
        run_json = candidate / "run.json"
        if run_json.is_file():
            try:
                return dict(json.loads(run_json.read_text(encoding="utf-8")).get("summary") or {})
            except (OSError, ValueError, AttributeError):
                return {}
    return {}


@dataclass
class OverflowResult:
    path: Path
    steps: List[Dict[str, Any]] = field(default_factory=list)  # every rank's steps, with "rank"
    calls: List[Dict[str, Any]] = field(default_factory=list)  # every rank's flagged calls, with "rank"
    replays: List[Dict[str, Any]] = field(default_factory=list)  # analyze_overflow's rows
    summary: Dict[str, Any] = field(default_factory=dict)

    @property
    def analysis(self) -> bool:
        return bool(self.replays) and not self.steps

    def calls_of(self, rank: int, step: int) -> List[Dict[str, Any]]:
        return [c for c in self.calls if c["rank"] == rank and c["step"] == step]


def read_overflow(path) -> OverflowResult:
    from engines.overflow.results import read_calls, read_steps

    path = Path(path)
    out = OverflowResult(path, summary=run_summary(path))
    for rank, folder in rank_dirs_with(path, OVERFLOW).items():
        out.steps += [dict(row, rank=rank) for row in read_steps(folder)]
        out.calls += [dict(row, rank=rank) for row in read_calls(folder)]
    if ANALYSIS in _kinds(path):
        from engines.store import StoreReader

        with StoreReader(path, ANALYSIS) as reader:
            cols = reader.read("replays")
        n = len(next(iter(cols.values()))) if cols else 0
        out.replays = [{k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in cols.items()}
                       for i in range(n)]
    out.calls.sort(key=lambda c: (c["rank"], c["step"], c["order"]))
    out.steps.sort(key=lambda s: (s["step"], s["rank"]))
    return out


@dataclass
class FreeBenchmarkResult:
    path: Path
    checks: List[Dict[str, Any]]
    summary: Dict[str, Any]

    @property
    def inconsistent(self) -> List[Dict[str, Any]]:
        return [c for c in self.checks if not c["consistent"]]


def read_free_benchmark(path) -> FreeBenchmarkResult:
    from engines.free_benchmark.results import read_checks

    path = Path(path)
    checks: List[Dict[str, Any]] = []
    for rank, folder in rank_dirs_with(path, FREE_BENCHMARK).items():
        checks += [dict(row, rank=rank) for row in read_checks(folder)]
    return FreeBenchmarkResult(path, checks, run_summary(path))
