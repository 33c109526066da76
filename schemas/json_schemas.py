"""JSON Schemas of the job models, exported to `schemas/json/` and committed.

`python -m schemas.export [DIR]` (see `schemas/export.py`) rewrites them (default: the `json` folder beside this file); a test fails when
the committed files drift from the models. Each file validates one task's native config with any JSON Schema
(2020-12) validator; `job.schema.json` is the union of all of them, selected by `task`.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from .jobs import TASKS, job_adapter

__all__ = ["json_schema", "union_json_schema", "export_json_schemas", "schema_text", "DEFAULT_DIR"]

DEFAULT_DIR = Path(__file__).resolve().parent / "json"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _finish(schema: Dict[str, Any], name: str) -> Dict[str, Any]:
    return {"$schema": DIALECT, "$id": f"https://probe-tui.dev/schemas/{name}.schema.json", **schema}


def json_schema(task: str) -> Dict[str, Any]:
    """The JSON Schema of one task's config (the native shape)."""
    if task not in TASKS:
        raise KeyError(f"unknown task {task!r}; one of {', '.join(TASKS)}")
    return _finish(TASKS[task].model_json_schema(), task)


def union_json_schema() -> Dict[str, Any]:
    schema = job_adapter().json_schema()
    schema.setdefault("title", "probe-tui job")
    schema.setdefault("description", "Any probe-tui job config; `task` selects the model.")
    return _finish(schema, "job")


def schema_text(schema: Dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=True) + "\n"


def export_json_schemas(directory: Optional[Path] = None) -> List[Path]:
    """Write `<task>.schema.json` for every task plus `job.schema.json`; returns the paths written."""
    target = Path(directory) if directory is not None else DEFAULT_DIR
    target.mkdir(parents=True, exist_ok=True)
    written = []
    schemas = {task: json_schema(task) for task in TASKS}
    schemas["job"] = union_json_schema()
    for name, schema in schemas.items():
        path = target / f"{name}.schema.json"
        path.write_text(schema_text(schema), encoding="utf-8")
        written.append(path)
    return written

