"""stack.json and construct.json next to a dump.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

from engines.dumps.source import DumpSourceError


def read_json(path: Path, what: str) -> Any:
    try:
        with open(path, "rb") as fh:
            return json.load(fh)
    except OSError as exc:
        raise DumpSourceError("{}: cannot read {} ({})".format(path, what, exc.strerror or exc)) from None
    except ValueError as exc:  # UnicodeDecodeError included: not UTF-8 text
        raise DumpSourceError("{}: not valid JSON ({})".format(path, exc)) from None
    except RecursionError:
        raise DumpSourceError("{}: not a {} (JSON nested deeper than Python can read)".format(path, what)) from None


def read_stacks(folder: Path) -> Dict[str, str]:
    """record -> call-stack text. Accepts the old ``{api: [lines]}`` and the new ``{"0": [[apis], stack]}``."""
    path = Path(folder) / "stack.json"
    if not path.is_file():
        return {}
    raw = read_json(path, "stack.json")
    if not isinstance(raw, dict):
        return {}
    out: Dict[str, str] = {}
    if "0" in raw:
        for entry in raw.values():
            if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list):
                text = _stack_text(entry[1])
                for name in entry[0]:
                    out[str(name)] = text
        return out
    for name, lines in raw.items():
        out[name] = _stack_text(lines)
    return out


def _stack_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


def read_construct(folder: Path) -> Dict[str, Optional[str]]:
    """record -> enclosing module record (None at the top)."""
    path = Path(folder) / "construct.json"
    if not path.is_file():
        return {}
    raw = read_json(path, "construct.json")
    if not isinstance(raw, dict):
        return {}
    out: Dict[str, Optional[str]] = {}
    for node, parent in raw.items():
        if isinstance(parent, list):
            parent = parent[0] if parent else None
        out[node] = parent if isinstance(parent, str) else None
    return out
