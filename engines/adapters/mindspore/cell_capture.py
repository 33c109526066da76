"""L0 for MindSpore: cell forward/backward records and parameter gradients.

MindSpore has per-cell hooks only (no process-wide ones like torch's ``register_module_forward_pre_hook``), and
its ``register_backward_hook`` inserts an identity op into every hooked cell's inputs and outputs. So the forward
side is one wrapper of ``nn.Cell.__call__``, installed while a session runs and removed when it stops: it sees
every cell of the process, which the zero-code path needs (it has no model handle) and which names cells the
model built on the fly. The backward side observes the autograd graph like L1 (``backward_capture``: nothing
inserted). Parameter gradients come from a tensor hook on each parameter, which returns the gradient unchanged.

Naming, the forward stack and the records are framework-neutral (``engines.capture.modules``, shared with
PyTorch); a cell is named by its path in its root. Names follow msprobe's MindSpore form:
``Cell.{path}.{Class}.forward.{N}``, ``Cell.{path}.{Class}.backward.{N}``, ``Cell.{path}.{Class}.parameters_grad.{K}``.
"""

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from mindspore import nn

from engines.adapters.mindspore import flatten
from engines.adapters.mindspore.api_capture import CURRENT
from engines.adapters.mindspore.backward_capture import attach, input_edge
from engines.adapters.mindspore.graph_detect import (
    JIT_FUNCTION,
    graph_reason,
    in_graph_mode,
    install_jit_watch,
    jit_target,
)
from engines.capture import naming
from engines.capture.backward import PendingBackward
from engines.capture.modules import ModuleFrame, ModuleTree

PREFIX_CELL = naming.PREFIX_CELL
# Training wrappers: a level in the cell tree without computation of its own; their path components
# (``network``, ``_backbone``) are dropped so names match the bare model's.
_WRAPPER_CLASSES = frozenset(("TrainOneStepCell", "TrainOneStepWithLossScaleCell", "WithLossCell", "WithGradCell",
                              "WithEvalCell", "_VirtualDatasetCell", "DataWrapper", "GradAccumulationCell",
                              "PipelineCell", "MicroBatchInterleaved", "_TrainGradAccuStepCell"))
_WRAPPER_COMPONENTS = frozenset(("network", "_backbone", "_network"))

_ORIGINAL_CALL = nn.Cell.__call__


def cell_record_name(path: str, cls: str, index: int, direction: str = naming.FORWARD) -> str:
    return "%s.%s.%s.%s.%d" % (PREFIX_CELL, path, cls, direction, index)


def cell_param_grad_name(path: str, cls: str, index: int) -> str:
    return "%s.%s.%s.parameters_grad.%d" % (PREFIX_CELL, path, cls, index)


def _call(cell: Any, *args: Any, **kwargs: Any) -> Any:
    """``nn.Cell.__call__`` while a session runs (see the module docstring)."""
    s = CURRENT.session
    if s is None or s.busy_depth:
        return _ORIGINAL_CALL(cell, *args, **kwargs)
    compiled = graph_reason(cell)
    if compiled is not None:
        return _call_compiled(s, cell, compiled, args, kwargs)
    if not s.running:
        if not s.armed:
            return _ORIGINAL_CALL(cell, *args, **kwargs)
        s.resume()  # zero-code: the step's first cell call opens the step
    cells = s.modules
    frame = cells.enter(cell, args, kwargs)
    try:
        out = _ORIGINAL_CALL(cell, *args, **kwargs)
    except BaseException:
        cells.pop(frame)
        raise
    cells.exit(frame, kwargs, out)
    return out


def _call_compiled(s: Any, cell: Any, reason: str, args: tuple, kwargs: Dict[str, Any]) -> Any:
    """A cell that runs as a graph (graph_detect): called untouched, nothing recorded inside, named in the notes.

    Optimizers are left out of the notes: their update is not the model's computation (the demo's AdamW is jit).
    """
    if not _is_optimizer(cell):
        s.not_captured("cell %s and everything it calls" % type(cell).__name__, reason)
    s.busy_depth += 1
    try:
        return _ORIGINAL_CALL(cell, *args, **kwargs)
    finally:
        s.busy_depth -= 1


_call.__wrapped__ = _ORIGINAL_CALL  # type: ignore[attr-defined]


def _jit_called(executor: Any) -> None:
    """A compiled call made outside any cell the capture wraps (a jitted function calling the model,
    ``ms.jit(cell)`` called directly): named in the notes (graph_detect)."""
    s = CURRENT.session
    if s is None or s.busy_depth or in_graph_mode():
        return  # inside a compiled cell already named, or a GRAPH_MODE run (named at its cell)
    what = jit_target(executor)
    if what is not None:
        s.not_captured(what, JIT_FUNCTION)


class CellCapture(ModuleTree):
    prefix = PREFIX_CELL
    walkers = flatten.WALKERS
    fresh_param_grads = True

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.installed = False
        self._unwatch: Optional[Callable[[], None]] = None

    # -- installation ----------------------------------------------------------------------------------------
    def install(self) -> None:
        if not self.installed:
            nn.Cell.__call__ = _call
            self.installed = True
        if self._unwatch is None:
            self._unwatch = install_jit_watch(_jit_called)

    def uninstall(self) -> None:
        if self.installed:
            nn.Cell.__call__ = _ORIGINAL_CALL
            self.installed = False
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self.frames = []

    # -- what the neutral tree asks ----------------------------------------------------------------------------
    def _accepts_root(self, root: Any) -> bool:
        return isinstance(root, nn.Cell) and not _is_optimizer(root)

    def _named_subtree(self, root: Any) -> Iterable[Tuple[Any, Optional[str]]]:
        wrapped_root = type(root).__name__ in _WRAPPER_CLASSES
        for path, sub in root.cells_and_names():
            if sub is root or not path or self._known(sub):
                continue
            if type(sub).__name__ in _WRAPPER_CLASSES:
                yield sub, None
                continue
            parts = path.split(".")
            if wrapped_root:
                parts = [p for p in parts if p not in _WRAPPER_COMPONENTS]
            yield sub, ".".join(parts)

    def _parameters(self, cell: Any) -> Dict[str, Any]:
        return getattr(cell, "_params", {})

    def input_edge(self, slot: str, t: Any) -> Any:
        return input_edge(slot, t)

    def _attach(self, pending: PendingBackward, frame: ModuleFrame, outputs: List, want_inputs: bool,
                want_outputs: bool) -> bool:
        return attach(pending, frame.edges, outputs, want_inputs=want_inputs, want_outputs=want_outputs)

    def record_name(self, path: str, cls: str, index: int) -> str:
        return cell_record_name(path, cls, index)

    def param_grad_name(self, path: str, cls: str, index: int) -> str:
        return cell_param_grad_name(path, cls, index)

    # -- forward ---------------------------------------------------------------------------------------------
    def enter(self, cell: Any, args: tuple, kwargs: Dict[str, Any],
              named: Optional[Tuple[str, str]] = None) -> ModuleFrame:
        s = self.session
        s.busy_depth += 1
        try:
            return super().enter(cell, args, kwargs, named)
        except Exception as exc:
            s.summary.failed("forward of %s" % type(cell).__name__, exc)
            frame = ModuleFrame(cell, "", False)
            self.frames.append(frame)
            return frame
        finally:
            s.busy_depth -= 1

    def pop(self, frame: ModuleFrame) -> None:
        frames = self.frames
        for i in range(len(frames) - 1, -1, -1):
            if frames[i] is frame:
                del frames[i:]
                return

    def exit(self, frame: ModuleFrame, kwargs: Dict[str, Any], output: Any) -> None:
        """``kwargs`` were recorded at ``enter`` (the wrapper sees them there)."""
        self.pop(frame)
        if frame.name == "" or (frame.record < 0 and not frame.want_bwd):
            return
        s = self.session
        s.busy_depth += 1
        try:
            super().exit(frame, {}, output)
        except Exception as exc:
            s.summary.failed("forward of %s" % frame.name, exc)
            if frame.record >= 0:
                s.buffer.flag_record(frame.record, naming.FLAG_PARTIAL)
        finally:
            s.busy_depth -= 1

    # -- parameter gradients ---------------------------------------------------------------------------------
    def _hook_params(self, cell: Any, path: str, cls: str) -> None:
        for pname, p in getattr(cell, "_params", {}).items():
            if p is None or not getattr(p, "requires_grad", True):
                continue
            if self._own_param(p, path, cls, pname):
                self.param_handles[id(p)] = p.register_hook(self._grad_hook(id(p)))

    def _grad_hook(self, key: int) -> Callable[[Any], Any]:
        def hook(grad: Any) -> Any:
            s = self.session
            if not s.backward_open():
                return grad
            s.busy_depth += 1
            try:
                self.param_grad(key, grad)
            except Exception as exc:  # never break training
                s.summary.failed("parameter-gradient hook", exc)
            finally:
                s.busy_depth -= 1
            return grad

        return hook


def _is_optimizer(cell: Any) -> bool:
    return any(c.__name__ == "Optimizer" for c in type(cell).__mro__)
