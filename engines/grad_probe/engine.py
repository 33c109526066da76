"""The grad_probe collection engine: run the job's target with the gradient hook installed for the whole process.

Zero code change: the optimizer is found through torch's global optimizer-step hooks and the parameter names
through global module hooks (``engines.adapters.torch.grad_probe``); with MindSpore, through a hook on optimizer
calls, which receive the gradients (``engines.adapters.mindspore.grad_probe``). Each rank writes its own grads store in
``<run>/rank<R>/`` and, when ``export_csv`` is set, msprobe's ``grad_summary_{step}.csv`` files beside it.
"""

import logging
import os
from typing import Any, Dict

from engines.collection import CollectionResult, hook_adapter

log = logging.getLogger(__name__)


def process_rank() -> "tuple[int, int]":
    """The rank and world size of this process as a launcher (torchrun, msrun) sets them; (0, 1) otherwise."""
    def _int(*names: str, default: int) -> int:
        for name in names:
            value = os.environ.get(name)
            if value not in (None, ""):
                try:
                    return int(value)
                except ValueError:
                    pass
        return default

    return _int("RANK", "RANK_ID", default=0), _int("WORLD_SIZE", "RANK_SIZE", default=1)


def target_dict(target) -> Dict[str, Any]:
    if hasattr(target, "model_dump"):
        return {k: v for k, v in target.model_dump(mode="json").items() if v is not None}
    return dict(target or {})


def declared_steps(target: Dict[str, Any]):
    demo = target.get("demo")
    return demo.get("steps") if isinstance(demo, dict) else None


def store_options(job) -> Dict[str, Any]:
    output = getattr(job, "output", None)
    if output is None:
        return {}
    options: Dict[str, Any] = {"mode": getattr(output, "store_mode", "auto")}
    if getattr(output, "disk_budget", None) is not None:
        options["disk_budget"] = int(output.disk_budget)
    return options


def run_collection(job, run, events) -> CollectionResult:
    from engines.monitor.progress import StepReporter
    from engines.targets import run_target

    section = job.grad_probe
    got = hook_adapter(job, events, "grad_probe", "grad_probe")
    if isinstance(got, CollectionResult):
        return got
    framework, adapter = got
    start_grad_probe = adapter.start_grad_probe

    target = target_dict(job.target)
    rank, world_size = process_rank()
    ranks = list(getattr(job, "rank", None) or [])
    selected = not ranks or rank in ranks
    rank_dir = run.rank_dir(rank)
    probe = None
    reporter = StepReporter(events, declared_steps(target), target_reports_steps="demo" in target,
                            extra=lambda: {"records": probe.writer.rows if probe else 0,
                                           "bytes": probe.writer.bytes_written if probe else 0})
    if selected:
        probe = start_grad_probe(section, rank_dir, steps=list(getattr(job, "step", None) or []) or None,
                                 rank=rank, world_size=world_size, store_options=store_options(job),
                                 on_step=reporter.from_hook)
    status = "failed"
    result = None
    try:
        result = run_target(target, framework=framework, on_step=reporter.from_target)
        status = "finished" if result.ok else "failed"
    finally:
        if probe is not None:
            probe.stop(status)
    summary = summarise(probe, rank, rank_dir, section.grad_level)
    if result is None or not result.ok:
        summary["error"] = getattr(result, "error", "the target failed")
        return CollectionResult(1, summary)
    return CollectionResult(0, summary)


def summarise(probe, rank: int, rank_dir, grad_level: str) -> Dict[str, Any]:
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
