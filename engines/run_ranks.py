"""The ranks of one launch in one run folder: each rank's ``rank<R>/rank.json`` and the launch's totals.

A process only knows its own figures, so every rank that writes a rank folder also writes ``rank.json`` there
(``running`` when it joins, its status and figures when it ends, atomically). The owner of ``run.json`` waits a
bounded time for the other rank folders to leave ``running`` and totals them into ``run.json`` (``per_rank``,
``totals``, ``world_size``); a rank that never finishes is recorded as ``unknown`` (``crashed`` when its process
is known to be gone), never waited on for ever. Readers recompute the same figures from the rank folders
(``launch_figures``), so a rank that finished after the owner wrote ``run.json`` is counted too.
The shape is in docs/FORMAT.md ("Ranks of one launch").
"""

import logging
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Set

from engines import safe_fs
from engines.runs import (
    RunError,
    _now_iso,
    _process_start,
    _ranks,
    _read_json,
    effective_status,
    write_json_atomic,
)

log = logging.getLogger("engines.runs")

RANK_JSON = "rank.json"
WAIT_ENV = "PROBE_TUI_RANK_WAIT_S"
DEFAULT_WAIT_S = 60.0
FIGURES = ("records", "tensor_rows", "bytes", "steps")
DONE = ("finished", "disk_full")  # a rank that ran to its end
_SUMMED = ("records", "tensor_rows", "bytes")
_PRIVATE = ("rank", "pid", "proc_start", "started", "finished")  # kept in rank.json, not copied to run.json


_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK_ID")
_LOCAL_VARS = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")


def _env_rank(names: Iterable[str]) -> Optional[int]:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def launch_position() -> "tuple[Optional[int], Optional[int], int]":
    """(global rank, local rank, world size) as the launcher (torchrun, Slurm, Open MPI, msrun) set them; a rank
    None where no variable says it in a launch of several processes (rank 0 for a single process)."""
    from engines.launch import world_size

    world = max(world_size(), _env_rank(("RANK_SIZE",)) or 1, 1)
    rank = _env_rank(_RANK_VARS)
    if rank is None and world <= 1:
        rank = 0
    return rank, _env_rank(_LOCAL_VARS), world


def wait_seconds() -> float:
    """``PROBE_TUI_RANK_WAIT_S`` (seconds >= 0), else the default; a bad value is the default, with a warning."""
    raw = os.environ.get(WAIT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_WAIT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        log.warning("probe-tui: %s=%r is not a number of seconds >= 0; waiting %gs for the other ranks",
                    WAIT_ENV, raw, DEFAULT_WAIT_S)
        return DEFAULT_WAIT_S
    return value


def figures_from(summary: Dict[str, Any], steps: Optional[int] = None) -> Dict[str, Optional[int]]:
    """A rank's figures from its engine's summary (``records``, ``tensor_rows``, ``size_bytes``) and the steps it
    ran (the step events the runner counted; else the summary's ``steps_written``); None where not counted."""
    def _int(value: Any) -> Optional[int]:
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    found = summary.get("capture")
    capture: Dict[str, Any] = found if isinstance(found, dict) else {}
    written = _int(summary.get("steps_written"))
    return {
        "records": _int(summary.get("records")),
        "tensor_rows": _int(summary.get("tensor_rows")),
        "bytes": _int(summary.get("size_bytes")) if _int(summary.get("size_bytes")) is not None
        else _int(capture.get("bytes")),
        "steps": steps if steps else written,
    }


def _rank_path(run_path: Path, rank: int) -> Path:
    return Path(run_path) / ("rank%d" % rank) / RANK_JSON


def _write(run: Any, rank: int, data: Dict[str, Any]) -> None:
    """Write ``rank<R>/rank.json``; a failure (a full disk) is logged: the rank's own stores stand."""
    try:
        folder = run.rank_dir(rank)
        write_json_atomic(folder / RANK_JSON, data)
    except RunError as exc:  # the rank folder itself is refused (a planted link): its store's opening says so once
        log.debug("probe-tui: %s: %s not written (%s)", run.path, RANK_JSON, exc)
    except (OSError, ValueError) as exc:
        log.warning("probe-tui: %s: could not write rank %d's %s (%s)", run.path, rank, RANK_JSON,
                    safe_fs.describe_os_error(run.path, exc) if isinstance(exc, OSError) else exc)


def register(run: Any, rank: int) -> Dict[str, Any]:
    """Say that this process writes ``rank`` of the run and is running (so the owner knows to wait for it)."""
    data: Dict[str, Any] = {"rank": rank, "status": "running", "host": socket.gethostname(), "pid": os.getpid(),
                            "proc_start": _process_start(os.getpid()), "started": _now_iso()}
    _write(run, rank, data)
    return data


def finish_rank(run: Any, rank: int, status: str, exit_code: int, figures: Dict[str, Optional[int]]) -> None:
    """This process's rank ended: its status, exit code and figures, replacing the ``running`` line."""
    try:
        data = _read_json(_rank_path(run.path, rank))
    except RunError:
        data = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(),
                "proc_start": _process_start(os.getpid())}
    data.update({"status": status, "exit_code": int(exit_code), "finished": _now_iso()})
    data.update({k: figures.get(k) for k in FIGURES})
    _write(run, rank, data)


def read_rank(run_path: Path, rank: int) -> Optional[Dict[str, Any]]:
    """A rank folder's ``rank.json`` with its effective status (``crashed``: running, but its process is gone);
    None when there is none or it cannot be read."""
    try:
        data = _read_json(_rank_path(run_path, rank))
    except RunError:
        return None
    data["status"] = effective_status(data)
    return data


def _entry(data: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    if data is None:
        return dict({"status": "unknown"}, **{k: None for k in FIGURES})
    entry = {k: v for k, v in data.items() if k not in _PRIVATE}
    for key in FIGURES:
        value = entry.get(key)
        entry[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    entry["status"] = str(entry.get("status", "unknown"))
    return entry


def totals(per_rank: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Launch totals: records, tensor rows and bytes summed; steps the most any rank wrote (docs/FORMAT.md)."""
    out: Dict[str, Any] = {"ranks": len(per_rank),
                           "finished": sum(1 for e in per_rank.values() if e.get("status") in DONE)}
    for key in _SUMMED:
        values = [e[key] for e in per_rank.values() if isinstance(e.get(key), int)]
        out[key] = sum(values) if values else None
    steps = [e["steps"] for e in per_rank.values() if isinstance(e.get("steps"), int)]
    out["steps"] = max(steps) if steps else None
    return out


def launch_figures(run_path: Path, meta: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``{"per_rank", "totals"}`` recomputed from the rank folders (``rank.json``), ``run.json``'s ``per_rank``
    (``meta``) filling in ranks whose folder has none. A rank still ``running`` in a run that is not is
    ``unknown``."""
    recorded = (meta or {}).get("per_rank")
    recorded = recorded if isinstance(recorded, dict) else {}
    run_running = (meta or {}).get("status", "running") == "running"
    per_rank: Dict[str, Dict[str, Any]] = {}
    ranks = set(_ranks(Path(run_path))) | {int(k) for k in recorded if str(k).isdigit()}
    for rank in sorted(ranks):
        data = read_rank(Path(run_path), rank)
        if data is None and isinstance(recorded.get(str(rank)), dict):
            entry = _entry(dict(recorded[str(rank)]))
        else:
            entry = _entry(data)
            if entry["status"] == "running" and not run_running:
                entry["status"] = "unknown"
        per_rank[str(rank)] = entry
    return {"per_rank": per_rank, "totals": totals(per_rank)}


def _pending(run_path: Path, settled: Set[int]) -> List[int]:
    """Rank folders whose ``rank.json`` is missing or still ``running``; ranks found ended join ``settled`` (so
    each poll reads only what is still open: one small read per open rank)."""
    pending = []
    for rank in _ranks(Path(run_path)):
        if rank in settled:
            continue
        data = read_rank(Path(run_path), rank)
        if data is None or data.get("status") == "running":
            pending.append(rank)
        else:
            settled.add(rank)
    return pending


def wait_for_ranks(run_path: Path, timeout_s: float, own: Iterable[int] = (), poll_s: float = 0.1,
                   sleep: Callable[[float], None] = time.sleep) -> List[int]:
    """Wait up to ``timeout_s`` for every rank folder but ``own`` to hold a ``rank.json`` that is no longer
    ``running``; returns the ranks still pending (empty: all ended). Polls back off to 2 s. A Ctrl-C (or a stop
    signal raised as one) ends the wait, not the run."""
    settled = set(own)
    deadline = time.monotonic() + max(0.0, timeout_s)
    pending = _pending(run_path, settled)
    try:
        while pending and time.monotonic() < deadline:
            sleep(min(poll_s, max(0.0, deadline - time.monotonic())))
            poll_s = min(poll_s * 1.5, 2.0)
            pending = _pending(run_path, settled)
    except KeyboardInterrupt:
        pass
    return pending


def settle(run: Any, world_size: int, own: Iterable[int], timeout_s: float) -> Dict[str, Any]:
    """The owner's end of a launch: wait for the other ranks (bounded), then the ``run.json`` fields
    ``world_size``, ``per_rank``, ``totals`` (and ``steps``: the launch's). Ranks still running are ``unknown``."""
    pending = wait_for_ranks(run.path, timeout_s, own)
    if pending:
        log.warning("probe-tui: %s: rank(s) %s had not finished after %gs; run.json records them as unknown "
                    "(the run list counts them once they finish; %s sets the wait)", run.path,
                    ",".join(str(r) for r in pending), timeout_s, WAIT_ENV)
    figures = launch_figures(run.path, {"status": "finished"})
    fields: Dict[str, Any] = {"world_size": int(world_size), **figures}
    if isinstance(figures["totals"].get("steps"), int):
        fields["steps"] = figures["totals"]["steps"]
    return fields




class RankLifecycle:
    """One process's part in its run's ranks: registers the rank it writes (in a launch of several processes),
    writes its ``rank.json`` at the end and, in the owner, settles the launch's figures for ``run.json``."""

    def __init__(self, run: Any, job_ranks: Iterable[int] = ()) -> None:
        rank, _, world = launch_position()
        self.run = run
        self.world_size = world
        wanted = list(job_ranks or ())
        self.rank: Optional[int] = rank if rank is not None and (not wanted or rank in wanted) else None
        self.ended: List[int] = []
        if self.world_size > 1 and self.rank is not None:
            register(run, self.rank)

    def end(self, status: str, exit_code: int, summary: Dict[str, Any], steps: Optional[int] = None) -> None:
        """Write ``rank.json`` for every rank folder this process wrote (never fails: logged)."""
        ranks = set(getattr(self.run, "made_ranks", set()))
        if self.rank is not None and (Path(self.run.path) / ("rank%d" % self.rank)).is_dir():
            ranks.add(self.rank)
        figures = figures_from(summary or {}, steps)
        for rank in sorted(ranks):
            finish_rank(self.run, rank, status, exit_code, figures)
        self.ended = sorted(ranks)

    def settle(self, timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """The owner's ``run.json`` fields for the launch (waits only when there are other processes)."""
        wait = (wait_seconds() if timeout_s is None else timeout_s) if self.world_size > 1 else 0.0
        try:
            return settle(self.run, self.world_size, self.ended, wait)
        except (OSError, RunError) as exc:
            log.warning("probe-tui: %s: could not total the ranks (%s)", self.run.path, exc)
            return {"world_size": self.world_size}

    def report(self, fields: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
        """What the CLI shows of the launch (None for a single process): this rank, ownership and, in the owner,
        ``per_rank`` and ``totals``."""
        if self.world_size <= 1:
            return None
        out: Dict[str, Any] = {"owner": bool(self.run.owner), "rank": self.rank, "world_size": self.world_size}
        if fields:
            out.update({k: fields[k] for k in ("per_rank", "totals") if k in fields})
        return out


__all__ = ["DEFAULT_WAIT_S", "FIGURES", "RANK_JSON", "WAIT_ENV", "RankLifecycle", "figures_from", "finish_rank",
           "launch_figures", "launch_position", "read_rank", "register", "settle", "totals", "wait_for_ranks", "wait_seconds"]
