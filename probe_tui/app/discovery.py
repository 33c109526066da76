"""What the home screen lists: the runs under a folder (``engines.runs``) and the config files in it."""

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional

CONFIG_MAX_BYTES = 1_000_000
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache",
             ".pytest_cache", "site-packages"}
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
            if not name.endswith(".json") or name in ("run.json", "package.json"):
                continue
            path = here / name
            info = _config_info(path, tasks)
            if info is not None:
                found.append(info)
    found.sort(key=lambda c: (-c.modified, str(c.path)))
    return found


def _config_info(path: Path, tasks: List[str]) -> Optional[ConfigFile]:
    try:
        stat = path.stat()
        if stat.st_size > CONFIG_MAX_BYTES:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
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
    return ConfigFile(path, task, None, "", stat.st_mtime)


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
    """The runs under ``root``, newest first (``engines.runs.list_runs``)."""
    from engines.runs import list_runs as engine_list_runs

    return list(engine_list_runs(root))


def format_time(value: Any) -> str:
    """A time as local ``YYYY-mm-dd HH:MM`` (ISO strings, datetimes and epoch seconds accepted)."""
    if value in (None, ""):
        return "—"
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)[:16]
    if moment.tzinfo is not None:
        moment = moment.astimezone()  # run.json keeps UTC; people read local time
    return moment.strftime("%Y-%m-%d %H:%M")


def run_row(info: Any, root: Path) -> Dict[str, str]:
    """The cells of one run in the home table."""
    from probe_tui.app.screens.run import format_bytes

    path = Path(info.path)
    try:
        shown = str(path.relative_to(root))
    except ValueError:
        shown = str(path)
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
    }


def _count_text(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return str(len(value)) if value else "—"
    return str(value)
