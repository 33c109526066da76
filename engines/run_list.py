"""The run list (the app's home table, ``probe-tui`` pickers): every run folder under a root, with its status,
steps, ranks and size, and the launch's per-rank figures recomputed from the rank folders (engines/run_ranks.py),
so a rank that finished after the owner wrote ``run.json`` is counted (docs/FORMAT.md "Ranks of one launch")."""

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from engines.run_ranks import launch_figures
from engines.runs import RUN_JSON, PathLike, RunError, _ranks, _read_json, effective_status


@dataclass
class RunInfo:
    """One row of the app's run list."""

    path: Path
    run_id: str
    task: str
    framework: str
    status: str
    steps: Optional[int]
    ranks: List[int]
    size_bytes: int
    started: str
    started_unix: Optional[float] = None
    exit_code: Optional[int] = None
    world_size: Optional[int] = None
    #: per rank (``"0"``, ``"1"``...): status and figures, recomputed from the rank folders (docs/FORMAT.md)
    per_rank: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    totals: Dict[str, Any] = field(default_factory=dict)  # launch totals; empty for a run without rank.json


def folder_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed)."""
    total = 0
    stack = [path]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def _run_info(path: Path) -> RunInfo:
    try:
        meta = _read_json(path / RUN_JSON)
        status = effective_status(meta)
    except RunError:
        meta, status = {}, "unreadable"
    steps = meta.get("steps")
    if not isinstance(steps, int):
        summary = meta.get("summary")
        steps = summary.get("steps") if isinstance(summary, dict) else None
        steps = steps if isinstance(steps, int) else None
    exit_code = meta.get("exit_code")
    launch = launch_figures(path, meta) if meta else {"per_rank": {}, "totals": {}}
    if not any(entry.get("status") != "unknown" for entry in launch["per_rank"].values()):
        launch = {"per_rank": {}, "totals": {}}  # no rank.json anywhere: a run from before they existed
    elif isinstance(launch["totals"].get("steps"), int):
        steps = launch["totals"]["steps"]
    world = meta.get("world_size")
    return RunInfo(
        path=path,
        run_id=str(meta.get("run_id") or path.name),
        task=str(meta.get("task", "?")),
        framework=str(meta.get("framework", "?")),
        status=status,
        steps=steps,
        ranks=_ranks(path),
        size_bytes=folder_size(path),
        started=str(meta.get("started", "")),
        started_unix=meta.get("started_unix") if isinstance(meta.get("started_unix"), (int, float)) else None,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        world_size=world if isinstance(world, int) and not isinstance(world, bool) else None,
        per_rank=launch["per_rank"],
        totals=launch["totals"],
    )


def _find_run_folders(root: Path, max_depth: int) -> List[Path]:
    found: List[Path] = []
    stack: List[Tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if (folder / RUN_JSON).is_file():
            found.append(folder)
            continue  # a run's own subfolders are not runs
        if depth >= max_depth:
            continue
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                stack.append((Path(entry.path), depth + 1))
    return found


def list_runs(root: PathLike, max_depth: int = 3) -> List[RunInfo]:
    """Every run folder under ``root`` (``root`` itself included), newest first. Symlinks are not followed."""
    root = Path(root)
    if not root.is_dir():
        raise RunError(f"{root}: no such folder")
    infos = [_run_info(path) for path in _find_run_folders(root, max_depth)]
    infos.sort(key=lambda info: (info.started_unix or 0.0, info.run_id), reverse=True)
    return infos


__all__ = ["RunInfo", "folder_size", "list_runs"]
