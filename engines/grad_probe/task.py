"""The ``grad_probe`` task object (``engines.task``): the gradient hook of the job's framework.

Under ``--run`` the hook is installed for the whole process before the target runs (zero code change: the
optimizer is found by the adapter's global hooks). In a script it is msprobe's ``PrecisionDebugger(config).
monitor(model)`` (on MindSpore ``monitor(optimizer)``): steps are the optimizer's, so ``start``/``stop``/``step``
do nothing (msprobe's do nothing for grad_probe either, so one loop serves every task); a ``start(model)`` before
any ``monitor()`` starts monitoring that model. Each rank writes ``rank<R>/grads.h5`` (and, with ``export_csv``,
msprobe's ``grad_summary_{step}.csv``); the hook reports each step it records to the reporter.
"""

from typing import Any, Callable, Dict, Optional, Set

from engines.collection import EXIT_OK, EXIT_TARGET_FAILED, CollectionResult
from engines.grad_probe.engine import summarise
from engines.steps import StepReporter
from engines.task import Say, TaskContext, process_rank, store_options


class GradProbeTask:
    task = "grad_probe"
    seeds = False

    def __init__(self, ctx: TaskContext, run: Any, reporter: StepReporter, say: Say) -> None:
        self.ctx = ctx
        self.job = ctx.job
        self.run = run
        self.reporter = reporter
        self.say = say
        self.probe: Any = None
        self.rank: Optional[int] = None
        self.rank_dir: Any = None
        self._warned: Set[str] = set()
        reporter.details = lambda step: {"records": self.probe.writer.rows if self.probe else 0,
                                         "bytes": self.probe.writer.bytes_written if self.probe else 0}

    @property
    def steps(self) -> int:
        return self.reporter.steps

    def _install(self, rank: int, **kwargs: Any) -> bool:
        """Install the hook on ``rank`` (False: the rank is not in the job's rank list, nothing is recorded)."""
        _, world_size = process_rank()
        self.rank = rank
        self.rank_dir = self.run.rank_dir(rank)
        ranks = list(getattr(self.job, "rank", None) or [])
        if ranks and rank not in ranks:
            return False
        self.probe = self.ctx.adapter("grad_probe").start_grad_probe(
            self.job.grad_probe, self.rank_dir, steps=list(getattr(self.job, "step", None) or []) or None,
            rank=rank, world_size=world_size, store_options=store_options(self.job),
            on_step=self.reporter.from_hook, **kwargs)
        return True

    # -- the in-script lifecycle -----------------------------------------------------------------------------
    def monitor(self, target: Any) -> None:
        """Record every optimizer step's gradients from now on. ``target``: the model (its parameter names), or,
        on MindSpore, the optimizer whose calls are the steps (a model works too: the first optimizer called)."""
        if self.probe is not None or self.rank is not None:
            self._once("again", "monitor() was already called; the first call's hook keeps recording")
            return
        kwargs: Dict[str, Any] = {}
        if target is not None:
            if self.ctx.framework == "mindspore":
                bases = tuple(self.ctx.adapter("optimizer_hooks").optimizer_bases())
                if bases and isinstance(target, bases):
                    kwargs["optimizer"] = target
            elif hasattr(target, "named_parameters"):  # a torch.nn.Module; an optimizer is found by its hook
                kwargs["model"] = target
        rank = int(self.ctx.adapter("session").detect_rank())
        if not self._install(rank, **kwargs):
            self.say("warning", "grad_probe: rank %d is not in the config's rank list: nothing is recorded on it"
                     % rank)

    def start(self, model: Any = None) -> None:
        if self.probe is None and self.rank is None and model is not None:
            self.monitor(model)

    def stop(self) -> None:
        return None

    def step(self) -> None:
        return None

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        self._once("save", "save(%r) is skipped: save() records values in statistics and tensor runs, this one is "
                   "grad_probe" % (name,))

    def close(self, status: str) -> Dict[str, Any]:
        if self.rank is None:
            self.say("warning", "grad_probe: monitor(model) was never called, so no gradient was recorded")
            return {"verdict": "nothing recorded: monitor(model) was never called", "steps_recorded": 0,
                    "parameter_rows": 0}
        self.end(status)
        return summarise(self.probe, self.rank, self.rank_dir, self.job.grad_probe.grad_level)

    # -- the zero-code run -----------------------------------------------------------------------------------
    def begin(self) -> None:
        self._install(process_rank()[0])

    def target_on_step(self) -> Optional[Callable[..., None]]:
        return self.reporter.from_target

    def end(self, status: str) -> None:
        if self.probe is not None:
            self.probe.stop(status)

    def partial_summary(self) -> Dict[str, Any]:
        return {}

    def outcome(self, result: Any) -> CollectionResult:
        rank = self.rank if self.rank is not None else process_rank()[0]  # begin() set it
        summary = summarise(self.probe, rank, self.rank_dir, self.job.grad_probe.grad_level)
        if not result.ok:
            summary["error"] = result.error
            return CollectionResult(EXIT_TARGET_FAILED, summary)
        return CollectionResult(EXIT_OK, summary)

    def _once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.say("warning", text)

