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

The same loop runs every task msprobe drives this way: ``statistics``, ``tensor``, ``overflow_check`` and
``free_benchmark``. ``grad_probe`` is msprobe's ``PrecisionDebugger(config).monitor(model)`` (on MindSpore
``monitor(optimizer)``): steps are the optimizer's, and start/stop/step do nothing. Each call is forwarded to the
task's object, built by ``engines/<task>/task.py`` exactly as ``probe-tui --run`` builds it (``engines.task``).

It writes the same run folder as ``probe-tui --run`` (``<dump_path>/<run-id>/rank<R>/``, one folder for every rank
of a launch) and the same stores; ``close()`` (or interpreter exit) finishes ``run.json`` and returns the summary.
A bad task or config raises before anything is written. Importing this module imports no framework: the
framework's adapter is imported when a debugger is created.
"""

import atexit
import functools
import importlib
import sys
import threading
from typing import Any, Dict, List, Optional, Tuple

IN_SCRIPT_TASKS = ("statistics", "tensor", "overflow_check", "free_benchmark", "grad_probe", "config_check")
_EXIT_CODES = {"finished": 0, "failed": 1, "stopped": 130}  # run.json's exit_code, as --run records it


class _Either:
    """A method callable on an instance or on the class (then on the debugger created last), as in msprobe."""

    def __init__(self, func) -> None:
        self.func = func
        functools.update_wrapper(self, func)

    def __get__(self, obj, cls):
        if obj is None:
            obj = cls._current
            if obj is None:
                if cls.class_calls_without_debugger == "ignore":  # msprobe 26's: nothing to do, said once
                    return functools.partial(_ignored_call, cls, self.func.__name__)
                raise RuntimeError("probe-tui: create PrecisionDebugger(config_path=...) before calling %s()"
                                   % self.func.__name__)
        return functools.partial(self.func, obj)


_ignored_calls: set = set()


def _ignored_call(cls: type, name: str, *args: Any, **kwargs: Any) -> None:
    """``PrecisionDebugger.start()`` and kin called on the class before any debugger exists (a script that builds
    its debugger only when asked to dump): nothing is recorded; said once per call name."""
    if name not in _ignored_calls:
        _ignored_calls.add(name)
        say("PrecisionDebugger.%s() called before any PrecisionDebugger was created: ignored" % name)


def _load_job(config_path: Optional[str], overrides: Dict[str, Any]):
    """The validated job: the config file (or statistics defaults) with the constructor's arguments on top.
    Raises ``ConfigError`` (a bad field) or ``ValueError`` (a task this API does not run); the config's warnings
    (msprobe keys we do not use) are given once each, for a task it runs."""
    from schemas import load_config

    notes: List[Tuple[str, str]] = []

    def collect(path: str, message: str) -> None:
        if (path, message) not in notes:
            notes.append((path, message))

    if config_path is not None:
        job = load_config(config_path, on_warning=collect)
        if overrides:
            from schemas import dump_config

            data = dump_config(job)
            data.update(overrides)
            job = load_config(data, on_warning=collect)
    else:
        data = {"task": "statistics"}
        data.update(overrides)
        job = load_config(data, on_warning=collect)
    task = getattr(job, "task", None)
    if task not in IN_SCRIPT_TASKS:
        hint = " (the monitor's in-script entry is probe_tui.start_monitor(model, optimizer, config))" \
            if task == "monitor" else ""
        raise ValueError("task: PrecisionDebugger runs %s, not %r%s" % (", ".join(IN_SCRIPT_TASKS), task, hint))
    if notes:
        import warnings

        from schemas import ConfigWarning

        for path, message in notes:
            warnings.warn("%s: %s" % (path, message) if path else message, ConfigWarning, stacklevel=3)
    return _with_rank_env(job)


def _with_rank_env(job):
    """``PROBE_TUI_RANKS`` limits the writing ranks when the config's ``rank`` is empty (as under ``--run``)."""
    from engines.launch import apply_rank_env

    return apply_rank_env(job)


def say(text: str) -> None:
    """One line for the person running the script (stderr, as msprobe's log lines)."""
    print("probe-tui: " + text, file=sys.stderr)


def _say(level: str, text: str) -> None:
    say(text)


def adapter(framework: str, module: str):
    """``engines.adapters.<torch|mindspore>.<module>``, imported now."""
    from engines.task import ADAPTER_PACKAGES

    return importlib.import_module("%s.%s" % (ADAPTER_PACKAGES[framework], module))


def _headline(task: str, summary: Dict[str, Any]) -> str:
    """The line printed when the run closes."""
    if task in ("statistics", "tensor"):
        from probe_tui.formatting import format_bytes

        return "%s records in %d step%s, %s" % (summary.get("records", 0), summary.get("steps_written", 0),
                                                "" if summary.get("steps_written") == 1 else "s",
                                                format_bytes(summary.get("size_bytes", 0)))
    if task == "grad_probe" and "steps_recorded" in summary and "rank" in summary:
        return "%d steps of gradients, %d parameter rows (%s)" % (
            summary["steps_recorded"], summary["parameter_rows"], summary.get("grad_level"))
    return str(summary.get("verdict", ""))


class PrecisionDebugger:
    """Run a collection task from inside a training script (msprobe's ``PrecisionDebugger``)."""

    _current: Optional["PrecisionDebugger"] = None
    _lock = threading.Lock()
    default_framework: Optional[str] = None  # the framework when the job and model do not say (compat imports)
    # a class call (PrecisionDebugger.start()) with no debugger created: "raise" (msprobe 8.x) or "ignore" (26.x)
    class_calls_without_debugger = "raise"

    def __init__(self, config_path: Optional[str] = None, task: Optional[str] = None,
                 dump_path: Optional[str] = None, level: Optional[str] = None, step: Optional[list] = None,
                 model: Any = None) -> None:
        if self.__dict__.get("_ready"):  # the instance an msprobe-style singleton handed back (probe_tui.compat)
            return
        if step is not None and model is None and not isinstance(step, (list, tuple)):
            model, step = step, None  # msprobe 8.x's order: (config_path, task, dump_path, level, model, step)
        overrides: Dict[str, Any] = {}
        if task is not None:
            overrides["task"] = task
        if dump_path is not None:
            overrides["dump_path"] = dump_path
        if level is not None:
            overrides["level"] = level
        if step is not None:
            overrides["step"] = step
        self.job = _load_job(config_path, overrides)
        self.task = self.job.task
        self._model = model
        self._closed = False
        self._open()
        with PrecisionDebugger._lock:
            PrecisionDebugger._current = self
        # h5py registers its library's shutdown when first imported; first imported inside our exit handler (a
        # script that never calls step(): the store opens there), the interpreter crashes at its end. Imported
        # now, its shutdown runs after our handler.
        importlib.import_module("h5py")
        atexit.register(self._close_at_exit)
        self._ready = True

    def _open(self) -> None:
        from engines import registry
        from engines.run_ranks import RankLifecycle
        from engines.runs import create_run
        from engines.steps import StepReporter
        from engines.task import resolve

        self.framework = _framework_of(self.job, self._model, self.default_framework)
        if getattr(self.job, "level", None) == "L2":  # msprobe configs load with L2; nothing runs it (no run folder)
            from schemas.common import l2_message

            raise ValueError("level: " + l2_message(self.framework))
        ctx = resolve(self.job, self.framework, with_target=False)  # the script is the target
        task_class = registry.task_class(self.task)
        try:  # the framework is importable: fail before anything is written
            environment = adapter(self.framework, "environment")
        except ImportError as exc:
            raise ValueError("framework: %s cannot be imported here (%s)" % (self.framework, exc)) from None
        self.run = create_run(self.job.dump_path, task=self.task, config=ctx.config, framework=self.framework)
        self._ranks = RankLifecycle(self.run, getattr(self.job, "rank", None) or ())
        try:
            if environment.seed_state() and self.run.owner:
                self.run.update(seed_all=environment.seed_state())
            self.runner = task_class(ctx, self.run, StepReporter(), _say)
        except BaseException as exc:
            if self.run.owner:
                self.run.finish(status="failed", exit_code=2, summary={"error": "%s: %s" % (type(exc).__name__,
                                                                                             exc)})
            raise
        level = getattr(self.job, "level", None)
        say("%s%s run in %s" % (self.task, " (%s)" % level if level and self.task != "grad_probe" else "",
                                self.run.path))

    @property
    def run_dir(self):
        return self.run.path

    # -- msprobe's lifecycle ---------------------------------------------------------------------------------
    @_Either
    def start(self, model: Any = None, token_range: Optional[List[int]] = None,
              rank_id: Optional[int] = None) -> None:
        """Capture from here (the model enables module-level records at L0/mix; the root itself is not recorded).
        ``token_range=[a, b]``: only the model's calls a..b (counted from 0 at each start, both included) are
        recorded (an inference loop: one call per token); ``rank_id``: write as this rank (msprobe's)."""
        from engines.capture.script_controls import check_rank_id, check_token_range

        model = model if model is not None else self._model
        tokens = check_token_range(token_range)
        rank = check_rank_id(rank_id)
        if tokens is None and rank is None:
            self.runner.start(model)
            return
        if tokens is not None and model is None:
            raise ValueError("token_range: start(model=..., token_range=...) needs the model whose calls count "
                             "the tokens")
        self._control("start(token_range=..., rank_id=...)").start(model, token_range=tokens, rank_id=rank)

    @_Either
    def stop(self) -> None:
        """Stop forward capture; backward hooks of this step stay active until ``step()``."""
        self.runner.stop()

    @_Either
    def forward_backward_dump_end(self) -> None:
        self.runner.stop()

    @_Either
    def step(self) -> None:
        """End the step: write it (committed, readable even if the process dies later) and count on."""
        self.runner.step()

    @_Either
    def save(self, *args: Any, save_backward: bool = True, **kwargs: Any) -> None:
        """``save(name, tensor)`` (or msprobe's ``save(variable, name)``): record a value under ``{name}.{N}.debug``
        and, when it requires grad, its gradient under ``{name}_grad.{N}.debug``."""
        name, value = _save_args(args, kwargs)
        self.runner.save(name, value, save_backward=save_backward)

    @_Either
    def set_init_step(self, step: int) -> None:
        """Number the steps from ``step`` (the config's ``step`` list counts the same way); before the loop."""
        self._control("set_init_step").set_init_step(step)

    @_Either
    def register_custom_api(self, module: Any, api: Optional[str] = None, api_prefix: Optional[str] = None,
                            **kwargs: Any) -> None:
        """Record each call of ``module.api`` as one API record ``{api_prefix}.{api}.{N}.forward`` (the prefix
        defaults to the module's name), as msprobe's ``register_custom_api`` (``api_name=`` is taken too)."""
        api = api if api is not None else kwargs.pop("api_name", None)
        if kwargs:
            raise TypeError("register_custom_api: unexpected argument %s" % ", ".join(sorted(kwargs)))
        self._control("register_custom_api").register_custom_api(module, api, api_prefix)

    @_Either
    def restore_custom_api(self, module: Any, api: Optional[str] = None, **kwargs: Any) -> None:
        """Put back what ``register_custom_api`` wrapped."""
        api = api if api is not None else kwargs.pop("api_name", None)
        self._control("restore_custom_api").restore_custom_api(module, api)

    @_Either
    def module_dump(self, module: Any, name: str) -> None:
        """Until ``module_dump_end()``, record only ``module``'s own calls, as ``Module.{name}.{Class}.forward.{N}``
        and its backward (nothing inside it, nothing else in the window)."""
        self._control("module_dump").module_dump(module, name)

    @_Either
    def module_dump_end(self) -> None:
        self._control("module_dump_end").module_dump_end()

    def _control(self, what: str) -> Any:
        """The task object, when it has msprobe's finer capture controls (the capture-session tasks)."""
        if not hasattr(self.runner, "module_dump"):
            raise ValueError("%s: available in statistics, tensor, overflow_check and free_benchmark runs; this "
                             "one is %s" % (what, self.task))
        return self.runner

    @_Either
    def monitor(self, model: Any) -> None:
        """grad_probe: record every parameter's gradient at each optimizer step from now on (msprobe's
        ``monitor(model)``; on MindSpore, ``monitor(optimizer)``)."""
        self.runner.monitor(model)

    def close(self, status: str = "finished") -> Dict[str, Any]:
        """Write what is left, mark the run finished and return its summary (runs at interpreter exit too)."""
        if self._closed:
            return {}
        self._closed = True
        try:
            atexit.unregister(self._close_at_exit)
        except Exception:
            pass
        out = self.runner.close(status)
        try:
            code = _EXIT_CODES.get(status, 1)
            self._ranks.end(status, code, out, self.runner.steps or None)
            if self.run.owner:  # the other ranks of a launch joined this run: run.json has one writer
                # no wait here: the other ranks may still be training; readers recompute the totals later
                launch = self._ranks.settle(0.0)
                if self.runner.steps and "steps" not in launch:
                    launch["steps"] = self.runner.steps
                self.run.finish(status=status, exit_code=code, summary=out, **launch)
        except Exception:
            pass
        if PrecisionDebugger._current is self:
            PrecisionDebugger._current = None
        say("%s %s: %s (%s)" % (self.task, status, _headline(self.task, out), self.run.path))
        return out

    def _close_at_exit(self) -> None:
        """At interpreter exit: ``failed`` when the script ended on an uncaught exception (``stopped`` for ^C)."""
        last = getattr(sys, "last_value", None)
        if last is None:
            status = "finished"
        else:
            status = "stopped" if isinstance(last, KeyboardInterrupt) else "failed"
        self.close(status)


def _framework_of(job: Any, model: Any, default: Optional[str] = None) -> str:
    """The job's framework; for ``auto``, the model's, else ``default`` (the one an msprobe stand-in import
    names), else the one the script imported (torch if both)."""
    framework = getattr(job, "framework", "auto") if job is not None else "auto"
    if framework in ("pytorch", "mindspore"):
        return framework
    if default is not None and model is None:
        return default
    if model is not None and type(model).__module__.split(".")[0] == "mindspore":
        return "mindspore"
    if model is not None:
        for cls in type(model).__mro__:
            if cls.__module__.startswith("mindspore."):
                return "mindspore"
    if "mindspore" in sys.modules and "torch" not in sys.modules:
        return "mindspore"
    return "pytorch"


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


def module_dump(module: Any, name: str) -> None:
    """msprobe's module-level ``module_dump(module, name)``, on the debugger created last."""
    PrecisionDebugger.module_dump(module, name)


def module_dump_end() -> None:
    PrecisionDebugger.module_dump_end()


def seed_all(seed: int = 1234, mode: bool = False, rm_dropout: bool = False,
             is_enhanced: bool = False, *, framework: Optional[str] = None) -> Dict[str, Any]:
    """Seed every generator (and enable deterministic kernels with ``mode``, dropout off with ``rm_dropout``);
    the settings are recorded in the run metadata of every run started afterwards. msprobe 26's ``is_enhanced``
    (re-seeding before every random call) is not done: said once, the rest applies."""
    if is_enhanced:
        say("warning: seed_all(is_enhanced=True) is not supported; seeds are set once (docs/MSPROBE.md)")
    state = adapter(framework or _framework_of(None, None), "environment").seed_all(seed, mode=mode,
                                                                                    rm_dropout=rm_dropout)
    current = PrecisionDebugger._current
    if current is not None and current.run.owner:
        try:
            current.run.update(seed_all=state)
        except Exception:
            pass
    return state
