"""What the home screen lists: the runs under a folder (``engines.runs``), msprobe dumps, and config files."""

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from probe_tui.formatting import format_bytes, format_time

CONFIG_MAX_BYTES = 1_000_000
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", "site-packages"}
NOT_CONFIGS = ("run.json", "package.json", "dump.json", "debug.json", "stack.json", "construct.json")
"""JSON files that are never job configs (an msprobe dump.json has a ``task`` too)."""
MONITOR_KEYS = ("targets", "ops", "xy_distribution", "mv_distribution", "wg_distribution")


@dataclass
class ConfigFile:
    path: Path
    task: str
    valid: Optional[bool]
    problem: str
    modified: float


def find_config_files(root: Path, tasks: List[str], max_depth: int = 2) -> List[ConfigFile]:
    """JSON files under ``root`` (``max_depth`` folders down, run folders skipped) that look like job configs:
    a JSON object with a ``task``, a task section, or monitor keys. Newest first."""
    root = Path(root)
    found: List[ConfigFile] = []
    for current, dirs, files in os.walk(root):
        here = Path(current)
        depth = len(here.relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS and depth < max_depth
                         and not (here / d / "run.json").exists())
        for name in sorted(files):
            if not name.endswith(".json") or name in NOT_CONFIGS:
                continue
            path = here / name
            info = _config_info(path, tasks)
            if info is not None:
                found.append(info)
    found.sort(key=lambda c: (-c.modified, str(c.path)))
    return found


def _config_info(path: Path, tasks: List[str]) -> Optional[ConfigFile]:
    from schemas import ConfigError
    from schemas.source import read_config_text

    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > CONFIG_MAX_BYTES:  # a FIFO would block the scan
            return None
        data = json.loads(read_config_text(path))
    except (OSError, ValueError, RecursionError, ConfigError):
        return None
    if not isinstance(data, dict):
        return None
    task = data.get("task")
    if not isinstance(task, str):
        sections = [t for t in tasks if isinstance(data.get(t), dict)]
        if len(sections) == 1:
            task = sections[0]
        elif any(k in data for k in MONITOR_KEYS):
            task = "monitor"
        else:
            return None
    return ConfigFile(path, task, None, "", info.st_mtime)


def check_configs(configs: List[ConfigFile], backend: Any) -> None:
    """Fill in ``valid`` and the first problem of each config (validation imports no framework)."""
    for config in configs:
        try:
            loaded = backend.read_file(config.path)
        except ValueError as exc:
            config.valid, config.problem = False, str(exc)
            continue
        config.valid = loaded.validation.ok
        if loaded.validation.issues:
            config.problem = loaded.validation.issues[0].line()


def list_runs(root: Path) -> List[Any]:
    """The runs under ``root``, newest first (``engines.run_list.list_runs``)."""
    from engines.run_list import list_runs as engine_list_runs

    return list(engine_list_runs(root))


_HEAD_KEYS = re.compile(r'"(task|framework|level)"\s*:\s*"([^"]*)"')


def _dump_json_head(path: Path) -> Dict[str, str]:
    """``task``/``framework``/``level`` from the first kilobytes of a dump.json (which can be gigabytes)."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            head = handle.read(4096)
    except OSError:
        return {}
    return {key: value for key, value in _HEAD_KEYS.findall(head)}


def find_msprobe_dumps(root: Path, max_depth: int = 3) -> List[Dict[str, Any]]:
    """msprobe dump folders (``step<N>/rank<R>/dump.json``), compare results written with ``compare -o DIR`` and
    acc_check results under ``root``, as home-table rows: the folders a msprobe user already has, to open and
    compare, and results that have no run.json. Run folders of ours are not entered."""
    from engines.acc_check.results import KIND as ACC_KIND
    from engines.compare.hdf5_out import KIND as COMPARE_KIND
    from engines.dumps.msprobe.layout import STEP_DIR, find_dump_files
    from engines.run_list import folder_size
    from engines.store import store_kinds

    root = Path(root)
    rows: List[Dict[str, Any]] = []
    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            children = [e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        if (folder / "run.json").is_file():
            continue
        try:
            kinds = store_kinds(folder)
        except Exception:
            kinds = []
        if COMPARE_KIND in kinds or ACC_KIND in kinds:
            rows.append(_compare_row(folder, root, folder_size(folder), "compare" if COMPARE_KIND in kinds
                                     else "acc_check"))
            continue
        if any(STEP_DIR.match(e.name) for e in children):
            try:
                files = find_dump_files(folder)
            except (OSError, ValueError):
                files = []
            if files:
                rows.append(_dump_row(folder, root, files, folder_size(folder)))
                continue
        if depth < max_depth:
            stack.extend((Path(e.path), depth + 1) for e in children
                         if not e.name.startswith(".") and e.name not in SKIP_DIRS)
    return rows


def _dump_row(folder: Path, root: Path, files: List[Any], size: int) -> Dict[str, Any]:
    head = _dump_json_head(files[0].path)
    try:
        modified = folder.stat().st_mtime
    except OSError:
        modified = 0.0
    return {
        "started": format_time(modified) if modified else "—",
        "task": head.get("task", "?"),
        "framework": head.get("framework", "?"),
        "steps": str(len({f.step for f in files})),
        "ranks": str(len({f.rank for f in files})),
        "size": format_bytes(size),
        "status": "msprobe dump",
        "folder": _relative(folder, root),
        "sort": modified,
    }


def _compare_row(folder: Path, root: Path, size: int, task: str = "compare") -> Dict[str, Any]:
    try:
        modified = folder.stat().st_mtime
    except OSError:
        modified = 0.0
    return {"started": format_time(modified) if modified else "—", "task": task, "framework": "—",
            "steps": "—", "ranks": "—", "size": format_bytes(size), "status": task + " result",
            "folder": _relative(folder, root), "sort": modified}


def _relative(path: Path, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root)) or "."
    except ValueError:
        return str(path)


def run_row(info: Any, root: Path) -> Dict[str, Any]:
    """The cells of one run in the home table."""
    shown = _relative(Path(info.path), root)
    ranks = getattr(info, "ranks", None)
    steps = getattr(info, "steps", None)
    size = getattr(info, "size_bytes", None)
    return {
        "started": format_time(getattr(info, "started", None)),
        "task": str(getattr(info, "task", "") or "—"),
        "framework": str(getattr(info, "framework", "") or "—"),
        "steps": _count_text(steps),
        "ranks": _count_text(ranks),
        "size": format_bytes(size) if size is not None else "—",
        "status": str(getattr(info, "status", "") or "—"),
        "folder": shown,
        "sort": getattr(info, "started_unix", None) or 0.0,
    }


def _count_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return str(len(value)) if value else "—"
    return str(value)
