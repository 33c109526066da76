"""Which call-stack frames are probe-tui's own (docs/decisions/0027-stacks-record-user-frames.md).

Capture drops them when it records a stack (`engines/capture/stacks.py`); readers drop them again from dumps
written before it did (their stacks kept the outer frames of the CLI, the runner and the target loader), so the
compare's stack column shows the user's frames only.

A frame is the tool's when its file is a module of the `probe_tui` or `engines` package — this installation's,
or one with the same relative path (a dump made on another machine) — except the demo models and data, which
stand for user code; the `probe-tui` console script; or the standard library's `runpy` (how `python -m` and
scripts are started).
"""

import os
import re
from typing import FrozenSet, Iterable, List, Optional, Set

__all__ = ["is_tool_path", "user_frames", "frame_path"]

_ENGINES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_ROOT = os.path.dirname(_ENGINES)
_FRAME = re.compile(r"^File (.*?), line \d+, in ")
_OWN_PACKAGES = ("engines", "probe_tui")
_known: Optional[FrozenSet[str]] = None


def _demo(rel: str) -> bool:
    parts = rel.split("/")
    return parts[:2] == ["engines", "demo"] or (
        parts[:2] == ["engines", "adapters"] and parts[-1].startswith("demo"))


def _own_modules() -> FrozenSet[str]:
    """Relative paths (``engines/runner.py``) of this installation's modules, demo code left out."""
    global _known
    if _known is None:
        found: Set[str] = set()
        for package in _OWN_PACKAGES:
            for folder, _, files in os.walk(os.path.join(_ROOT, package)):
                rel_dir = os.path.relpath(folder, _ROOT).replace(os.sep, "/")
                found.update(rel_dir + "/" + f for f in files if f.endswith(".py"))
        _known = frozenset(rel for rel in found if not _demo(rel))
    return _known


def is_tool_path(path: str) -> bool:
    """True for a file of probe-tui itself (any installation) or of ``runpy``."""
    norm = path.replace("\\", "/")
    if norm.endswith("/runpy.py") or norm in ("runpy.py", "<frozen runpy>") or norm.rsplit("/", 1)[-1] == "probe-tui":
        return True
    own = _own_modules()
    parts = norm.split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _OWN_PACKAGES and "/".join(parts[i:]) in own:
            return True
    return False


def frame_path(frame: str) -> str:
    """The file of one formatted frame (``File <path>, line <n>, in <function>,...``); "" when not one."""
    match = _FRAME.match(frame.lstrip())
    return match.group(1) if match else ""


def user_frames(frames: Iterable[str]) -> List[str]:
    """The frames (formatted as capture writes them) whose file is not the tool's."""
    return [f for f in frames if not is_tool_path(frame_path(f))]
