"""What the CLI prints for a launch of several processes (torchrun, Slurm): one summary, from one rank.

Only the owner of ``run.json`` (the rank that totals the launch: engines.run_ranks) prints the summary, with the
launch's totals and, when the run holds several ranks, a table with one line per rank (ranks that did not finish
first). Other ranks print nothing when they finished, else one short line. Progress is drawn by local rank 0 of
each node (``LOCAL_RANK``, ``SLURM_LOCALID``... 0, or none set); every line carries the rank when the world size
is above 1.
"""

from typing import Any, Dict, List, Optional, Tuple

from probe_tui.formatting import format_bytes

DONE = ("finished", "disk_full")
# summary keys the launch totals replace: (summary key, totals key)
_TOTALLED = (("records", "records"), ("tensor_rows", "tensor_rows"), ("size_bytes", "bytes"))


def progress_choice() -> Tuple[str, bool]:
    """(rank label, whether this process draws progress) for the CLI's progress view."""
    from engines.run_ranks import launch_position

    rank, local, world = launch_position()
    if world <= 1:
        return "", True
    return f"rank {rank if rank is not None else '?'}", local in (None, 0)


def quiet_line(outcome: Any) -> Optional[str]:
    """A non-owner rank's one line: None when it finished (the owner's summary covers it)."""
    if outcome.status in DONE:
        return None
    rank = (outcome.launch or {}).get("rank")
    return f"rank {rank if rank is not None else '?'}: {outcome.status} (exit {outcome.exit_code}) → {outcome.run_dir}"


def launch_summary(summary: Dict[str, Any], launch: Dict[str, Any]) -> Dict[str, Any]:
    """The owner's summary with the launch's totals in place of its own rank's counts, and a per-rank table."""
    per_rank: Dict[str, Dict[str, Any]] = dict(launch.get("per_rank") or {})
    totals: Dict[str, Any] = dict(launch.get("totals") or {})
    world = launch.get("world_size")
    ranks = len(per_rank)
    head = f"{ranks} rank{'s' if ranks != 1 else ''}, {totals.get('finished', 0)} finished"
    if isinstance(world, int) and world != ranks:
        head += f" (world size {world})"
    out: Dict[str, Any] = {"ranks": head}
    for key, value in summary.items():
        if key == "tables":
            continue
        out[key] = value
    for key, total_key in _TOTALLED:
        if totals.get(total_key) is not None:
            out[key] = totals[total_key]
    if totals.get("steps") is not None:
        out["launch_steps"] = totals["steps"]
    tables: List[Dict[str, Any]] = []
    if ranks > 1:
        tables.append(rank_table(per_rank))
    own = launch.get("rank")
    for spec in summary.get("tables") or []:
        spec = dict(spec)
        if ranks > 1 and own is not None:
            spec["title"] = f"rank {own}: {spec.get('title') or ''}".rstrip(": ")
        tables.append(spec)
    if tables:
        out["tables"] = tables
    return out


def rank_table(per_rank: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """One row per rank: status, records, tensor rows, steps, size; ranks that did not finish first."""
    def order(item: Tuple[str, Dict[str, Any]]) -> Tuple[int, int]:
        key, entry = item
        return (0 if entry.get("status") not in DONE else 1, int(key) if key.isdigit() else -1)

    rows = []
    for key, entry in sorted(per_rank.items(), key=order):
        rows.append([key, str(entry.get("status", "unknown")), _count(entry.get("records")),
                     _count(entry.get("tensor_rows")), _count(entry.get("steps")),
                     format_bytes(entry["bytes"]) if isinstance(entry.get("bytes"), int) else "—"])
    return {"title": "ranks", "columns": ["rank", "status", "records", "tensor rows", "steps", "size"], "rows": rows}


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) else "—"


def launch_json(outcome: Any) -> Dict[str, Any]:
    """``--json``'s one object: the owner's outcome plus ``world_size``, ``ranks`` (per rank) and ``totals``."""
    payload: Dict[str, Any] = {"exit_code": outcome.exit_code, "status": outcome.status, "run_dir": outcome.run_dir,
                               "summary": outcome.summary}
    launch = outcome.launch or {}
    if launch:
        payload.update({"rank": launch.get("rank"), "world_size": launch.get("world_size"),
                        "ranks": launch.get("per_rank") or {}, "totals": launch.get("totals") or {}})
    return payload
