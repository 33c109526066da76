"""``grad_probe`` in a script: msprobe's ``PrecisionDebugger(config_path=...).monitor(model)``.

``monitor(model)`` (PyTorch) or ``monitor(optimizer)`` (MindSpore, as msprobe has it) installs the same hook
``probe-tui --run`` installs (``engines.adapters.<framework>.grad_probe.start_grad_probe``): steps are counted by
the optimizer's steps, so ``start``/``stop``/``step`` are not needed and do nothing (msprobe's
``start``/``stop``/``step`` do nothing for grad_probe either, so one loop serves every task). A ``start(model)``
before any ``monitor()`` starts monitoring that model. Each rank writes ``rank<R>/grads.h5`` (and, with
``export_csv``, msprobe's ``grad_summary_{step}.csv``) in the run folder; ``close()`` finishes it.
"""

from typing import Any, Dict, Optional

from probe_tui.debugger_tasks import adapter, say


class GradProbeTask:
    task = "grad_probe"

    def __init__(self, job: Any, run: Any, framework: str) -> None:
        self.job = job
        self.run = run
        self.framework = framework
        self.probe: Any = None
        self.rank: Optional[int] = None
        self.rank_dir: Any = None
        self.steps = 0
        self._warned = set()

    # -- msprobe's calls ---------------------------------------------------------------------------------------
    def monitor(self, target: Any) -> None:
        """Record every optimizer step's gradients from now on. ``target``: the model (its parameter names), or,
        on MindSpore, the optimizer whose calls are the steps (a model works too: the first optimizer called)."""
        if self.probe is not None or self.rank is not None:
            self._once("again", "monitor() was already called; the first call's hook keeps recording")
            return
        from engines.grad_probe.engine import process_rank, store_options

        self.rank = int(adapter(self.framework, "session").detect_rank())
        _, world_size = process_rank()
        self.rank_dir = self.run.rank_dir(self.rank)
        ranks = list(getattr(self.job, "rank", None) or [])
        if ranks and self.rank not in ranks:
            say("grad_probe: rank %d is not in the config's rank list: nothing is recorded on it" % self.rank)
            return
        grad_probe = adapter(self.framework, "grad_probe")
        kwargs: Dict[str, Any] = {}
        if target is not None:
            if self.framework == "mindspore":
                if self._is_mindspore_optimizer(target):
                    kwargs["optimizer"] = target
            elif hasattr(target, "named_parameters"):  # a torch.nn.Module; an optimizer is found by its hook
                kwargs["model"] = target
        self.probe = grad_probe.start_grad_probe(
            self.job.grad_probe, self.rank_dir, steps=list(getattr(self.job, "step", None) or []) or None,
            rank=self.rank, world_size=world_size, store_options=store_options(self.job), **kwargs)

    def start(self, model: Any = None) -> None:
        if self.probe is None and self.rank is None and model is not None:
            self.monitor(model)

    def stop(self) -> None:
        return None

    def step(self) -> None:
        self.steps += 1

    def save(self, name: str, value: Any, save_backward: bool = True) -> None:
        self._once("save", "save(%r) is skipped: save() records values in statistics and tensor runs, this one is "
                   "grad_probe" % (name,))

    def close(self, status: str) -> Dict[str, Any]:
        from engines.grad_probe.engine import summarise

        if self.rank is None:
            say("grad_probe: monitor(model) was never called, so no gradient was recorded")
            return {"verdict": "nothing recorded: monitor(model) was never called", "steps_recorded": 0,
                    "parameter_rows": 0}
        if self.probe is not None:
            self.probe.stop(status)
        out = summarise(self.probe, self.rank, self.rank_dir, self.job.grad_probe.grad_level)
        return out

    def headline(self, summary: Dict[str, Any]) -> str:
        if "steps_recorded" in summary and "rank" in summary:
            return "%d steps of gradients, %d parameter rows (%s)" % (
                summary["steps_recorded"], summary["parameter_rows"], summary.get("grad_level"))
        return str(summary.get("verdict", ""))

    # -- helpers ---------------------------------------------------------------------------------------------
    def _is_mindspore_optimizer(self, target: Any) -> bool:
        bases = tuple(adapter("mindspore", "optimizer_hooks").optimizer_bases())
        return bool(bases) and isinstance(target, bases)

    def _once(self, key: str, text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            say(text)
