"""What each side of a diagnose is, and the capture jobs that run it.

A side is an existing run or dump (read as it is), a config file (its target is run) or a target. A side can be
re-run (stage 2) when diagnose knows its target: it was given one, or the side is one of our runs whose run.json
records the target it ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from engines.errors import JobError

#: The collection tasks whose config diagnose takes as a side (their target, framework, seed and level).
CONFIG_TASKS = ("statistics", "tensor")
SOURCE_LEVELS = ("L0", "L1", "mix")


class DiagnoseError(JobError):
    """A diagnose job's bad input: one line naming the field or file (exit code 2)."""


@dataclass
class Side:
    """One side, resolved. ``dump``: an existing run or dump to read in stage 1 (None: run ``run`` first).
    ``run``: how to run its target (target, framework, seed, level), or None when it cannot be run, and then
    ``why_not`` says why."""

    name: str  # "target" or "golden"
    dump: Optional[str] = None
    run: Optional[Dict[str, Any]] = None
    why_not: str = ""
    origin: str = ""  # what the user gave, for the report
    notes: List[str] = field(default_factory=list)


def resolve_side(name: str, spec: Any, level: str) -> Side:
    """The side ``diagnose.<name>`` describes (a ``schemas.DiagnoseSide``)."""
    where = "diagnose.{}".format(name)
    if spec.path is not None:
        return _path_side(name, spec.path, where)
    if spec.config is not None:
        return _config_side(name, spec.config, where)
    return Side(name, run={"target": spec.target.model_dump(mode="json", exclude_none=True),
                           "framework": spec.framework, "level": level}, origin="target")


def _path_side(name: str, path: str, where: str) -> Side:
    p = Path(path)
    if not p.exists():
        raise DiagnoseError("{}.path: {}: no such file or folder".format(where, path))
    side = Side(name, dump=path, origin="path {}".format(path))
    recorded = _recorded_target(p)
    if recorded is None:
        side.why_not = "{} is a dump, not one of our runs recording its target".format(path)
    else:
        side.run = recorded
    return side


def _recorded_target(path: Path) -> Optional[Dict[str, Any]]:
    """The target (and framework, seed, level) an existing run of ours ran, from its run.json; None otherwise."""
    from engines.runs import RunError, open_run

    try:
        meta = open_run(path).read()
    except (RunError, OSError, ValueError):
        return None
    config = meta.get("config") or {}
    target = config.get("target")
    if meta.get("task") not in CONFIG_TASKS or not isinstance(target, dict) or not target:
        return None
    level = config.get("level") if config.get("level") in SOURCE_LEVELS else "L1"
    out = {"target": target, "framework": meta.get("framework") or config.get("framework") or "auto",
           "level": level}
    if config.get("seed") is not None:
        out["seed"] = config["seed"]
    return out


def _config_side(name: str, path: str, where: str) -> Side:
    from schemas import ConfigError, load_config

    try:
        job: Any = load_config(path)
    except ConfigError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "not a valid config"
        raise DiagnoseError("{}.config: {}: {}".format(where, path, first)) from None
    if job.task not in CONFIG_TASKS:
        raise DiagnoseError("{}.config: {} is a {} config; diagnose takes a statistics or tensor config".format(
            where, path, job.task))
    if job.target is None:
        raise DiagnoseError("{}.config: {} names no target to run".format(where, path))
    run = {"target": job.target.model_dump(mode="json", exclude_none=True), "framework": job.framework,
           "level": job.level if job.level in SOURCE_LEVELS else "L1"}
    if job.seed is not None:
        run["seed"] = job.seed
    return Side(name, run=run, origin="config {}".format(path))


def _job(kind: str, run: Dict[str, Any], dump_path: Path, steps: List[Any], section: Dict[str, Any]) -> Dict[str, Any]:
    job = {"task": kind, "dump_path": str(dump_path), "target": run["target"], "framework": run["framework"],
           "level": run["level"], "step": steps, kind: section}
    if run.get("seed") is not None:
        job["seed"] = run["seed"]
    return job


def statistics_job(run: Dict[str, Any], dump_path: Path, steps: int) -> Dict[str, Any]:
    """Stage 1: statistics of every call, forward and backward, of the first ``steps`` steps."""
    span = [0] if steps == 1 else ["0-{}".format(steps - 1)]
    return _job("statistics", run, dump_path, span, {"data_mode": ["all"], "summary_mode": "statistics"})


def tensor_job(run: Dict[str, Any], dump_path: Path, step: int, names: List[str]) -> Dict[str, Any]:
    """Stage 2: real tensors of the named calls only (full record names: one call each), one step."""
    job = _job("tensor", run, dump_path, [step], {"list": list(names), "data_mode": ["all"]})
    # one step: a per-step file is sized to what it holds (a live SWMR store reserves MiBs of table chunks)
    job["output"] = {"store_mode": "per_step", "compression": "lzf"}
    return job
