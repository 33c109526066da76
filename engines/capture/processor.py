"""A task's per-call processing, a part plugged into a framework's capture session.

The capture session (``engines.capture.session`` + the adapter's subclass) intercepts calls, names them, filters
them and assembles records; what happens to each call's tensors is the task's. statistics and tensor keep the
session's own processing (statistics on the device, the step handed to the sink): ``CallProcessor`` itself, which
changes nothing. overflow_check (``engines.overflow.session.OverflowProcessor``) tests finiteness and keeps only
the flagged calls; free_benchmark (``engines.free_benchmark.session.FreeBenchmarkProcessor``) re-runs each call
perturbed. A processor is framework-neutral: what touches tensors comes in from the adapter (its
``OverflowEntries``, its ``FreeBenchmarkCall``), so a new task is one processor and a new framework one adapter.

``session.plug(processor)`` joins them. The hot-path hooks ``add_row`` and ``record_done`` are bound over the
session's own when the processor defines them (no extra call per tensor); the others are called at the points of
the session's lifecycle their names say.
"""

from typing import Any, Optional


class CallProcessor:
    """The hooks a task may define; each default leaves the session's behaviour as it is."""

    #: the names a subclass may define to replace the session's method of that name on the hot path
    HOT_PATH = ("add_row", "record_done")

    #: the ``engines.capture.session.CaptureSession`` it is plugged into (typed by the subclasses, which import it:
    #: the session module imports this one)
    session: Any

    def attach(self, session: Any) -> None:
        """Called once by ``session.plug`` after the adapter's session is built."""
        self.session = session

    def may_start(self) -> bool:
        """False: ``start()`` does nothing (the task is done for good)."""
        return True

    def backward_open(self) -> bool:
        """False closes the backward hooks too (they need only the step to be open otherwise)."""
        return True

    def before_flush(self) -> None:
        """Before the step's records go to the sink (the processor may replace ``session.buffer``)."""

    def after_flush(self) -> None:
        """After the step went to the sink."""

    def before_step_end(self) -> None: ...

    def after_step_end(self) -> None: ...

    def before_close(self) -> None: ...


def hot_path_overrides(processor: CallProcessor) -> "list[tuple[str, Any]]":
    """``(name, bound method)`` of each hot-path hook ``processor``'s class defines."""
    out = []
    for name in CallProcessor.HOT_PATH:
        method: Optional[Any] = getattr(type(processor), name, None)
        if method is not None:
            out.append((name, getattr(processor, name)))
    return out
