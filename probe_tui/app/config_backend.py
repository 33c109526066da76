"""What the app needs from the config schemas, in one place.

:class:`SchemaBackend` is the real one (``schemas.load_config`` and friends): the form's live validation gives the
same messages as ``probe-tui validate``. The builder takes any object with the same methods, which lets the form
builder be exercised on other pydantic models too.
"""

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple


@dataclass
class Issue:
    """One validation problem, placed at ``path`` (``statistics.list[1]``; ``""`` for the whole config)."""

    path: str
    message: str
    hint: str = ""

    @property
    def text(self) -> str:
        return self.message + (f" ({self.hint})" if self.hint else "")

    def line(self) -> str:
        """The line ``probe-tui validate`` prints for it."""
        return f"{self.path or '<config>'}: {self.text}"


@dataclass
class Validation:
    """The outcome of validating the form's data."""

    job: Any = None
    issues: List[Issue] = field(default_factory=list)
    warnings: List[Issue] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.job is not None and not self.issues


@dataclass
class LoadedConfig:
    """A config file read for the builder: the data to fill the form with, and what was wrong with it."""

    path: Path
    data: Dict[str, Any]
    validation: Validation


class SchemaBackend:
    """The project's config schemas (``schemas``)."""

    def tasks(self) -> Dict[str, type]:
        import schemas

        return dict(schemas.TASKS)

    def task_doc(self, task: str) -> str:
        model = self.tasks()[task]
        doc = (model.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def starter(self, task: str) -> Dict[str, Any]:
        import schemas

        return dict(schemas.starter_config(task))

    def validate(self, data: Dict[str, Any]) -> Validation:
        import schemas

        warnings: List[Issue] = []
        try:
            job = schemas.load_config(json.loads(json.dumps(data)),
                                      on_warning=lambda path, msg: warnings.append(Issue(str(path), str(msg))))
        except schemas.ConfigError as exc:
            return Validation(None, [Issue(i.path, i.message, i.hint or "") for i in exc.errors], warnings)
        return Validation(job, [], warnings)

    def normalise(self, job: Any) -> Dict[str, Any]:
        import schemas

        return schemas.dump_config(job)

    def run_problem(self, job: Any) -> Optional[str]:
        """Why a valid job cannot be run with ``probe-tui --run`` (None when it can)."""
        import schemas

        if job.task in schemas.COLLECTION_TASKS and getattr(job, "target", None) is None:
            return ("target: a run needs a target: switch 'target' on and then 'demo' for the built-in demo model, "
                    "or give a script or a callable")
        return None

    def read_file(self, path: Path) -> LoadedConfig:
        """Read a config file (ours or msprobe's). A file that fails validation still fills the form when it is
        a JSON object; one that is not raises ``ValueError`` with a one-line message naming it."""
        import schemas

        warnings: List[Issue] = []
        try:
            job = schemas.load_config(path, on_warning=lambda p, m: warnings.append(Issue(str(p), str(m))))
        except schemas.ConfigError as exc:
            issues = [Issue(i.path, i.message, i.hint or "") for i in exc.errors]
            data = _read_json_object(path)
            return LoadedConfig(path, data, Validation(None, issues, warnings))
        return LoadedConfig(path, self.normalise(job), Validation(job, [], warnings))


def _read_json_object(path: Path) -> Dict[str, Any]:
    """The raw JSON object of a config that failed validation, read with the loader's limits (a FIFO, a device,
    an oversized or too deeply nested file is a ValueError, never a hang or a RecursionError)."""
    from schemas import ConfigError
    from schemas.source import parse_config_json, read_config_text

    try:
        data = parse_config_json(read_config_text(path), str(path), lambda *a: None)
    except ConfigError as exc:
        raise ValueError(str(exc.errors[0]) if exc.errors else f"{path}: cannot read") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a config is a JSON object, this file holds a {type(data).__name__}")
    return data


def sample_configs() -> List[Tuple[str, Path]]:
    """The sample configs shipped as package data: ``(file name, path)``, sorted by name."""
    try:
        folder = resources.files("sample_configs")
    except ModuleNotFoundError:
        return []
    out = []
    for entry in folder.iterdir():
        if entry.name.endswith(".json"):
            out.append((entry.name, Path(str(entry))))
    return sorted(out)


def sample_comment(path: Path) -> str:
    """A sample's ``comment`` (what it runs and what it is for), or ""."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    comment = data.get("comment") or data.get("_comment") if isinstance(data, dict) else ""
    return str(comment or "")


def task_of(data: Dict[str, Any], tasks: Dict[str, type]) -> Optional[str]:
    """The task a config dict is for: its ``task`` key, else the one task section it holds."""
    task = data.get("task")
    if isinstance(task, str) and task in tasks:
        return task
    sections = [t for t in tasks if isinstance(data.get(t), dict)]
    return sections[0] if len(sections) == 1 else None


def write_json_atomic(path: Path, data: Dict[str, Any]) -> None:
    """Write ``data`` as indented JSON; a crash leaves the old file or the new one, never half of one."""
    path = Path(path)
    from engines import safe_fs

    safe_fs.make_dirs(path.parent)
    safe_fs.write_atomic(path, json.dumps(data, indent=2) + "\n")
