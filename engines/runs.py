"""Run folders (docs/decisions/0002-run-folders.md): ``<dump_path>/<run-id>/`` with ``run.json``, ``rank<R>/`` and a ``latest`` pointer.

A run is never written into an existing folder, except by the ranks of one launch (torchrun, Slurm, or any
launcher that sets ``PROBE_TUI_RUN_ID``), which share one run-id (``engines.launch.shared_run_id``): the first
rank to arrive creates ``run.json`` (and owns it: it alone updates and finishes it and moves ``latest``); the
others join while that run is still ``running``.

``run.json`` is always replaced atomically (temporary file + ``os.replace``), so a reader never sees half of
it, and a run whose process died while ``running`` is reported as ``crashed``.

Files and folders are made through ``engines.safe_fs`` (exact modes, no writing through links): ``dump_path``
may be or contain a link (the user's choice); the run folder, ``rank<R>/`` and ``latest`` below it are ours, and
a link or another user's folder found there is refused (docs/SECURITY.md).
"""

import errno
import json
import os
import re
import secrets
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Union

from engines import safe_fs

SCHEMA_VERSION = 1
RUN_JSON = "run.json"
LATEST = "latest"
RUN_ID_ENV = "PROBE_TUI_RUN_ID"
_ANALYSIS_TASKS = ("compare", "grad_compare", "diagnose")  # schemas.ANALYSIS_TASKS (runs.py imports nothing from schemas)
_RUN_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_RANK_DIR = re.compile(r"^rank(\d+)$")

PathLike = Union[str, "os.PathLike[str]"]


class RunError(ValueError):
    """A bad run path or run-id; the message is one line naming it."""


def new_run_id(now: Optional[datetime] = None) -> str:
    """``YYYYmmdd-HHMMSS-<6 hex>`` in local time."""
    return f"{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _now_iso() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _process_start(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (Linux), to tell a live pid from a reused one."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode(errors="replace")
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _pid_alive(pid: int, started_ticks: Optional[int]) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by someone else
    except OSError:
        return False
    if started_ticks is not None:
        now_ticks = _process_start(pid)
        if now_ticks is not None and now_ticks != started_ticks:
            return False  # the pid was reused by another process
    return True


def _write_tmp(path: Path, data: Dict[str, Any]) -> Path:
    """Write ``data`` to a hidden temporary file beside ``path``; the caller renames or links it into place."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}.tmp")
    try:
        with safe_fs.create_file(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, default=str)
            f.write("\n")
    except BaseException:  # a full disk: leave no half-written temporary file behind
        if tmp.exists() and not tmp.is_symlink():
            tmp.unlink()
        raise
    return tmp


def write_json_atomic(path: Path, data: Dict[str, Any]) -> None:
    """Replace ``path`` in one step: readers see the old or the new file, never half of one. On a full disk,
    where no new file can be made, ``path`` is rewritten in its own space when the new text fits there."""
    try:
        tmp = _write_tmp(path, data)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not _rewrite_in_place(path, data):
            raise
        return
    os.replace(tmp, path)


def _rewrite_in_place(path: Path, data: Dict[str, Any]) -> bool:
    """Compact JSON (without the summary when that is what does not fit) over ``path``'s own blocks."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):  # never write through a planted link (docs/SECURITY.md)
        return False
    room = max(st.st_size, st.st_blocks * 512)
    for candidate in (data, dict(data, summary={"note": "left out: the disk was full"})):
        text = (json.dumps(candidate, separators=(",", ":"), default=str) + "\n").encode("utf-8")
        if len(text) <= room:
            try:
                with os.fdopen(os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0)), "r+b") as f:
                    f.write(text)
                    f.truncate()
            except OSError:
                return False
            return True
    return False


def _read_json(path: Path) -> Dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise RunError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: unreadable run.json ({exc})") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: run.json does not hold a JSON object")
    return data


def point_latest(dump_path: Path, run_id: str) -> None:
    """Make ``<dump_path>/latest`` name ``run_id``: a relative symlink, or a text file where symlinks fail."""
    latest = dump_path / LATEST
    tmp = dump_path / f".{LATEST}.{os.getpid()}.{secrets.token_hex(3)}.tmp"
    try:
        os.symlink(run_id, tmp)
    except (OSError, NotImplementedError):
        with safe_fs.create_file(tmp, "w", encoding="utf-8") as f:
            f.write(run_id + "\n")
    os.replace(tmp, latest)  # replaces a planted link or file named latest; never writes through it


def resolve_latest(dump_path: PathLike) -> Optional[Path]:
    """The run folder ``<dump_path>/latest`` names (symlink or text file), or None if there is no pointer."""
    latest = Path(dump_path) / LATEST
    if latest.is_symlink():
        target = Path(os.readlink(latest))
        return target if target.is_absolute() else latest.parent / target
    if latest.is_file():
        name = latest.read_text(encoding="utf-8").strip()
        return latest.parent / name if name else None
    return None


@dataclass
class Run:
    """One run folder. ``owner`` is True in the process that created ``run.json``; ``joined`` in the other ranks of
    the same launch, for which ``update`` and ``finish`` do nothing (``run.json`` has one writer)."""

    path: Path
    run_id: str
    owner: bool = False
    joined: bool = False
    made_ranks: Set[int] = field(default_factory=set)  # the rank folders this process asked for (it writes them)

    @property
    def dump_path(self) -> Path:
        return self.path.parent

    @property
    def json_path(self) -> Path:
        return self.path / RUN_JSON

    def read(self) -> Dict[str, Any]:
        return _read_json(self.json_path)

    @property
    def status(self) -> str:
        """The recorded status, or ``crashed`` where the process died while ``running``."""
        return effective_status(self.read())

    def rank_dir(self, rank: int) -> Path:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise RunError(f"rank: expected an integer >= 0, got {rank!r}")
        path = self.path / f"rank{rank}"
        try:
            safe_fs.make_private_dir(path, exist_ok=True, what="rank folder")
        except OSError as exc:
            raise RunError(safe_fs.describe_os_error(path, exc)) from None
        self.made_ranks.add(rank)
        return path

    def ranks(self) -> List[int]:
        return _ranks(self.path)

    def update(self, **fields: Any) -> Dict[str, Any]:
        """Read-modify-write ``run.json`` atomically. Only the owner should call it (one writer per run); in a rank
        that joined another's run it only reads."""
        data = self.read()
        if self.joined:
            return data
        data.update(fields)
        write_json_atomic(self.json_path, data)
        return data

    def finish(self, status: str, exit_code: int, summary: Optional[Dict[str, Any]] = None,
               **extra: Any) -> Dict[str, Any]:
        """The end of the run, in one write; ``extra`` adds fields (a launch's ``per_rank``, ``totals``...)."""
        data = self.read()
        if self.joined:
            return data
        fields: Dict[str, Any] = {
            "status": status,
            "exit_code": int(exit_code),
            "summary": summary or {},
            "finished": _now_iso(),
            "ranks": self.ranks(),
        }
        started = data.get("started_unix")
        if isinstance(started, (int, float)):
            fields["duration_s"] = round(time.time() - started, 3)
        if "steps" not in data and isinstance(fields["summary"].get("steps"), int):
            fields["steps"] = fields["summary"]["steps"]
        fields.update(extra)
        return self.update(**fields)


def _ranks(path: Path) -> List[int]:
    try:
        entries = list(os.scandir(path))
    except OSError:
        return []
    ranks = [int(m.group(1)) for e in entries if e.is_dir() and (m := _RANK_DIR.match(e.name))]
    return sorted(ranks)


def _initial_meta(run_id: str, task: str, framework: str, config: Dict[str, Any]) -> Dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "task": task,
        "framework": framework,
        "config": config,
        "status": "running",
        "started": _now_iso(),
        "started_unix": round(time.time(), 3),
        "pid": os.getpid(),
        "proc_start": _process_start(os.getpid()),
        "host": socket.gethostname(),
        "argv": list(sys.argv),
    }


def _create_exclusive_json(path: Path, data: Dict[str, Any]) -> bool:
    """Write ``path`` atomically unless it already exists; False if another process made it first."""
    tmp = _write_tmp(path, data)
    try:
        os.link(tmp, path)  # atomic, and fails if path exists
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links on this file system: fall back to an existence check
        if path.exists():
            return False
        os.replace(tmp, path)
        return True
    finally:
        if tmp.exists():
            tmp.unlink()


def _mkdir_dump_path(dump_path: Path) -> None:
    """Create ``dump_path`` (links in it followed: a user's scratch link is fine); every failure is one line."""
    try:
        is_file = dump_path.exists() and not dump_path.is_dir()
        if not is_file:
            safe_fs.make_dirs(dump_path)
    except (OSError, ValueError) as exc:
        raise RunError(f"dump_path: cannot create {safe_fs.describe_os_error(dump_path, exc)}") from None
    if is_file:
        raise RunError(f"{dump_path}: dump_path is a file, not a folder")
    latest = dump_path / LATEST
    if latest.is_dir() and not latest.is_symlink():
        raise RunError(f"{latest}: is a folder; probe-tui keeps its 'latest' pointer there")


def create_run(
    dump_path: PathLike,
    *,
    task: str,
    config: Dict[str, Any],
    framework: str,
    run_id: Optional[str] = None,
) -> Run:
    """Create ``<dump_path>/<run-id>/`` with ``run.json`` (status ``running``) and point ``latest`` at it.

    The run-id is ``run_id``, else the one the ranks of this launch share (``$PROBE_TUI_RUN_ID``, torchrun's
    store, Slurm's job step: ``engines.launch``), else a fresh ``YYYYmmdd-HHMMSS-<6 hex>``.
    """
    try:
        dump_path = Path(dump_path)
    except (TypeError, ValueError) as exc:
        raise RunError(f"dump_path: {exc}") from None
    _mkdir_dump_path(dump_path)
    try:
        return _create_run(dump_path, task, config, framework, run_id)
    except (OSError, ValueError) as exc:
        if isinstance(exc, RunError):
            raise
        raise RunError(f"dump_path: cannot create the run folder: {safe_fs.describe_os_error(dump_path, exc)}") \
            from None


def _create_run(dump_path: Path, task: str, config: Dict[str, Any], framework: str, run_id: Optional[str]) -> Run:
    source = "run_id"
    shared = run_id or None
    if shared is None and task not in _ANALYSIS_TASKS:  # a comparison is one process's result
        from engines.launch import shared_run_id

        shared, source = shared_run_id(new_run_id)
    if shared is None:
        for _ in range(100):
            candidate = new_run_id()
            try:
                safe_fs.make_private_dir(dump_path / candidate, exist_ok=False)
            except FileExistsError:
                continue
            return _start(dump_path, candidate, task, config, framework)
        raise RunError(f"{dump_path}: could not pick an unused run-id")
    if not _RUN_ID_OK.match(shared) or shared == LATEST:
        raise RunError(f"{source}: {shared!r} is not a valid run-id (letters, digits, '.', '_', '-')")
    path = dump_path / shared
    safe_fs.make_private_dir(path, exist_ok=True, what="run folder")  # ranks of one launch join it
    meta = _initial_meta(shared, task, framework, config)
    if _create_exclusive_json(path / RUN_JSON, meta):
        point_latest(dump_path, shared)
        return Run(path=path, run_id=shared, owner=True)
    existing = _read_json(path / RUN_JSON)
    if existing.get("status") != "running":
        raise RunError(f"{path}: already holds a {existing.get('status')} run; use a new run-id ({source})")
    return Run(path=path, run_id=shared, owner=False, joined=True)  # another rank of the launch created it


def _start(dump_path: Path, run_id: str, task: str, config: Dict[str, Any], framework: str) -> Run:
    path = dump_path / run_id
    write_json_atomic(path / RUN_JSON, _initial_meta(run_id, task, framework, config))
    point_latest(dump_path, run_id)
    return Run(path=path, run_id=run_id, owner=True)


def open_run(path: PathLike) -> Run:
    """A run from its folder, a ``latest`` pointer, or a dump_path (meaning its latest run)."""
    given = Path(path)
    if not given.exists() and not given.is_symlink():
        raise RunError(f"{given}: no such file or folder")
    target = given
    if given.name == LATEST and (given.is_symlink() or given.is_file()):
        target = resolve_latest(given.parent) or given
    elif given.is_dir() and not (given / RUN_JSON).exists():
        latest = resolve_latest(given)
        if latest is None:
            raise RunError(f"{given}: not a run folder (no run.json) and no 'latest' pointer in it")
        target = latest
    if not (target / RUN_JSON).is_file():
        raise RunError(f"{target}: not a run folder (no run.json)")
    meta = _read_json(target / RUN_JSON)
    return Run(path=target, run_id=str(meta.get("run_id") or target.name), owner=False)


def effective_status(meta: Dict[str, Any]) -> str:
    status = str(meta.get("status", "unknown"))
    if status != "running":
        return status
    pid, host = meta.get("pid"), meta.get("host")
    if isinstance(pid, int) and host == socket.gethostname() and not _pid_alive(pid, meta.get("proc_start")):
        return "crashed"
    return status
