"""L0: module forward/backward records and parameter gradients through torch's global hooks.

Global module hooks (``register_module_forward_pre_hook`` & co.) see every ``nn.Module`` call of the process, so
the zero-code path needs no model handle. A module is named by its path in its *root*: the model passed to
``start(model)``, or else the outermost module called (its children are recorded, the root itself is not, as in
msprobe). DDP/FSDP/compile wrapper components are stripped from paths. Parameter gradients come from
``register_post_accumulate_grad_hook`` on each parameter (they fire after accumulation into ``.grad``).
"""

import weakref
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.nn.modules import module as nn_module

from engines.adapters.torch import flatten
from engines.adapters.torch.api_capture import is_compiling
from engines.adapters.torch.backward_capture import PendingBackward, attach, input_edge, sequence_mark
from engines.capture import naming

# Wrapper classes that add a level to the module tree without computing anything of their own.
_WRAPPER_CLASSES = frozenset(("FullyShardedDataParallel", "CheckpointWrapper", "OptimizedModule",
                              "DistributedDataParallel", "DataParallel", "OffloadWrapper"))
_DATA_PARALLEL = frozenset(("DistributedDataParallel", "DataParallel"))
_COMPILED = "OptimizedModule"
COMPILED_NOTE = "a torch.compile'd module ran: the operators inside compiled regions are not captured"


class ModuleFrame:
    """One active module call on the forward stack."""

    __slots__ = ("module", "name", "listed", "record", "edges", "seq", "want_bwd", "flags", "stack", "parent",
                 "save")

    def __init__(self, module: Any, name: str, listed: bool) -> None:
        self.module = module
        self.name = name
        self.listed = listed
        self.record = -1
        self.edges: List = []
        self.seq = -1
        self.want_bwd = False
        self.flags = 0
        self.stack = -1
        self.parent = ""
        self.save = False


class ModuleCapture:
    def __init__(self, session: Any) -> None:
        self.session = session
        # id(module) -> (weak reference, (path, class) or None for roots and wrappers)
        self.names: Dict[int, Tuple[weakref.ref, Optional[Tuple[str, str]]]] = {}
        self.roots: List[weakref.ref] = []
        self.frames: List[ModuleFrame] = []
        self.handles: List[Any] = []
        self.param_owners: Dict[int, List[Tuple[str, str, str]]] = {}  # id(param) -> [(path, cls, param name)]
        self.param_handles: Dict[int, Any] = {}
        self.param_rounds: Dict[Tuple[str, str], List[Any]] = {}  # (path, cls) -> [index, names seen, pending]
        self.new_modules: List[Tuple[str, str, str]] = []

    # -- installation ----------------------------------------------------------------------------------------
    def install(self) -> None:
        if self.handles:
            return
        self.handles.append(nn_module.register_module_forward_pre_hook(self._pre))
        self.handles.append(nn_module.register_module_forward_hook(self._post, with_kwargs=True, always_call=True))

    def uninstall(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self.frames = []

    def remove_param_hooks(self) -> None:
        for h in self.param_handles.values():
            h.remove()
        self.param_handles = {}

    # -- naming ----------------------------------------------------------------------------------------------
    def add_root(self, model: Any) -> None:
        if isinstance(model, (list, tuple)):
            for i, m in enumerate(model):
                self._register_root(m, "%d." % i)
            return
        self._register_root(model, "")

    def _register_root(self, root: Any, prefix: str) -> None:
        if not isinstance(root, torch.nn.Module) or self._known(root):
            return
        if not prefix and self.roots:
            prefix = "%d." % len(self.roots)
        self.roots.append(weakref.ref(root))
        root_cls = type(root).__name__
        data_parallel = root_cls in _DATA_PARALLEL
        self._set(root, None)
        paths: Dict[int, str] = {}
        for path, sub in root.named_modules(remove_duplicate=True):
            if sub is root:
                continue
            cls = type(sub).__name__
            clean = naming.clean_module_path(path, data_parallel)
            if cls in _WRAPPER_CLASSES or not clean:
                self._set(sub, None)
                continue
            full = prefix + clean
            self._set(sub, (full, cls))
            paths[id(sub)] = full
            parent_path = full.rpartition(".")[0] if "." in clean else prefix.rstrip(".")
            self.new_modules.append((full, cls, parent_path))
            if self.session.options.module_level and self.session.filter.data_mode.param_grads:
                self._hook_params(sub, full, cls)

    def _known(self, module: Any) -> bool:
        entry = self.names.get(id(module))
        return entry is not None and entry[0]() is module

    def _set(self, module: Any, info: Optional[Tuple[str, str]]) -> None:
        self.names[id(module)] = (weakref.ref(module), info)

    def name_of(self, module: Any) -> Optional[Tuple[str, str]]:
        entry = self.names.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        if not self.frames:
            self._register_root(module, "")
            return None
        parent = next((f.name for f in reversed(self.frames) if f.name), "")
        parent_path = _path_of(parent)
        cls = type(module).__name__
        full = (parent_path + "." if parent_path else "") + cls
        self._set(module, (full, cls))
        self.new_modules.append((full, cls, parent_path))
        return (full, cls)

    # -- forward hooks ---------------------------------------------------------------------------------------
    def _pre(self, module: Any, args: tuple) -> None:
        s = self.session
        if s.busy_depth or not s.running or is_compiling():
            return None
        try:
            s.busy_depth += 1
            try:
                self._enter(module, args)
            finally:
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("forward pre-hook of %s" % type(module).__name__, exc)
            self.frames.append(ModuleFrame(module, "", False))
        return None

    def _enter(self, module: Any, args: tuple) -> None:
        s = self.session
        if type(module).__name__ == _COMPILED:
            s.summary.note(COMPILED_NOTE)
        info = self.name_of(module)
        parent_frame = self.frames[-1] if self.frames else None
        listed_parent = parent_frame is not None and parent_frame.listed
        if info is None or not s.options.module_level:
            frame = ModuleFrame(module, parent_frame.name if parent_frame else "", listed_parent)
            self.frames.append(frame)
            return
        path, cls = info
        flags = s.recompute_flags() if _in_backward() else 0
        counter = s.recompute_counter if flags & naming.FLAG_RECOMPUTED else s.module_counter
        index = counter.next(path + "\0" + cls)
        name = naming.module_record_name(path, cls, index)
        frame = ModuleFrame(module, name, listed_parent or s.filter.listed(name))
        frame.flags = flags
        frame.parent = _parent_name(self.frames)
        self.frames.append(frame)
        reason = s.filter.record_reason(name, listed_parent)
        dm = s.filter.data_mode
        rerun_without_graph = bool(flags) and not s.last_recompute_reentrant
        frame.want_bwd = (dm.backward and torch.is_grad_enabled() and not rerun_without_graph
                          and (reason is None or s.backward_may_be_wanted(naming.backward_of(name), frame.listed)))
        if reason is not None:
            s.summary.skipped(reason)
        frame.stack = s.stacks.current(0) if s.keep_stacks else -1
        rows: List = []
        skeleton = flatten.walk_call(args, {}, lambda slot, t: rows.append((slot, t)))
        if reason is None:
            frame.save = s.saves(name)
            frame.record = s.buffer.add_record(name, naming.KIND_MODULE, naming.DIRECTION_FORWARD, frame.parent,
                                               frame.stack, skeleton, flags)
            if dm.forward and dm.input:
                for slot, t in rows:
                    s.add_row(frame.record, slot, t, frame.save)
                for pname, p in module._parameters.items():
                    if p is not None:
                        s.add_row(frame.record, "parameters." + pname, p, frame.save)
        if frame.want_bwd:
            for slot, t in rows:
                e = input_edge(slot, t)
                if e is not None:
                    frame.edges.append(e)
            frame.seq = sequence_mark()

    def _post(self, module: Any, args: tuple, *rest: Any) -> None:
        s = self.session
        if is_compiling():
            return None
        frame = self._pop(module)
        if frame is None or len(rest) != 2 or frame.name == "" or frame.module is not module:
            return None
        if frame.record < 0 and not frame.want_bwd:
            return None
        kwargs, output = rest
        try:
            s.busy_depth += 1
            try:
                self._exit(frame, kwargs or {}, output)
            finally:
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("forward hook of %s" % frame.name, exc)
            if frame.record >= 0:
                s.buffer.flag_record(frame.record, naming.FLAG_PARTIAL)
        return None

    def _exit(self, frame: ModuleFrame, kwargs: Dict[str, Any], output: Any) -> None:
        s = self.session
        dm = s.filter.data_mode
        kw_rows: List = []
        if kwargs:
            kw_skel = {str(k): flatten.walk(v, "input.%s" % k, lambda slot, t: kw_rows.append((slot, t)))
                       for k, v in kwargs.items()}
        else:
            kw_skel = {}
        outputs = flatten.output_tensors(output)
        if frame.record >= 0:
            if kw_skel:
                s.buffer.rec_args[frame.record]["kwargs"] = kw_skel
            if dm.forward and dm.input:
                for slot, t in kw_rows:
                    s.add_row(frame.record, slot, t, frame.save)
            if dm.forward and dm.output:
                for slot, t in outputs:
                    s.add_row(frame.record, slot, t, frame.save)
            s.record_done(frame.record)
        if frame.want_bwd and outputs:
            for slot, t in kw_rows:
                e = input_edge(slot, t)
                if e is not None:
                    frame.edges.append(e)
            pending = PendingBackward(s, naming.backward_of(frame.name), naming.KIND_MODULE, frame.parent,
                                      frame.stack, frame.flags & ~naming.FLAG_RECOMPUTED)
            if attach(pending, frame.edges, outputs, frame.seq, want_inputs=dm.output,
                      want_outputs=dm.input, memo=s.walk_memo):
                s.pending_backward.append(pending)

    def _pop(self, module: Any) -> Optional[ModuleFrame]:
        frames = self.frames
        for i in range(len(frames) - 1, -1, -1):
            if frames[i].module is module:
                frame = frames[i]
                del frames[i:]
                return frame
        return None

    def current(self) -> Optional[ModuleFrame]:
        return self.frames[-1] if self.frames else None

    # -- parameter gradients ---------------------------------------------------------------------------------
    def _hook_params(self, module: Any, path: str, cls: str) -> None:
        for pname, p in module._parameters.items():
            if p is None or not p.requires_grad:
                continue
            owners = self.param_owners.setdefault(id(p), [])
            owners.append((path, cls, pname))
            if id(p) not in self.param_handles and hasattr(p, "register_post_accumulate_grad_hook"):
                self.param_handles[id(p)] = p.register_post_accumulate_grad_hook(self._param_grad)

    def _param_grad(self, param: torch.Tensor) -> None:
        s = self.session
        if not s.backward_open() or is_compiling():
            return
        try:
            s.busy_depth += 1
            try:
                grad = getattr(param, "main_grad", None)
                if grad is None:
                    grad = param.grad
                if grad is None:
                    return
                for path, cls, pname in self.param_owners.get(id(param), ()):
                    self._param_row(path, cls, pname, grad)
            finally:
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("parameter-gradient hook", exc)

    def _param_row(self, path: str, cls: str, pname: str, grad: torch.Tensor) -> None:
        s = self.session
        state = self.param_rounds.get((path, cls))
        if state is None:
            state = self.param_rounds[(path, cls)] = [-1, set(), None]
        if state[2] is None or pname in state[1]:
            self._close_round(state)
            state[0] += 1
            state[1] = set()
            name = naming.param_grad_record_name(path, cls, state[0])
            reason = s.filter.record_reason(name, False)
            if reason is not None:
                s.summary.skipped(reason)
                state[2] = False
            else:
                state[2] = s.buffer.add_record(name, naming.KIND_PARAM_GRAD, naming.DIRECTION_BACKWARD,
                                               "", -1, None, 0)
        state[1].add(pname)
        if state[2] is not False:
            s.add_row(state[2], pname, grad, s.saves(naming.param_grad_record_name(path, cls, state[0])))

    def _close_round(self, state: List[Any]) -> None:
        state[2] = None

    def end_step(self) -> None:
        self.param_rounds = {}
        self.frames = []

    def take_new_modules(self) -> List[Tuple[str, str, str]]:
        new = self.new_modules
        self.new_modules = []
        return new


def _in_backward() -> bool:
    fn = getattr(torch._C, "_current_graph_task_id", None)
    return fn is not None and fn() != -1


def _path_of(record_name: str) -> str:
    """``Module.a.b.Linear.forward.0`` -> ``a.b``."""
    if not record_name.startswith("Module."):
        return ""
    body = record_name[len("Module."):]
    head = body.rsplit(".", 3)[0] if body.count(".") >= 3 else body
    return head


def _parent_name(frames: List[ModuleFrame]) -> str:
    for f in reversed(frames):
        if f.name:
            return f.name
    return ""
