"""Unknown-key check, run on the raw config before pydantic validates it.

It walks the JSON alongside the model tree and, for every object:
- keeps keys that are fields (descending into nested models, lists and dicts of models);
- drops msprobe's foreign keys (`schemas.foreign`) with one warning each, after checking the value where
  msprobe has a rule for it;
- at the top level, accepts the sections of our other tasks silently (they must be objects) and drops msprobe's
  foreign sections with a warning;
- reports every other key as an error with a did-you-mean, or with a pointer when the key belongs one level up
  or down (`data_mode` at the top level belongs in the task section).
"""

import typing
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type

from pydantic import BaseModel

from .errors import ConfigIssue, WarnFn, did_you_mean, echo, format_path, join_path
from .foreign import FOREIGN_SECTIONS, all_foreign_names, foreign_key

if TYPE_CHECKING:
    from .common import JobBase

__all__ = ["nested_shape", "check_job_keys"]

Shape = Tuple[str, Any]  # ("model", cls) | ("list", Shape) | ("dict", Shape)
COMMENT_KEYS = ("comment", "_comment")

# Keys people put in the wrong place, with where they belong, per (job task, key) at the top level.
_PLACEMENT_HINTS = {
    ("monitor", "rank"): "monitor jobs choose ranks with monitor.module_ranks",
    ("monitor", "step"): "monitor jobs choose steps with monitor.start_step, step_interval and collect_times",
}
# Known wrong names inside an object, per (model name, key).
_NAME_HINTS = {
    ("MonitorSection", "mg_distribution"): "did you mean 'mg_direction'? (msprobe's validator checks the name "
                                           "mg_distribution by mistake; the option is mg_direction)",
}


def nested_shape(annotation: Any) -> Optional[Shape]:
    """How to descend into a field's value to find nested models; None when it holds none."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return nested_shape(typing.get_args(annotation)[0])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation)
    if origin is typing.Union:
        shapes = [s for s in (nested_shape(a) for a in typing.get_args(annotation) if a is not type(None)) if s]
        return shapes[0] if len(shapes) == 1 else None
    if origin in (list, List):
        args = typing.get_args(annotation)
        inner = nested_shape(args[0]) if args else None
        return ("list", inner) if inner else None
    if origin in (dict, Dict):
        args = typing.get_args(annotation)
        inner = nested_shape(args[1]) if len(args) == 2 else None
        return ("dict", inner) if inner else None
    return None


class _Walk:
    def __init__(self, warn: WarnFn):
        self.warn = warn
        self.issues: List[ConfigIssue] = []

    def issue(self, loc: Sequence[Any], message: str, hint: str = "") -> None:
        self.issues.append(ConfigIssue(format_path(loc), message, hint))

    def value(self, shape: Optional[Shape], value: Any, loc: List[Any]) -> Any:
        if shape is None:
            return value
        kind, inner = shape
        if kind == "model" and isinstance(value, dict):
            return self.model(inner, value, loc)
        if kind == "list" and isinstance(value, list):
            return [self.value(inner, item, loc + [i]) for i, item in enumerate(value)]
        if kind == "dict" and isinstance(value, dict):
            return {k: self.value(inner, v, loc + [k]) for k, v in value.items()}
        return value

    def model(self, model: Type[BaseModel], data: Dict[str, Any], loc: List[Any], *, misplaced: Optional[Dict[str, str]] = None,
              top_level: bool = False, task: str = "") -> Dict[str, Any]:
        fields = model.model_fields
        scopes = getattr(model, "foreign_scope", ())
        cleaned: Dict[str, Any] = {}
        for key, value in data.items():
            key_loc = loc + [key]
            if key in fields:
                cleaned[key] = self.value(nested_shape(fields[key].annotation), value, key_loc)
                continue
            if top_level and key in COMMENT_KEYS:
                cleaned[key] = value
                continue
            entry = foreign_key(scopes, key)
            if entry is not None:
                self._foreign(entry, value, key_loc)
                continue
            if top_level and self._sibling_section(key, value, key_loc, task):
                continue
            hint = _PLACEMENT_HINTS.get((task, key)) or _NAME_HINTS.get((model.__name__, key)) \
                or (misplaced or {}).get(key) or did_you_mean(key, list(fields) + all_foreign_names(scopes))
            self.issue(key_loc, "unknown key", hint)
        return cleaned

    def _foreign(self, entry: Any, value: Any, loc: List[Any]) -> None:
        problems = entry.check(value) if entry.check else []
        for rel, message, hint in problems:
            self.issues.append(ConfigIssue(join_path(format_path(loc), format_path([rel]) if rel else ""),
                                           message, hint))
        if not problems:
            self.warn(format_path(loc), f"msprobe option not used by probe-tui: {entry.note}; ignored")

    def _sibling_section(self, key: str, value: Any, loc: List[Any], task: str) -> bool:
        from .jobs import TASKS  # late import: jobs imports the models, which import nothing from here

        if key in TASKS and key != task:
            if not isinstance(value, dict):
                self.issue(loc, f"must be an object (the options of task {key}) (got {echo(value)})")
            return True
        if key in FOREIGN_SECTIONS:
            if not isinstance(value, dict):
                self.issue(loc, f"must be an object (got {echo(value)})")
            else:
                self.warn(format_path(loc), f"msprobe section not used by probe-tui: {FOREIGN_SECTIONS[key]}; "
                                            "ignored")
            return True
        return False


def check_job_keys(job_model: "Type[JobBase]", data: Dict[str, Any], warn: WarnFn) -> Tuple[Dict[str, Any], List[ConfigIssue]]:
    """Check a whole job config (top level plus its section, with placement hints between the two)."""
    walk = _Walk(warn)
    task = job_model.task_name()
    section_model = _section_model(job_model, task)
    top_keys = set(job_model.model_fields)
    section_keys = set(section_model.model_fields) if section_model else set()

    up = {k: f"'{k}' is a top-level key, not part of the '{task}' section" for k in top_keys}
    down = {k: f"'{k}' belongs in the '{task}' section: {{\"{task}\": {{\"{k}\": ...}}}}" for k in section_keys}
    down.update(_other_task_options(task, top_keys | section_keys))

    data = dict(data)
    section_data = data.get(task)
    cleaned = walk.model(job_model, {k: v for k, v in data.items() if k != task}, [], misplaced=down,
                         top_level=True, task=task)
    if task in data:
        if isinstance(section_data, dict) and section_model is not None:
            other = _other_task_options(task, section_keys)
            cleaned[task] = walk.model(section_model, section_data, [task], misplaced={**other, **up})
        else:
            cleaned[task] = section_data
    return cleaned, walk.issues


def _section_model(job_model: "Type[JobBase]", task: str) -> Optional[Type[BaseModel]]:
    """The model of the job's section named ``task`` (None: the job has no such section)."""
    info = job_model.model_fields.get(task)
    model = info.annotation if info is not None else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _other_task_options(task: str, own: set) -> Dict[str, str]:
    """Hints for keys that are options of another task: "tensor_list is an option of task statistics"."""
    from .jobs import TASKS

    hints: Dict[str, str] = {}
    for other, model in TASKS.items():
        if other == task:
            continue
        section = _section_model(model, other)
        if section is None:
            continue
        for key in section.model_fields:
            if key not in own and key not in hints:
                hints[key] = f"'{key}' is an option of task {other}, not {task}"
    return hints
