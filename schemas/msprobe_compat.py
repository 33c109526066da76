"""Recognise the shape of a config and bring it to the native shape (docs/decisions/0004-config-shape.md).

- Native, and msprobe's config.json: `{"task": ..., common keys, "<task>": {...}}`, taken as is.
- msprobe's separate monitor JSON: no `task`, monitor keys at the top (`targets`, `*_distribution`, `ops`, ...):
  the monitor keys move into the `monitor` section of a monitor job; our top-level keys (`dump_path`,
  `target`, ...) stay where they are.
- msprobe's classic compare.json: no `task`, `npu_path` and `bench_path`: a compare job whose target is
  npu_path and whose golden is bench_path; the other keys move into the `compare` section (where the foreign
  ones, such as `stack_path`, warn).
- No `task` and neither shape: msprobe's default task, statistics, with a warning.
"""

from typing import Any, Dict

from .errors import WarnFn
from .foreign import FOREIGN_KEYS
from .monitor import MonitorJob, MonitorSection

__all__ = ["normalise_shape", "looks_like_monitor", "looks_like_compare"]

_MONITOR_KEYS = frozenset(MonitorSection.model_fields) | frozenset(FOREIGN_KEYS["monitor"])


def looks_like_monitor(data: Dict[str, Any]) -> bool:
    return any(key in _MONITOR_KEYS or key.endswith("_distribution") for key in data)


def looks_like_compare(data: Dict[str, Any]) -> bool:
    return "npu_path" in data and "bench_path" in data


def normalise_shape(data: Dict[str, Any], warn: WarnFn) -> Dict[str, Any]:
    data = dict(data)
    if "_comment" in data:
        if "comment" in data:
            warn("_comment", "both comment and _comment are given; _comment is ignored")
            data.pop("_comment")
        else:
            data["comment"] = data.pop("_comment")
    if data.get("task") in ("run_ut", "acc_check"):
        return _acc_check_shape(data)
    if data.get("task") in ("statistics", "tensor"):
        _online_shape(data, data["task"], warn)
    if "task" in data:
        return data
    if looks_like_compare(data):
        section = {k: v for k, v in data.items() if k not in ("comment", "dump_path", "output")}
        section["target_path"] = section.pop("npu_path")
        section["golden_path"] = section.pop("bench_path")
        native = {k: v for k, v in data.items() if k in ("comment", "dump_path", "output")}
        native.update({"task": "compare", "compare": section})
        return native
    if looks_like_monitor(data):
        top = set(MonitorJob.model_fields) - {"monitor"}
        native = {k: v for k, v in data.items() if k in top}
        native["task"] = "monitor"
        native["monitor"] = {k: v for k, v in data.items() if k not in top}
        return native
    warn("task", "no task given: msprobe's default, statistics, is used")
    data["task"] = "statistics"
    return data


def _online_shape(data: Dict[str, Any], task: str, warn: WarnFn) -> None:
    """msprobe's ``online_run_ut: true`` (its online pre-check of the section's ``list``) as our ``online_check``,
    which runs in the training process on the CPU; the remote keys (``host``, ``nfs_path``...) stay foreign."""
    section = data.get(task)
    if not isinstance(section, dict) or section.get("online_run_ut") is not True or "online_check" in section:
        return
    section = dict(section)
    section.pop("online_run_ut")
    patterns = section.get("list")
    section["online_check"] = {"enabled": True,
                               "api_list": list(patterns) if isinstance(patterns, list) else []}
    data[task] = section
    warn(task + ".online_run_ut", "runs as online_check: each selected API is re-run on the CPU reference in the "
                                  "training process (no remote host)")


def _acc_check_shape(data: Dict[str, Any]) -> Dict[str, Any]:
    """msprobe's run_ut / acc_check config as our acc_check job: the section under ``acc_check``, its
    ``white_list`` as ``api_list`` (the dump itself is msprobe's ``-api_info`` flag: ``acc_check.path`` here)."""
    data = dict(data)
    old = data.pop("run_ut", None) if data["task"] == "run_ut" else None
    data["task"] = "acc_check"
    section = data.get("acc_check")
    if old is not None and section is None:
        section = old
    if isinstance(section, dict):
        section = dict(section)
        if "white_list" in section and "api_list" not in section:
            section["api_list"] = section.pop("white_list")
        data["acc_check"] = section
    return data
