"""What a framework adapter provides: the modules and names the engines reach through ``TaskContext.adapter(name)``
(``engines.task.adapter_module``), stated as ``typing.Protocol`` classes. Imports no framework.

An adapter is a package ``engines/adapters/<fw>/`` (the only place its framework is imported). The task objects
(``engines/<task>/task.py``) look these modules up by name when a task is built, so a new framework provides each
module below, and a new task asks for what it needs here. ``ADAPTER_MODULES`` lists them with the names each must
hold (``tests/test_adapter_protocol.py`` checks every adapter against it).

The per-call processing of a task is its own part, plugged into the adapter's ``Session``
(``engines.capture.processor``): capture's record assembly is the session's own; overflow_check's
``OverflowProcessor`` (``engines.overflow.session``) takes the adapter's finiteness tests (``overflow_entries``);
free_benchmark's ``FreeBenchmarkProcessor`` (``engines.free_benchmark.session``) takes the adapter's
``FreeBenchmarkCall`` (a ``CallChecks``: ``engines.free_benchmark.calls``, reaching tensors only through a
``FrameworkOps``: ``engines.free_benchmark.framework``) and ``BackwardChecks``. A new task is one processor; a new
framework provides the modules below.
"""

from typing import Any, Callable, Dict, List, Optional, Protocol


class CaptureSession(Protocol):
    """A capture session (``engines.capture.session.CaptureSession`` with the framework's hooks)."""

    rank: int
    step: int

    def start(self, model: Any = None) -> None: ...

    def stop(self) -> None: ...

    def step_end(self) -> None: ...

    def arm(self) -> None:
        """Zero-code: open the step, record from its first module (cell) call on."""

    def save(self, name: str, value: Any, save_backward: bool = True) -> None: ...

    def close(self, status: str = "finished") -> Any: ...


class Environment(Protocol):
    """``<adapter>.environment``: seeding and the framework's versions for the store metadata."""

    def seed_all(self, seed: int = 1234, mode: bool = False, rm_dropout: bool = False) -> Dict[str, Any]: ...

    def seed_state(self) -> Dict[str, Any]: ...

    def describe(self) -> Dict[str, Any]: ...


class SessionModule(Protocol):
    """``<adapter>.session``: the capture session class (``Session``) of statistics and tensor."""

    Session: Callable[..., CaptureSession]

    def detect_rank(self) -> int: ...


class ZeroCodeModule(Protocol):
    """``<adapter>.zero_code``: ``ZeroCodeCapture(options, sink_factory, summary=, on_step_end=, session=)``, the
    process-wide capture of ``--run`` (steps are the framework's optimizer steps; ``engines.capture.zero_code``)."""

    ZeroCodeCapture: Callable[..., Any]


class OverflowEntriesModule(Protocol):
    """``<adapter>.overflow_entries``: overflow_check's finiteness tests, ``OverflowEntries(summary, batched=)`` (an
    ``engines.overflow.entries.OverflowEntriesBase``), and the ``requires_grad`` column of a tensor."""

    OverflowEntries: Callable[..., Any]

    def requires_grad_flag(self, t: Any) -> int: ...


class FreeBenchmarkCallModule(Protocol):
    """``<adapter>.free_benchmark_call``: ``FreeBenchmarkCall(session, fb, backward)``, the API interception that
    runs ``engines.free_benchmark.calls.CallChecks`` with the framework's ``FrameworkOps``."""

    FreeBenchmarkCall: Callable[..., Any]


class FreeBenchmarkBackwardModule(Protocol):
    """``<adapter>.free_benchmark_backward``: ``BackwardChecks(session, fb, hold_bytes)``, the backward checks."""

    BackwardChecks: Callable[..., Any]


class GradProbeModule(Protocol):
    """``<adapter>.grad_probe``: ``start_grad_probe(section, rank_dir, **kwargs)`` → a run with ``writer``, ``hook``
    and ``stop(status)``."""

    def start_grad_probe(self, section: Any, rank_dir: Any, **kwargs: Any) -> Any: ...


class MonitorModule(Protocol):
    """``<adapter>.monitor``: the monitor session class and the alert rules of a monitor section."""

    MonitorSession: Callable[..., Any]

    def alert_rules(self, section: Any) -> List[Any]: ...


class OverflowReplayModule(Protocol):
    """``<adapter>.overflow_replay``: analyze-overflow's replay of a kept call (callables only from the capture's
    own table: ``<adapter>.replay_table``)."""

    def replay(self, name: str, args_json: str, saved: Dict[str, Any], dtype: str = "float64", **kwargs: Any
               ) -> Any: ...

    def finfo_max(self, dtype_name: str) -> Optional[float]: ...


#: module name → the names it must hold, for every adapter (``optimizer_hooks`` is MindSpore's alone: torch has
#: global optimizer-step hooks of its own).
ADAPTER_MODULES: Dict[str, List[str]] = {
    "environment": ["seed_all", "seed_state", "describe"],
    "session": ["Session", "detect_rank"],
    "zero_code": ["ZeroCodeCapture"],
    "overflow_entries": ["OverflowEntries", "requires_grad_flag"],
    "free_benchmark_call": ["FreeBenchmarkCall"],
    "free_benchmark_backward": ["BackwardChecks"],
    "grad_probe": ["start_grad_probe"],
    "monitor": ["MonitorSession", "alert_rules"],
    "overflow_replay": ["replay", "finfo_max"],
}
