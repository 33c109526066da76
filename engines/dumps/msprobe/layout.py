"""Find msprobe dump files: a dump.json, a rank dir, a step dir (``rank*`` inside) or a dump_path (``step*``).

msprobe names rank dirs ``rank<R>``, ``rank`` (not distributed) or, in 26.2, ``proc<pid>``; step dirs
``step<N>``. Ranks are identified by id, never by position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

RANK_DIR = re.compile(r"^rank(\d*)$")
PROC_DIR = re.compile(r"^proc(\d+)$")
STEP_DIR = re.compile(r"^step(\d+)$")
DUMP_FILES = ("dump.json", "debug.json")


@dataclass(frozen=True)
class MsprobeFile:
    """One dump.json (or debug.json) with its step and rank."""

    path: Path
    step: int
    rank: int

    @property
    def folder(self) -> Path:
        return self.path.parent


def is_msprobe_path(path: Path) -> bool:
    """Does ``path`` hold msprobe dumps (at any of the accepted levels)?"""
    try:
        return bool(find_dump_files(path))
    except ValueError:
        return False


def _rank_of(name: str) -> Optional[int]:
    m = RANK_DIR.match(name)
    if m:
        return int(m.group(1)) if m.group(1) else 0
    if PROC_DIR.match(name):
        return 0
    return None


def _step_of(name: str) -> Optional[int]:
    m = STEP_DIR.match(name)
    return int(m.group(1)) if m else None


def _dump_in(folder: Path) -> Optional[Path]:
    for fname in DUMP_FILES:
        if (folder / fname).is_file():
            return folder / fname
    return None


def _ranks_in(step_dir: Path, step: int) -> List[MsprobeFile]:
    found = []
    procs = []
    for child in sorted(step_dir.iterdir()):
        if not child.is_dir():
            continue
        dump = _dump_in(child)
        if dump is None:
            continue
        if PROC_DIR.match(child.name):
            procs.append(MsprobeFile(dump, step, 0))
            continue
        rank = _rank_of(child.name)
        if rank is not None:
            found.append(MsprobeFile(dump, step, rank))
    if procs:
        if len(procs) > 1 or found:
            raise ValueError("{}: several proc<pid> folders; rename them rank<R> to say which rank each is"
                             .format(step_dir))
        found.extend(procs)
    ranks = [f.rank for f in found]
    if len(set(ranks)) != len(ranks):
        raise ValueError("{}: two folders for the same rank".format(step_dir))
    return found


def find_dump_files(path: Path) -> List[MsprobeFile]:
    """Every dump file under ``path``, sorted by (step, rank). Empty when ``path`` is no msprobe dump."""
    path = Path(path)
    if path.is_file():
        if path.name not in DUMP_FILES and not path.name.endswith(".json"):
            return []
        rank = _rank_of(path.parent.name)
        step = _step_of(path.parent.parent.name) if rank is not None else None
        return [MsprobeFile(path, step or 0, rank or 0)]
    if not path.is_dir():
        return []
    direct = _dump_in(path)
    if direct is not None:
        rank = _rank_of(path.name)
        step = _step_of(path.parent.name) if rank is not None else None
        return [MsprobeFile(direct, step or 0, rank or 0)]
    step = _step_of(path.name)
    files = _ranks_in(path, step or 0)
    if files:
        return files
    for child in sorted(path.iterdir()):
        s = _step_of(child.name)
        if s is not None and child.is_dir():
            files.extend(_ranks_in(child, s))
    return sorted(files, key=lambda f: (f.step, f.rank))
