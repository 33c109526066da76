"""What the collection engines share: running a job's target in-process under an adapter's zero-code capture.

``statistics``/``tensor`` (``engines.capture.engine``), ``overflow_check`` (``engines.overflow.engine``) and
``free_benchmark`` (``engines.free_benchmark.engine``) each build a session of the job's framework and hand it to
``CollectionRun``: the framework read from the job (or detected from the target), the adapter package reached by
a lazy import (ARCHITECTURE.md: no framework at import time), the seed, ``step`` events (from the demo's own
``on_step``, else at each optimizer step) and the run of the target. grad_probe and the monitor install their own
hooks and share ``CollectionResult``.
"""

import importlib
import time
from typing import Any, Callable, Dict, Optional, Tuple

ADAPTER_PACKAGES = {"pytorch": "engines.adapters.torch", "mindspore": "engines.adapters.mindspore"}

EXIT_OK = 0
EXIT_TARGET_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_FINDINGS = 3


class CollectionResult:
    """The exit code and the summary for ``run_finished`` (``int(result)`` is the exit code)."""

    def __init__(self, exit_code: int, summary: Optional[Dict[str, Any]] = None) -> None:
        self.exit_code = int(exit_code)
        self.summary = summary if summary is not None else {}

    def __int__(self) -> int:
        return self.exit_code

    def __eq__(self, other: object) -> bool:
        if isinstance(other, int):
            return self.exit_code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.exit_code)

    def __repr__(self) -> str:
        return "CollectionResult(exit_code=%d)" % self.exit_code


def adapter_module(framework: str, name: str) -> Any:
    """``engines.adapters.<torch|mindspore>.<name>``, imported now (None for a framework without an adapter)."""
    package = ADAPTER_PACKAGES.get(framework)
    return importlib.import_module(package + "." + name) if package else None


def target_of(job: Any) -> Any:
    """The job's target as the runner takes it: ``"demo"``, a dict, or None."""
    target = getattr(job, "target", None) if not isinstance(job, dict) else job.get("target")
    if target is None or isinstance(target, (str, dict)):
        return target
    if hasattr(target, "model_dump"):
        return {k: v for k, v in target.model_dump(mode="json").items() if v is not None}
    return dict(target)


def framework_of(job: Any, target: Any) -> str:
    """The job's framework; ``auto`` reads the target (PyTorch when it cannot tell)."""
    framework = getattr(job, "framework", "auto") or "auto"
    if framework != "auto":
        return framework
    try:
        from engines.targets import detect_framework

        return detect_framework(target)
    except Exception:
        return "pytorch"


def demo_steps(target: Any) -> Optional[int]:
    """The demo's step count (it reports its own steps), None for other targets."""
    if target == "demo":
        return 5
    if isinstance(target, dict) and isinstance(target.get("demo"), dict):
        return target["demo"].get("steps", 5)
    return None


def config_of(job: Any) -> Dict[str, Any]:
    try:
        from schemas import dump_config

        return dump_config(job)
    except Exception:
        if hasattr(job, "model_dump"):
            return job.model_dump(mode="json")
        return dict(job) if isinstance(job, dict) else {}


def run_meta(job: Any, framework: str, options: Any) -> Dict[str, Any]:
    """The store metadata of a capture-based run: the config, task, level, framework environment and seed."""
    env: Dict[str, Any] = {}
    if framework in ADAPTER_PACKAGES:
        env = adapter_module(framework, "environment").describe()
    return {"framework": framework, "run_meta": {"config": config_of(job), "task": options.task,
                                                 "level": options.level, "environment": env,
                                                 "seed": options.seed}}


def hook_adapter(job: Any, events: Any, task: str, module: str) -> Any:
    """``(framework, adapter module)`` of a task that installs its own hooks (grad_probe, monitor); a
    ``CollectionResult`` with exit code 2 and one error line when the framework has no adapter."""
    from engines.runner import resolve_framework

    framework = resolve_framework(job)
    if framework not in ADAPTER_PACKAGES:
        events.emit("message", level="error", text=f"{task}: unknown framework {framework!r}")
        return CollectionResult(EXIT_BAD_INPUT,
                                {"error": f"framework: {task} supports pytorch and mindspore, not {framework}"})
    return framework, adapter_module(framework, module)


class CollectionRun:
    """One run of a job's target under a zero-code capture of its framework; see the module docstring."""

    def __init__(self, job: Any, events: Any) -> None:
        from engines.capture.summary import CaptureSummary

        self.job = job
        self.events = events
        self.target = target_of(job)
        self.framework = framework_of(job, self.target)
        self.available = self.framework in ADAPTER_PACKAGES
        self.summary = CaptureSummary()
        self.started = time.monotonic()
        self.total_steps = demo_steps(self.target)
        self.is_demo = self.total_steps is not None
        self.losses: Dict[int, Any] = {}
        self.step_details: Callable[[int], Dict[str, Any]] = lambda step: {}
        self.run_folder: Any = None  # the engine's run, named in the summary

    def describe(self) -> Dict[str, Any]:
        """The summary of what was captured so far (steps, records, size), as the CLI prints it."""
        from engines.capture.engine import summary_for_cli

        return summary_for_cli(self.summary, self.run_folder)

    def refuse(self, text: str) -> CollectionResult:
        """The framework has no adapter: one error line, exit code 2."""
        self.events.emit("message", level="error", text=text)
        return CollectionResult(EXIT_BAD_INPUT, {"error": text})

    def adapter(self, name: str) -> Any:
        return adapter_module(self.framework, name)

    def seed(self, seed: Optional[int]) -> None:
        if seed is not None:
            self.adapter("environment").seed_all(seed)

    def session_module(self, options: Any, task: str, module: str) -> Tuple[Any, Dict[str, Any], int]:
        """Seed, then ``(the adapter's session module, the store metadata of ``task``, this process's rank)``."""
        self.seed(options.seed)
        session_mod = self.adapter(module)
        meta = run_meta(self.job, self.framework, options)
        meta["run_meta"]["task"] = task
        return session_mod, meta, session_mod.detect_rank()

    def emit_step(self, step: int, loss: Optional[float] = None) -> None:
        self.losses[step] = loss
        fields: Dict[str, Any] = {"step": step, "total_steps": self.total_steps, "loss": loss,
                                  "elapsed_s": round(time.monotonic() - self.started, 3)}
        fields.update(self.step_details(step))
        self.events.emit("step", **fields)

    def on_step_end(self, step: int, _records: int) -> None:
        """The zero-code capture closed a step: its event, unless the demo reports its steps itself."""
        if not self.is_demo:
            self.emit_step(step)

    def run(self, capture: Any, on_finish: Optional[Callable[[str], None]] = None) -> Any:
        """Run the target inside ``capture``; ``on_finish(status)`` runs whatever happens."""
        from engines.targets import run_target

        status = "failed"
        try:
            with capture:
                result = run_target(self.target, framework=self.framework,
                                    on_step=self.emit_step if self.is_demo else None)
                if not result.ok and hasattr(capture, "close"):
                    capture.close("failed")  # the step the target died in is written marked partial
            status = "finished" if result.ok else "failed"
        except KeyboardInterrupt as exc:  # a stop: run.json still gets the steps and records written before it
            status = "stopped"
            try:
                exc.summary = self.describe()  # type: ignore[attr-defined]
            except Exception:
                pass
            raise
        finally:
            if on_finish is not None:
                on_finish(status)
        return result

    def sorted_losses(self) -> list:
        return [self.losses[s] for s in sorted(self.losses)]
