"""What a grad_probe run writes and reports (its task object: ``engines.grad_probe.task``).

Zero code change: the optimizer is found through torch's global optimizer-step hooks and the parameter names
through global module hooks (``engines.adapters.torch.grad_probe``); with MindSpore, through a hook on optimizer
calls, which receive the gradients (``engines.adapters.mindspore.grad_probe``). Each rank writes its own grads store in
``<run>/rank<R>/`` and, when ``export_csv`` is set, msprobe's ``grad_summary_{step}.csv`` files beside it.
"""

import logging
from typing import Any, Dict

from engines.task import process_rank, store_options  # noqa: F401 (this module's interface)

log = logging.getLogger(__name__)


def summarise(probe: Any, rank: int, rank_dir: Any, grad_level: str) -> Dict[str, Any]:
    """The run summary of one rank's probe (None: the rank was not selected); ``--run`` and the in-script API."""
    writer = probe.writer if probe else None
    summary: Dict[str, Any] = {
        "rank": rank,
        "grad_level": grad_level,
        "steps_recorded": writer.steps if writer else 0,
        "parameter_rows": writer.rows if writer else 0,
        "store": str(rank_dir / "grads.h5") if writer and writer.store.mode == "swmr" else str(rank_dir),
    }
    if writer is not None and writer.csv_dir is not None:
        summary["csv"] = str(writer.csv_dir)
    if probe is not None and probe.hook.failures:
        summary["failed_steps"] = probe.hook.failures
    if probe is None:
        summary["note"] = f"rank {rank} is not in the job's rank list: nothing recorded"
    return summary
