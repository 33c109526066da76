"""`load_config`, `dump_config` and `starter_config`: the config's way in and out."""

import copy
import re
import weakref
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Type, Union

from pydantic import ValidationError

from .common import JobBase
from .errors import (
    ConfigError,
    ConfigIssue,
    WarnFn,
    default_warn,
    did_you_mean,
    echo,
    issues_from_validation_error,
)
from .foreign import FOREIGN_TASKS
from .jobs import ANALYSIS_TASKS, TASKS
from .keys import check_job_keys
from .msprobe_compat import normalise_shape
from .source import check_raw_config, parse_config_json, read_config_text

__all__ = ["load_config", "dump_config", "starter_config", "read_config_source", "config_source"]

Source = Union[str, Path, Dict[str, Any]]


def read_config_source(source: Source, warn: WarnFn = default_warn) -> Dict[str, Any]:
    """The raw config object from a dict, a JSON string or a file path; file and JSON problems as ConfigError.
    Sizes, nesting and number lengths are bounded (`schemas.source`)."""
    if isinstance(source, dict):
        check_raw_config(source, "<config>")
        try:
            return copy.deepcopy(source)
        except Exception as exc:  # a lock, a socket, ...: nothing a config holds
            raise ConfigError([ConfigIssue("<config>", f"holds a value that is not config data ({echo(exc)})",
                                           "a config holds JSON data: objects, lists, strings, numbers")]) from None
    if isinstance(source, str) and source.lstrip().startswith("{"):
        where = "<config string>"
        data = parse_config_json(source, where, warn)
    elif isinstance(source, (str, Path)):
        where = str(source)
        data = parse_config_json(read_config_text(source), where, warn)
    else:
        raise ConfigError([ConfigIssue("", f"cannot load a config from {type(source).__name__}; give a path, "
                                           "a JSON string or a dict")])
    if not isinstance(data, dict):
        raise ConfigError([ConfigIssue(where, f"must hold a JSON object {{...}}, not {type(data).__name__}")])
    check_raw_config(data, where)
    return data


def _job_model(data: Dict[str, Any]) -> Type[JobBase]:
    task = data.get("task")
    if not isinstance(task, str):
        raise ConfigError([ConfigIssue("task", f"must be a string naming the task (got {echo(task)})",
                                       "one of " + ", ".join(TASKS))])
    if task in TASKS:
        return TASKS[task]
    if task in FOREIGN_TASKS:
        raise ConfigError([ConfigIssue("task", f"msprobe task {echo(task)} has no probe-tui equivalent",
                                       FOREIGN_TASKS[task])])
    hint = did_you_mean(task, TASKS) or "one of " + ", ".join(TASKS)
    raise ConfigError([ConfigIssue("task", f"unknown task {echo(task)}", hint)])


def load_config(source: Source, *, on_warning: Optional[WarnFn] = None) -> JobBase:
    """Load and validate a job config: a path, a JSON string, or a dict.

    Accepts the native shape, msprobe's config.json, its separate monitor JSON and its classic compare.json.
    Raises `ConfigError` listing every problem found; msprobe keys we do not use warn once each through
    `on_warning(path, message)` (default: `warnings.warn` with `ConfigWarning`).
    """
    warn = on_warning or default_warn
    raw = read_config_source(source, warn)
    data = normalise_shape(raw, warn)
    model = _job_model(data)
    cleaned, issues = check_job_keys(model, data, warn)
    job: Optional[JobBase] = None
    try:
        job = model.model_validate(cleaned, context={"warn": warn})
    except ValidationError as exc:
        issues.extend(issues_from_validation_error(exc))
    if issues or job is None:
        raise ConfigError(_in_document_order(issues, data))
    if isinstance(source, (str, Path)) and not (isinstance(source, str) and source.lstrip().startswith("{")):
        _SOURCES[id(job)] = (weakref.ref(job), str(Path(source).resolve()))
    return job


# The file each loaded job came from, kept outside the model so that equality and dumps are unaffected.
_SOURCES: Dict[int, Tuple[Any, str]] = {}


def config_source(job: JobBase) -> Optional[str]:
    """The absolute path of the file ``job`` was loaded from (None for a dict or JSON string): the monitor
    watches it so that an edit applies during the run."""
    entry = _SOURCES.get(id(job))
    if entry is None or entry[0]() is not job:
        return None
    return entry[1]


def _in_document_order(issues: List[ConfigIssue], data: Dict[str, Any]) -> List[ConfigIssue]:
    """Sort issues by where their top-level key appears in the file (stable within a key)."""
    order = {key: i for i, key in enumerate(data)}

    def position(issue: ConfigIssue) -> int:
        head = re.split(r"[.\[]", issue.path, maxsplit=1)[0]
        return order.get(head, len(order))
    return sorted(issues, key=position)


def dump_config(job: JobBase) -> Dict[str, Any]:
    """The normalised config as a JSON-ready dict: defaults filled in, rank/step lists sorted and compacted
    ([1, "4-6"]), unset optional keys left out. `load_config(dump_config(job)) == job`."""
    return job.model_dump(mode="json", exclude_none=True)


def starter_config(task: str) -> Dict[str, Any]:
    """A minimal valid config for `probe-tui init TASK`: runs the tiny demo for 3 steps (analysis jobs point
    at the runs the sample configs write)."""
    if task not in TASKS:
        hint = did_you_mean(task, TASKS) or "one of " + ", ".join(TASKS)
        raise ConfigError([ConfigIssue("task", f"unknown task {echo(task)}", hint)])
    if task == "analyze_overflow":
        return {"task": task, "comment": "Needs an earlier overflow_check run: probe-tui --run "
                "sample_configs/overflow_check.json.", "dump_path": "./probe_dump",
                task: {"path": "./probe_dump/overflow/latest"}}
    if task == "diagnose":
        return {"task": task, "comment": "Runs both targets itself (tiny demo: fp32 against a low-precision "
                "softmax); a side may also be an earlier run: {\"path\": \"./probe_dump/demo_fp32/latest\"}.",
                "dump_path": "./probe_dump",
                task: {"target": {"target": {"demo": {"preset": "tiny", "steps": 3,
                                                      "faults": {"lowp_softmax": {"layer": 1}}}}},
                       "golden": {"target": {"demo": {"preset": "tiny", "steps": 3}}}}}
    if task == "acc_check":
        return {"task": task, "comment": "Needs earlier runs: a tensor dump, e.g. probe-tui --run "
                "sample_configs/tensor_lowp.json.", "dump_path": "./probe_dump",
                task: {"path": "./probe_dump/demo_lowp_tensor/latest"}}
    if task in ANALYSIS_TASKS:
        kind = "demo" if task == "compare" else "grad"
        return {
            "task": task,
            "comment": f"Needs two earlier runs: see sample_configs/README.md ({kind}_bf16 vs {kind}_fp32).",
            "dump_path": "./probe_dump",
            task: {"target_path": f"./probe_dump/{kind}_bf16/latest",
                   "golden_path": f"./probe_dump/{kind}_fp32/latest"},
        }
    config: Dict[str, Any] = {"task": task, "dump_path": "./probe_dump",
                              "target": {"demo": {"preset": "tiny", "steps": 3}}}
    if task == "monitor":
        config["monitor"] = {"wg_distribution": True, "ops": ["norm", "min", "max", "nans"]}
    return config
