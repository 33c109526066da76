"""L0 for MindSpore: cell forward/backward records and parameter gradients.

MindSpore has per-cell hooks only (no process-wide ones like torch's ``register_module_forward_pre_hook``), and
its ``register_backward_hook`` inserts an identity op into every hooked cell's inputs and outputs. So the forward
side is one wrapper of ``nn.Cell.__call__``, installed while a session runs and removed when it stops: it sees
every cell of the process, which the zero-code path needs (it has no model handle) and which names cells the
model built on the fly. The backward side observes the autograd graph like L1 (``backward_capture``: nothing
inserted). Parameter gradients come from a tensor hook on each parameter, which returns the gradient unchanged.

A cell is named by its path in its root: the model passed to ``start(model)``, or else the outermost cell called
(its children are recorded, the root itself is not, as in msprobe). Names follow msprobe's MindSpore form:
``Cell.{path}.{Class}.forward.{N}``, ``Cell.{path}.{Class}.backward.{N}``, ``Cell.{path}.{Class}.parameters_grad.{K}``.
"""

import weakref
from typing import Any, Dict, List, Optional, Tuple

from mindspore import nn

from engines.adapters.mindspore import flatten
from engines.adapters.mindspore.api_capture import CURRENT
from engines.adapters.mindspore.backward_capture import PendingBackward, attach, input_edge
from engines.capture import naming

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


def _call(cell, *args, **kwargs):
    """``nn.Cell.__call__`` while a session runs (see the module docstring)."""
    s = CURRENT.session
    if s is None or s.busy_depth:
        return _ORIGINAL_CALL(cell, *args, **kwargs)
    if not s.running:
        if not s.armed:
            return _ORIGINAL_CALL(cell, *args, **kwargs)
        s.running = True  # zero-code: the step's first cell call opens the step
    cells = s.cells
    frame = cells.enter(cell, args, kwargs)
    try:
        out = _ORIGINAL_CALL(cell, *args, **kwargs)
    except BaseException:
        cells.pop(frame)
        raise
    cells.exit(frame, kwargs, out)
    return out


_call.__wrapped__ = _ORIGINAL_CALL  # type: ignore[attr-defined]


class CellFrame:
    """One active cell call on the forward stack."""

    __slots__ = ("cell", "name", "listed", "record", "edges", "want_bwd", "stack", "parent", "save")

    def __init__(self, cell: Any, name: str, listed: bool) -> None:
        self.cell = cell
        self.name = name
        self.listed = listed
        self.record = -1
        self.edges: List = []
        self.want_bwd = False
        self.stack = -1
        self.parent = ""
        self.save = False


class CellCapture:
    def __init__(self, session: Any) -> None:
        self.session = session
        # id(cell) -> (weak reference, (path, class) or None for roots and wrappers)
        self.names: Dict[int, Tuple[weakref.ref, Optional[Tuple[str, str]]]] = {}
        self.roots: List[weakref.ref] = []
        self.frames: List[CellFrame] = []
        self.installed = False
        self.param_owners: Dict[int, List[Tuple[str, str, str]]] = {}  # id(param) -> [(path, cls, name)]
        self.param_handles: Dict[int, Any] = {}
        self.param_rounds: Dict[Tuple[str, str], List[Any]] = {}
        self.new_modules: List[Tuple[str, str, str]] = []

    # -- installation ----------------------------------------------------------------------------------------
    def install(self) -> None:
        if not self.installed:
            nn.Cell.__call__ = _call
            self.installed = True

    def uninstall(self) -> None:
        if self.installed:
            nn.Cell.__call__ = _ORIGINAL_CALL
            self.installed = False
        self.frames = []

    def remove_param_hooks(self) -> None:
        for h in self.param_handles.values():
            try:
                h.remove()
            except Exception:
                pass
        self.param_handles = {}

    # -- naming ----------------------------------------------------------------------------------------------
    def add_root(self, model: Any) -> None:
        if isinstance(model, (list, tuple)):
            for i, m in enumerate(model):
                self._register_root(m, "%d." % i)
            return
        self._register_root(model, "")

    def _register_root(self, root: Any, prefix: str) -> None:
        if not isinstance(root, nn.Cell) or self._known(root) or _is_optimizer(root):
            return
        if not prefix and self.roots:
            prefix = "%d." % len(self.roots)
        self.roots.append(weakref.ref(root))
        wrapped_root = type(root).__name__ in _WRAPPER_CLASSES
        self._set(root, None)
        for path, sub in root.cells_and_names():
            if sub is root or not path:
                continue
            cls = type(sub).__name__
            parts = path.split(".")
            if wrapped_root:
                parts = [p for p in parts if p not in _WRAPPER_COMPONENTS]
            clean = ".".join(parts)
            if cls in _WRAPPER_CLASSES or not clean or self._known(sub):
                if not self._known(sub):
                    self._set(sub, None)
                continue
            full = prefix + clean
            self._set(sub, (full, cls))
            parent_path = full.rpartition(".")[0] if "." in clean else prefix.rstrip(".")
            self.new_modules.append((full, cls, parent_path))
            s = self.session
            if s.options.module_level and s.filter.data_mode.param_grads:
                self._hook_params(sub, full, cls)

    def _known(self, cell: Any) -> bool:
        entry = self.names.get(id(cell))
        return entry is not None and entry[0]() is cell

    def _set(self, cell: Any, info: Optional[Tuple[str, str]]) -> None:
        self.names[id(cell)] = (weakref.ref(cell), info)

    def name_of(self, cell: Any) -> Optional[Tuple[str, str]]:
        entry = self.names.get(id(cell))
        if entry is not None and entry[0]() is cell:
            return entry[1]
        if not self.frames:
            self._register_root(cell, "")
            return None
        parent = next((f.name for f in reversed(self.frames) if f.name), "")
        parent_path = _path_of(parent)
        cls = type(cell).__name__
        full = (parent_path + "." if parent_path else "") + cls
        self._set(cell, (full, cls))
        self.new_modules.append((full, cls, parent_path))
        return (full, cls)

    # -- forward ---------------------------------------------------------------------------------------------
    def enter(self, cell: Any, args: tuple, kwargs: Dict[str, Any]) -> CellFrame:
        s = self.session
        s.busy_depth += 1
        try:
            return self._enter(cell, args, kwargs)
        except Exception as exc:
            s.summary.failed("forward of %s" % type(cell).__name__, exc)
            frame = CellFrame(cell, "", False)
            self.frames.append(frame)
            return frame
        finally:
            s.busy_depth -= 1

    def _enter(self, cell: Any, args: tuple, kwargs: Dict[str, Any]) -> CellFrame:
        s = self.session
        info = self.name_of(cell)
        parent_frame = self.frames[-1] if self.frames else None
        listed_parent = parent_frame is not None and parent_frame.listed
        if info is None or not s.options.module_level:
            frame = CellFrame(cell, parent_frame.name if parent_frame else "", listed_parent)
            self.frames.append(frame)
            return frame
        path, cls = info
        index = s.module_counter.next(path + "\0" + cls)
        name = cell_record_name(path, cls, index)
        frame = CellFrame(cell, name, listed_parent or s.filter.listed(name))
        frame.parent = _parent_name(self.frames)
        self.frames.append(frame)
        reason = s.filter.record_reason(name, listed_parent)
        dm = s.filter.data_mode
        frame.want_bwd = dm.backward and (reason is None
                                          or s.backward_may_be_wanted(naming.backward_of(name), frame.listed))
        if reason is not None:
            s.summary.skipped(reason)
        frame.stack = s.stacks.current(0) if s.keep_stacks else -1
        rows: List = []
        skeleton = flatten.walk_call(args, kwargs, lambda slot, t: rows.append((slot, t)))
        if reason is None:
            frame.save = s.saves(name)
            frame.record = s.buffer.add_record(name, naming.KIND_MODULE, naming.DIRECTION_FORWARD, frame.parent,
                                               frame.stack, skeleton, 0)
            if dm.forward and dm.input:
                for slot, t in rows:
                    s.add_row(frame.record, slot, t, frame.save)
                for pname, p in getattr(cell, "_params", {}).items():
                    if p is not None:
                        s.add_row(frame.record, "parameters." + pname, p, frame.save)
        if frame.want_bwd:
            for slot, t in rows:
                e = input_edge(slot, t)
                if e is not None:
                    frame.edges.append(e)
        return frame

    def pop(self, frame: CellFrame) -> None:
        frames = self.frames
        for i in range(len(frames) - 1, -1, -1):
            if frames[i] is frame:
                del frames[i:]
                return

    def exit(self, frame: CellFrame, kwargs: Dict[str, Any], output: Any) -> None:
        self.pop(frame)
        if frame.name == "" or (frame.record < 0 and not frame.want_bwd):
            return
        s = self.session
        s.busy_depth += 1
        try:
            self._exit(frame, output)
        except Exception as exc:
            s.summary.failed("forward of %s" % frame.name, exc)
            if frame.record >= 0:
                s.buffer.flag_record(frame.record, naming.FLAG_PARTIAL)
        finally:
            s.busy_depth -= 1

    def _exit(self, frame: CellFrame, output: Any) -> None:
        s = self.session
        dm = s.filter.data_mode
        outputs = flatten.output_tensors(output)
        if frame.record >= 0:
            if dm.forward and dm.output:
                for slot, t in outputs:
                    s.add_row(frame.record, slot, t, frame.save)
            s.record_done(frame.record)
        if frame.want_bwd and outputs:
            pending = PendingBackward(s, naming.backward_of(frame.name), naming.KIND_MODULE, frame.parent,
                                      frame.stack, 0)
            if attach(pending, frame.edges, outputs, want_inputs=dm.output, want_outputs=dm.input):
                s.pending_backward.append(pending)

    def current(self) -> Optional[CellFrame]:
        return self.frames[-1] if self.frames else None

    # -- parameter gradients ---------------------------------------------------------------------------------
    def _hook_params(self, cell: Any, path: str, cls: str) -> None:
        for pname, p in getattr(cell, "_params", {}).items():
            if p is None or not getattr(p, "requires_grad", True):
                continue
            self.param_owners.setdefault(id(p), []).append((path, cls, pname))
            if id(p) not in self.param_handles:
                self.param_handles[id(p)] = p.register_hook(self._grad_hook(id(p)))

    def _grad_hook(self, key: int):
        def hook(grad):
            s = self.session
            if not s.backward_open():
                return grad
            s.busy_depth += 1
            try:
                for path, cls, pname in self.param_owners.get(key, ()):
                    self._param_row(path, cls, pname, grad)
            except Exception as exc:  # never break training
                s.summary.failed("parameter-gradient hook", exc)
            finally:
                s.busy_depth -= 1
            return grad

        return hook

    def _param_row(self, path: str, cls: str, pname: str, grad: Any) -> None:
        s = self.session
        state = self.param_rounds.get((path, cls))
        if state is None:
            state = self.param_rounds[(path, cls)] = [-1, set(), None]
        if state[2] is None or pname in state[1]:
            state[2] = None
            state[0] += 1
            state[1] = set()
            name = cell_param_grad_name(path, cls, state[0])
            reason = s.filter.record_reason(name, False)
            if reason is not None:
                s.summary.skipped(reason)
                state[2] = False
            else:
                state[2] = s.buffer.add_record(name, naming.KIND_PARAM_GRAD, naming.DIRECTION_BACKWARD,
                                               "", -1, None, 0)
        state[1].add(pname)
        if state[2] is not False:
            s.add_row(state[2], pname, grad, s.saves(cell_param_grad_name(path, cls, state[0])), fresh=True)

    def end_step(self) -> None:
        self.param_rounds = {}
        self.frames = []

    def take_new_modules(self) -> List[Tuple[str, str, str]]:
        new = self.new_modules
        self.new_modules = []
        return new


def _is_optimizer(cell: Any) -> bool:
    return any(c.__name__ == "Optimizer" for c in type(cell).__mro__)


def _path_of(record_name: str) -> str:
    """``Cell.a.b.Linear.forward.0`` -> ``a.b``."""
    if not record_name.startswith(PREFIX_CELL + "."):
        return ""
    body = record_name[len(PREFIX_CELL) + 1:]
    return body.rsplit(".", 3)[0] if body.count(".") >= 3 else body


def _parent_name(frames: List[CellFrame]) -> str:
    for f in reversed(frames):
        if f.name:
            return f.name
    return ""
