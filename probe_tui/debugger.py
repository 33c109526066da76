"""The in-script API, msprobe's lifecycle: ``PrecisionDebugger`` and ``seed_all``.

    from probe_tui import PrecisionDebugger
    debugger = PrecisionDebugger(config_path="config.json")
    for batch in loader:
        debugger.start(model)          # or PrecisionDebugger.start(model) from any file
        loss = model(batch).sum()
        debugger.stop()
        loss.backward()                # backward is still captured after stop()
        optimizer.step()
        debugger.step()

It writes the same run folder as ``probe-tui --run`` (``<dump_path>/<run-id>/rank<R>/``). Importing this module
imports no framework: torch is imported when a debugger is created.
"""

import atexit
import functools
import importlib
import sys
import threading
from typing import Any, Dict, Optional


class _Either:
    """A method callable on an instance or on the class (then on the debugger created last), as in msprobe."""

    def __init__(self, func) -> None:
        self.func = func
        functools.update_wrapper(self, func)

    def __get__(self, obj, cls):
        if obj is None:
            obj = cls._current
            if obj is None:
                raise RuntimeError("probe-tui: create PrecisionDebugger(config_path=...) before calling %s()"
                                   % self.func.__name__)
        return functools.partial(self.func, obj)


def _load_job(config_path: Optional[str], overrides: Dict[str, Any]):
    from schemas import load_config

    if config_path is not None:
        job = load_config(config_path)
        if not overrides:
            return job
        from schemas import dump_config

        data = dump_config(job)
    else:
        data = {"task": overrides.get("task") or "statistics"}
    data.update(overrides)
    task = data.get("task")
    if task not in ("statistics", "tensor"):
        raise ValueError("task: PrecisionDebugger captures statistics or tensor, not %r" % (task,))
    return load_config(data)


def _with_rank_env(job):
    """``PROBE_TUI_RANKS`` limits the writing ranks when the config's ``rank`` is empty (as under ``--run``)."""
    from engines.launch import apply_rank_env

    return apply_rank_env(job)


class PrecisionDebugger:
    """Capture statistics or tensors from inside a training script (msprobe's ``PrecisionDebugger``)."""

    _current: Optional["PrecisionDebugger"] = None
    _lock = threading.Lock()

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None, step: Optional[list] = None,
                 model: Any = None) -> None:
        overrides: Dict[str, Any] = {}
        if task is not None:
            overrides["task"] = task
        if dump_path is not None:
            overrides["dump_path"] = dump_path
        if level is not None:
            overrides["level"] = level
        if step is not None:
            overrides["step"] = step
        self.job = _with_rank_env(_load_job(config_path, overrides))
        from engines.capture.options import CaptureOptions

        self.options = CaptureOptions.from_job(self.job)
        self._model = model
        self._closed = False
        self._open_session()
        with PrecisionDebugger._lock:
            PrecisionDebugger._current = self
        atexit.register(self.close)

    def _open_session(self) -> None:
        self.framework = _framework_of(self.job, self._model)
        from engines.capture.engine import run_meta, summary_for_cli
        from engines.capture.sink import dump_sink_factory
        from engines.capture.summary import CaptureSummary
        from engines.runs import create_run
        from schemas import dump_config

        self._summary_for_cli = summary_for_cli
        self.run = create_run(self.options.dump_path, task=self.options.task, config=dump_config(self.job),
                              framework=self.framework)
        self.summary = CaptureSummary()
        seed_state = importlib.import_module("engines.adapters.%s.environment" % (
            "mindspore" if self.framework == "mindspore" else "torch")).seed_state
        if seed_state() and self.run.owner:
            self.run.update(seed_all=seed_state())
        meta = run_meta(self.job, self.framework, self.options)
        sinks = dump_sink_factory(self.run.rank_dir, self.options, meta, self.summary)
        self.session = _session_class(self.framework)(self.options, sinks, summary=self.summary)
        print("probe-tui: %s %s capture to %s" % (self.options.task, self.options.level, self.run.path),
              file=sys.stderr)

    @property
    def run_dir(self):
        return self.run.path

    # -- msprobe's lifecycle ---------------------------------------------------------------------------------
    @_Either
    def start(self, model: Any = None) -> None:
        """Capture from here (the model enables module-level records at L0/mix; the root itself is not recorded)."""
        self.session.start(model if model is not None else self._model)

    @_Either
    def stop(self) -> None:
        """Stop forward capture; backward hooks of this step stay active until ``step()``."""
        self.session.stop()

    @_Either
    def forward_backward_dump_end(self) -> None:
        self.session.stop()

    @_Either
    def step(self) -> None:
        """End the step: write it (committed, readable even if the process dies later) and count on."""
        self.session.step_end()

    @_Either
    def save(self, *args: Any, save_backward: bool = True, **kwargs: Any) -> None:
        """``save(name, tensor)`` (or msprobe's ``save(variable, name)``): record a value under ``{name}.{N}.debug``
        and, when it requires grad, its gradient under ``{name}_grad.{N}.debug``."""
        name, value = _save_args(args, kwargs)
        self.session.save(name, value, save_backward=save_backward)

    def close(self) -> Dict[str, Any]:
        """Write what is left and mark the run finished (also runs at interpreter exit)."""
        if self._closed:
            return {}
        self._closed = True
        try:
            atexit.unregister(self.close)
        except Exception:
            pass
        summary = self.session.close("finished")
        out = self._summary_for_cli(summary, self.run)
        try:
            if self.run.owner:  # the other ranks of a launch joined this run: run.json has one writer
                self.run.finish(status="finished", exit_code=0, summary=out)
        except Exception:
            pass
        if PrecisionDebugger._current is self:
            PrecisionDebugger._current = None
        return out


def _framework_of(job: Any, model: Any) -> str:
    """The job's framework; for ``auto``, the model's, else the one the script imported (torch if both)."""
    framework = getattr(job, "framework", "auto") if job is not None else "auto"
    if framework in ("pytorch", "mindspore"):
        return framework
    if model is not None and type(model).__module__.split(".")[0] == "mindspore":
        return "mindspore"
    if model is not None:
        for cls in type(model).__mro__:
            if cls.__module__.startswith("mindspore."):
                return "mindspore"
    if "mindspore" in sys.modules and "torch" not in sys.modules:
        return "mindspore"
    return "pytorch"


def _session_class(framework: str):
    if framework == "mindspore":
        from engines.adapters.mindspore.session import MindSporeCaptureSession

        return MindSporeCaptureSession
    from engines.adapters.torch.session import TorchCaptureSession

    return TorchCaptureSession


def _save_args(args: tuple, kwargs: Dict[str, Any]):
    name = kwargs.pop("name", None)
    value = kwargs.pop("tensor", kwargs.pop("variable", None))
    rest = list(args)
    if rest and isinstance(rest[0], str) and name is None:
        name = rest.pop(0)
    if rest and value is None:
        value = rest.pop(0)
    if rest and name is None and isinstance(rest[0], str):
        name = rest.pop(0)
    if name is None:
        raise TypeError("save(name, tensor): the name is missing")
    return name, value


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> Dict[str, Any]:
    """Seed every generator (and enable deterministic kernels with ``mode``, dropout off with ``rm_dropout``);
    the settings are recorded in the run metadata of every run started afterwards."""
    package = "mindspore" if _framework_of(None, None) == "mindspore" else "torch"
    _seed_all = importlib.import_module("engines.adapters.%s.environment" % package).seed_all
    state = _seed_all(seed, mode=mode, rm_dropout=rm_dropout)
    current = PrecisionDebugger._current
    if current is not None and current.run.owner:
        try:
            current.run.update(seed_all=state)
        except Exception:
            pass
    return state
