"""How a collection task is built and driven: one task object per task, for ``--run`` and the in-script API alike.

A job is resolved once (``resolve``: the framework, the target, the dump config and the step count the demo
declares) into a ``TaskContext``. Each collection task has one class, in ``engines/<task>/task.py``, built from
``(context, run, reporter, say)``: it builds the session, sinks and result stores of its task and reports every
step it closes to the one ``StepReporter`` (``engines.steps``), which emits the ``step`` event. Two drivers use it:

- ``probe-tui --run`` (``engines.runner`` → ``engines.registry`` → ``engines.collection.run_task``): ``begin()``
  installs the process-wide (zero-code) instrumentation, the target runs, ``end(status)`` removes it and closes
  the stores, ``outcome(result)`` gives the exit code and the summary;
- ``PrecisionDebugger`` (``probe_tui.debugger``) forwards msprobe's ``start``/``stop``/``step``/``save``/
  ``monitor`` and ``close`` to the same object.
"""

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Protocol

from engines.frameworks import ADAPTER_PACKAGES, adapter_module  # noqa: F401 (re-exported: the task's adapter lookup)

#: ``say(level, text)``: one line for the person running the job (a ``message`` event, or stderr in a script).
Say = Callable[[str, str], None]


@dataclass
class TaskContext:
    """A job resolved once: what the runner, the collection driver and the task object all read."""

    job: Any
    framework: str
    #: the target as ``run_target`` takes it: ``{"demo": {...}}``, ``{"script": ...}``, ``{"callable": ...}``; None
    #: in a script (``PrecisionDebugger``), where the script itself is the target
    target: Optional[Dict[str, Any]] = None
    #: the steps the demo declares (it reports each one itself); None for scripts and callables
    total_steps: Optional[int] = None
    config: Dict[str, Any] = field(default_factory=dict)

    @property
    def is_demo(self) -> bool:
        return isinstance(self.target, dict) and "demo" in self.target

    def adapter(self, name: str) -> Any:
        return adapter_module(self.framework, name)


def target_dict(target: Any) -> Optional[Dict[str, Any]]:
    """A job's target as a plain dict (``"demo"`` → ``{"demo": {}}``); None when there is none."""
    if target is None:
        return None
    if target == "demo":
        return {"demo": {}}
    if hasattr(target, "model_dump"):
        return {k: v for k, v in target.model_dump(mode="json").items() if v is not None}
    return dict(target)


def declared_steps(target: Optional[Dict[str, Any]]) -> Optional[int]:
    """The demo's step count (it reports its own steps), None for other targets."""
    demo = (target or {}).get("demo")
    if demo is None:
        return None
    return int(demo.get("steps", 5)) if isinstance(demo, dict) else 5


def resolve_framework(job: Any, target: Optional[Dict[str, Any]] = None) -> str:
    """The job's framework; ``auto`` reads the target (PyTorch without one)."""
    framework = getattr(job, "framework", "auto") or "auto"
    if framework != "auto":
        return framework
    target = target if target is not None else target_dict(getattr(job, "target", None))
    if target is None:
        return "pytorch"
    from engines.targets import detect_framework

    return detect_framework(target)


def config_of(job: Any) -> Dict[str, Any]:
    from schemas import dump_config

    return dump_config(job)


def check_level(job: Any, framework: str, in_script: bool = False) -> None:
    """Level L2 (msprobe's kernel level) loads for statistics, tensor and overflow_check; the framework, known
    only here, decides whether it runs (docs/MINDSPORE.md "Graph mode"): MindSpore's statistics and tensor
    (``engines.capture.graph_task``) and overflow_check (``engines.overflow.graph_task``) under ``--run``."""
    if getattr(job, "level", None) != "L2":
        return
    from engines.errors import JobError

    task = getattr(job, "task", "statistics")
    if framework == "mindspore":
        if task not in ("statistics", "tensor", "overflow_check"):
            raise JobError("level: L2 is not implemented for %s yet; the statistics task at level L2 counts "
                           "each kernel's NaN and inf values" % task)
        if in_script:
            raise JobError("level: L2 runs under `probe-tui run` (MindSpore's kernel dump is set up before the "
                           "script compiles its first graph), not from PrecisionDebugger")
        return
    from schemas.common import l2_message

    raise JobError("level: " + l2_message("pytorch"))


def check_online(job: Any, framework: str) -> None:
    """``online_check.level: aten`` is a PyTorch dispatch mode: refused on MindSpore (exit 2)."""
    task = getattr(job, "task", "")
    online = getattr(getattr(job, task, None), "online_check", None)
    if framework != "mindspore" or online is None or not online.enabled or online.level != "aten":
        return
    from engines.errors import JobError

    raise JobError("%s.online_check.level: aten (the dispatch level) is PyTorch only; use level api on MindSpore"
                   % task)


def resolve(job: Any, framework: Optional[str] = None, *, with_target: bool = True) -> TaskContext:
    """Resolve ``job`` once. ``framework``: already known (a script's model tells it); ``with_target``: False in a
    script, where the running script is the target."""
    target = target_dict(getattr(job, "target", None)) if with_target else None
    framework = framework or resolve_framework(job, target)
    check_level(job, framework, in_script=not with_target)
    check_online(job, framework)
    return TaskContext(job=job, framework=framework, target=target,
                       total_steps=declared_steps(target), config=config_of(job))


def run_meta(ctx: TaskContext, options: Any, task: Optional[str] = None) -> Dict[str, Any]:
    """The store metadata of a capture-based run: the config, task, level, framework environment and seed."""
    env: Dict[str, Any] = {}
    if ctx.framework in ADAPTER_PACKAGES:
        env = ctx.adapter("environment").describe()
    return {"framework": ctx.framework, "run_meta": {"config": ctx.config, "task": task or options.task,
                                                     "level": options.level, "environment": env,
                                                     "seed": options.seed}}


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


def store_options(job: Any) -> Dict[str, Any]:
    output = getattr(job, "output", None)
    if output is None:
        return {}
    options: Dict[str, Any] = {"mode": getattr(output, "store_mode", "auto")}
    if getattr(output, "disk_budget", None) is not None:
        options["disk_budget"] = int(output.disk_budget)
    return options


class Task(Protocol):
    """What every collection task object provides (``engines/<task>/task.py``)."""

    task: str
    #: ``--run`` seeds the job's ``seed`` before building the task
    seeds: bool
    #: the steps reported so far (run.json's ``steps`` of an in-script run)
    steps: int

    # -- the in-script lifecycle (msprobe's PrecisionDebugger) ----------------------------------------------
    def start(self, model: Any = None) -> None: ...

    def stop(self) -> None: ...

    def step(self) -> None: ...

    def save(self, name: str, value: Any, save_backward: bool = True) -> None: ...

    def monitor(self, target: Any) -> None: ...

    def close(self, status: str) -> Dict[str, Any]:
        """Close the stores and return the run summary (idempotent for ``end`` then ``close``)."""
        ...

    # -- the zero-code run (probe-tui --run) ------------------------------------------------------------------
    def begin(self) -> None:
        """Install the process-wide instrumentation before the target runs."""
        ...

    def target_on_step(self) -> Optional[Callable[..., None]]:
        """What the target calls after each of its steps (the demo reports its steps and losses), or None."""
        ...

    def end(self, status: str) -> None:
        """Remove the instrumentation and close the stores (``status``: finished, failed, stopped)."""
        ...

    def partial_summary(self) -> Dict[str, Any]:
        """What was written before a stop (for run.json)."""
        ...

    def outcome(self, result: Any) -> Any:
        """The ``CollectionResult`` of the run, from the target's ``TargetResult``."""
        ...
