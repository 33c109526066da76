"""Multi-process launches: the run-id every rank of one launch shares, and the default rank subset.

``torchrun --nproc_per_node=N -m probe_tui run cfg.json`` (or a script that builds a ``PrecisionDebugger``) starts
N processes that each create the run folder; they must land in the same ``<dump_path>/<run-id>/``. The run-id
comes from, in order:

1. ``PROBE_TUI_RUN_ID`` when set (any launcher; the user or a job script picks it);
2. **torchrun / torch.distributed.run / torch.distributed.launch** (``TORCHELASTIC_USE_AGENT_STORE=True``): the
   ranks agree through the launcher's own key-value store (the TCPStore the elastic agent hosts at
   ``MASTER_ADDR:MASTER_PORT`` for the whole launch, the one ``init_process_group`` joins): each rank proposes a
   fresh ``YYYYmmdd-HHMMSS-<6 hex>`` id with one ``compare_set`` on a key of its own; the first proposal wins and
   every rank, on every node, reads it back. One round trip per process before the target runs: no collective
   in the training's stream, nothing asked of the script (it may initialise its process group later, or never),
   ranks filtered out by ``rank`` take part too, and an elastic restart (``TORCHELASTIC_RESTART_COUNT``) gets a
   new run;
3. a launch id the environment makes unique per launch: Slurm's ``SLURM_JOB_ID`` + ``SLURM_STEP_ID``, or
   torchrun's ``TORCHELASTIC_RUN_ID`` (``--rdzv-id``) when it is not ``none`` (the agent store was unavailable);
4. otherwise each process makes its own id (single-process runs; multi-rank launches warn once).

Node-local dump paths work as well as shared ones: every node writes ``<dump_path>/<run-id>/`` with its own
``rank<R>/`` folders (global ranks, so folders from several nodes can be copied into one run folder), and the
first rank to arrive on each file system writes that copy's ``run.json``.

``PROBE_TUI_RANKS`` (the syntax of the config's ``rank``: ``0,4-6`` or ``[0, "4-6"]``) limits which ranks write
when the config's ``rank`` is empty.
"""

import json
import logging
import os
import re
from typing import Any, Callable, List, Optional, Set, Tuple

log = logging.getLogger("engines.launch")

RUN_ID_ENV = "PROBE_TUI_RUN_ID"
RANKS_ENV = "PROBE_TUI_RANKS"
_STORE_KEY = "probe_tui/run_id/%s/%d"  # restart count, the process's n-th run
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_runs_made = 0  # runs this process created or joined through a launcher (same order on every rank)


class LaunchError(ValueError):
    """A bad launcher variable (``PROBE_TUI_RANKS``); the message is one line naming it."""


def _env_int(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def world_size() -> int:
    """Processes in this launch according to the environment (1 when no launcher says otherwise)."""
    for name in ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        value = _env_int(name)
        if value is not None:
            return value
    return 1


def shared_run_id(propose: Callable[[], str]) -> Tuple[Optional[str], str]:
    """``(run_id, where it came from)``; ``(None, why)`` when this process picks its own."""
    global _runs_made
    explicit = os.environ.get(RUN_ID_ENV)
    if explicit:
        return explicit, RUN_ID_ENV
    if world_size() <= 1:
        return None, "a single process"
    seq = _runs_made
    _runs_made += 1
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        agreed = _agree_through_agent_store(_STORE_KEY % (os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), seq),
                                            propose())
        if agreed is not None:
            return agreed, "torchrun's store"
    derived = _derived_id(seq)
    if derived is not None:
        return derived
    log.warning("probe-tui: rank %s of %d: no launcher id to share, so each rank writes its own run folder; set "
                "%s to one value on every rank to share one", os.environ.get("RANK", "?"), world_size(), RUN_ID_ENV)
    return None, "no launcher id"


def _agree_through_agent_store(key: str, proposal: str) -> Optional[str]:
    try:
        from engines.frameworks import adapter_module

        return adapter_module("pytorch", "launch").agree_run_id(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), key, proposal)
    except Exception as exc:  # unreachable store, no torch: fall back, say why
        log.warning("probe-tui: could not agree on a run-id through torchrun's store at %s:%s (%s: %s)",
                    os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"), type(exc).__name__, exc)
        return None


def _derived_id(seq: int) -> Optional[Tuple[str, str]]:
    suffix = "" if seq == 0 else "-%d" % seq
    job = os.environ.get("SLURM_JOB_ID")
    if job:
        step = os.environ.get("SLURM_STEP_ID", "0")
        return _safe("slurm-%s-%s%s" % (job, step, suffix)), "SLURM_JOB_ID"
    rdzv = os.environ.get("TORCHELASTIC_RUN_ID")
    if rdzv and rdzv != "none":
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        return _safe("torchrun-%s-r%s%s" % (rdzv, restart, suffix)), "TORCHELASTIC_RUN_ID"
    return None


def _safe(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._-")[:120] or "run"


def ranks_from_env() -> Optional[List[int]]:
    """``PROBE_TUI_RANKS`` as a sorted list of ranks, or None when unset. Raises ``LaunchError``."""
    raw = os.environ.get(RANKS_ENV)
    if raw is None or not raw.strip():
        return None
    from schemas import parse_rank_item
    from schemas.errors import echo

    text = raw.strip()
    try:
        items: Any = json.loads(text) if text.startswith("[") else [p.strip() for p in text.split(",") if p.strip()]
    except (ValueError, RecursionError):  # RecursionError: "[[[[...": deeper than json can decode
        raise LaunchError("%s: %s is not a rank list (write 0,4-6 or [0, \"4-6\"])" % (RANKS_ENV, echo(raw))) from None
    if not isinstance(items, list) or not items:
        raise LaunchError("%s: %s is not a rank list (write 0,4-6 or [0, \"4-6\"])" % (RANKS_ENV, echo(raw)))

    ranks: Set[int] = set()
    for item in items:
        try:
            low, high = parse_rank_item(item)
        except Exception as exc:
            raise LaunchError("%s: %s" % (RANKS_ENV, exc)) from None
        ranks.update(range(low, high + 1))
    return sorted(ranks)


def apply_rank_env(job: Any) -> Any:
    """The job with ``rank`` from ``PROBE_TUI_RANKS`` when the config left it empty (jobs without ``rank``, such
    as monitor, are returned as they are)."""
    if not hasattr(job, "rank") or job.rank:
        return job
    ranks = ranks_from_env()
    if ranks is None:
        return job
    return job.model_copy(update={"rank": ranks}) if hasattr(job, "model_copy") else job


__all__ = ["LaunchError", "RANKS_ENV", "RUN_ID_ENV", "apply_rank_env", "ranks_from_env", "shared_run_id",
           "world_size"]
