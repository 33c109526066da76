"""Merge the node-local copies of one launch into one run folder (``probe-tui merge-runs OUT RUN...``).

With a node-local ``dump_path`` every node of a launch writes ``<dump_path>/<run-id>/`` with its own ranks and its
own ``run.json`` (engines/launch.py). ``merge_runs`` checks that the copies are one launch (the same run-id, none
still running), that a rank found in two copies holds the same files there, and writes one new run folder ``OUT``
holding every rank and a ``run.json`` that counts them all (docs/FORMAT.md "Ranks of one launch").

Nothing is half-written: ``OUT`` is claimed (created empty, exclusively), the run is assembled in a hidden
sibling folder and renamed onto the claim in one step; on any failure both are removed. Files are copied (mode
0o640), or hard-linked with ``link=True`` (same file system; a copy where a link cannot be made).
"""

import errno
import filecmp
import os
import secrets
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from engines import safe_fs
from engines.run_ranks import launch_figures
from engines.runs import RUN_JSON, RunError, _now_iso, _ranks, effective_status, open_run, write_json_atomic

_SEVERITY = ("failed", "crashed", "stopped", "unknown", "disk_full", "finished")  # the merged status: the worst


class MergeError(ValueError):
    """Bad input to a merge; the message is one line naming the run or rank at fault."""


class _Source:
    def __init__(self, given: str) -> None:
        self.given = given
        try:
            run = open_run(given)
            self.meta = run.read()
        except RunError as exc:
            raise MergeError(str(exc)) from None
        self.path = run.path
        self.run_id = str(self.meta.get("run_id") or run.path.name)
        self.status = effective_status(self.meta)
        self.ranks = _ranks(run.path)


def _files(folder: Path) -> List[Path]:
    """Every file under a rank folder, relative; a link or anything but files and folders is refused."""
    out: List[Path] = []
    stack = [folder]
    while stack:
        current = stack.pop()
        for entry in sorted(os.scandir(current), key=lambda e: e.name):
            path = Path(entry.path)
            if entry.is_symlink():
                raise MergeError(f"{path}: is a link; merge-runs copies only plain files")
            if entry.is_dir(follow_symlinks=False):
                stack.append(path)
            elif entry.is_file(follow_symlinks=False):
                out.append(path.relative_to(folder))
            else:
                raise MergeError(f"{path}: is not a plain file")
    return sorted(out)


def _same_files(a: Path, b: Path) -> bool:
    files = _files(a)
    if files != _files(b):
        return False
    return all(filecmp.cmp(a / rel, b / rel, shallow=False) for rel in files)


def plan(sources: Sequence[str]) -> Tuple[List[_Source], Dict[int, _Source]]:
    """The sources and, for every rank, the one copy to take. Raises ``MergeError``."""
    if not sources:
        raise MergeError("merge-runs: name at least one run folder to merge")
    runs = [_Source(given) for given in sources]
    first = runs[0]
    for run in runs:
        if run.run_id != first.run_id:
            raise MergeError(f"{run.given}: run-id {run.run_id!r} differs from {first.run_id!r} ({first.given}); "
                             "only the copies of one launch merge")
        if run.status == "running":
            raise MergeError(f"{run.given}: the run is still running; merge it once every node has finished")
        if not run.ranks:
            raise MergeError(f"{run.given}: holds no rank<R> folder")
    taken: Dict[int, _Source] = {}
    for run in runs:
        for rank in run.ranks:
            other = taken.get(rank)
            if other is None:
                taken[rank] = run
            elif other.path.resolve() != run.path.resolve() and \
                    not _same_files(other.path / f"rank{rank}", run.path / f"rank{rank}"):
                raise MergeError(f"rank{rank}: in both {other.given} and {run.given} with different files; "
                                 "a rank merges from one copy only")
    return runs, dict(sorted(taken.items()))


def _copy_file(src: Path, dst: Path, link: bool) -> None:
    if link:
        try:
            os.link(src, dst, follow_symlinks=False)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as fin, os.fdopen(safe_fs.create_fd(dst, what="merged file"), "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)


def _copy_rank(src: Path, dst: Path, link: bool) -> None:
    safe_fs.make_private_dir(dst, exist_ok=False, what="rank folder")
    for rel in _files(src):
        for parent in reversed(list(rel.parents)[:-1]):
            safe_fs.make_private_dir(dst / parent, exist_ok=True, what="folder")
        _copy_file(src / rel, dst / rel, link)


def _merged_meta(runs: List[_Source], taken: Dict[int, _Source], folder: Path) -> Dict[str, Any]:
    base = taken[min(taken)]  # the copy holding the lowest rank (usually node 0's)
    meta = dict(base.meta)
    for key in ("pid", "proc_start"):
        meta.pop(key, None)
    recorded: Dict[str, Any] = {}
    for run in runs:
        per_rank = run.meta.get("per_rank")
        if isinstance(per_rank, dict):
            for key, entry in per_rank.items():
                if str(key).isdigit() and int(key) in taken and taken[int(key)] is run:
                    recorded[str(key)] = entry
    statuses = [run.status for run in runs]
    status = min(statuses, key=lambda s: _SEVERITY.index(s) if s in _SEVERITY else 0)
    codes = [c for c in (run.meta.get("exit_code") for run in runs) if isinstance(c, int)]
    figures = launch_figures(folder, {"status": status, "per_rank": recorded})
    worlds = [w for w in (run.meta.get("world_size") for run in runs) if isinstance(w, int)]
    meta.update(figures)
    meta.update({
        "status": status,
        "exit_code": next((c for c in codes if c != 0), 0),
        "ranks": sorted(taken),
        "world_size": max(worlds) if worlds else len(taken),
        "merged": _now_iso(),
        "merged_from": [{"path": str(run.path), "host": run.meta.get("host"), "status": run.status,
                         "ranks": [r for r, src in taken.items() if src is run]} for run in runs],
    })
    if isinstance(figures["totals"].get("steps"), int):
        meta["steps"] = figures["totals"]["steps"]
    return meta


def merge_runs(out: str, sources: Sequence[str], *, link: bool = False) -> Dict[str, Any]:
    """Write the merged run folder ``out`` (it must not exist; its parent must); returns its ``run.json``."""
    runs, taken = plan(sources)
    target = Path(out)
    if target.exists() or target.is_symlink():
        raise MergeError(f"{out}: already exists; name a new folder for the merged run")
    if not target.parent.is_dir():
        raise MergeError(f"{out}: its parent folder {target.parent} does not exist")
    resolved = target.parent.resolve() / target.name
    for run in runs:
        if resolved == run.path.resolve() or run.path.resolve() in resolved.parents:
            raise MergeError(f"{out}: lies inside {run.given}; write the merged run elsewhere")
    try:
        safe_fs.make_private_dir(target, exist_ok=False, what="merged run folder")  # the claim
    except OSError as exc:
        raise MergeError(f"{out}: cannot create it ({safe_fs.describe_os_error(target, exc)})") from None
    work = target.parent / f".{target.name}.merge-{secrets.token_hex(3)}.tmp"
    try:
        safe_fs.make_private_dir(work, exist_ok=False, what="folder")
        for rank, run in taken.items():
            _copy_rank(run.path / f"rank{rank}", work / f"rank{rank}", link)
        meta = _merged_meta(runs, taken, work)
        write_json_atomic(work / RUN_JSON, meta)
        os.rename(work, target)  # replaces the empty claim in one step
    except BaseException as exc:
        _remove(work)
        _remove_empty(target)
        if isinstance(exc, MergeError):
            raise
        if isinstance(exc, OSError):
            raise MergeError(f"{out}: could not write the merged run ({safe_fs.describe_os_error(target, exc)})") \
                from None
        raise
    return meta


def _remove(folder: Path) -> None:
    if folder.is_dir() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def _remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def describe(meta: Dict[str, Any], out: Optional[str] = None) -> str:
    """One line: what was merged into where."""
    sources = meta.get("merged_from") or []
    return "merged %d rank(s) of run %s from %d folder(s) into %s" % (
        len(meta.get("ranks") or []), meta.get("run_id"), len(sources), out or "")


__all__ = ["MergeError", "describe", "merge_runs", "plan"]
