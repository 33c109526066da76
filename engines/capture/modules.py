"""L0 bookkeeping, framework-neutral: naming modules (cells) in their root, the forward stack of module calls,
their forward and backward records, and parameter-gradient records.

A module is named by its path in its *root*: the model passed to ``start(model)``, or else the outermost module
called (its children are recorded, the root itself is not, as in msprobe); wrapper levels (DDP, FSDP, MindSpore's
``TrainOneStepCell``...) are left out of paths. A module first seen inside a call of a named one (a model built on
the fly) is named after that parent. Parameter gradients are records ``{prefix}.{path}.{Class}.parameters_grad.{K}``:
a new round ``K`` starts when a parameter of the module delivers a gradient a second time.

The adapter's subclass (``ModuleCapture`` for torch, ``CellCapture`` for MindSpore) brings its hooks (install,
uninstall, the per-call entry and exit, the per-parameter gradient hook) and the answers below that touch the
framework: which objects are roots, the named subtree of a root, a module's parameters, and what a call adds to
the frame (activation-checkpoint flags, autograd state, the edges its backward is observed on).
"""

import weakref
from typing import Any, Dict, Iterable, List, Optional, Tuple

from engines.capture import naming
from engines.capture.backward import PendingBackward
from engines.capture.filters import REASON_DATA_MODE
from engines.capture.flatten import Walkers


class ModuleFrame:
    """One active module call on the forward stack."""

    __slots__ = ("module", "name", "listed", "record", "edges", "seq", "want_bwd", "flags", "stack", "parent",
                 "save", "anchor", "skey")

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
        # the frame that called the call's hook and the call's stack key (``StackTable.module_key``): where the
        # stack walks of the calls inside it stop
        self.anchor: Any = None
        self.skey: Tuple[int, ...] = ()


class ModuleTree:
    """Names, the forward stack and the records of module calls; see the module docstring."""

    prefix = naming.PREFIX_MODULE
    walkers: Walkers
    fresh_param_grads = False  # a parameter's gradient is a new entry on every sight

    def __init__(self, session: Any) -> None:
        self.session = session
        # id(module) -> (weak reference, (path, class) or None for roots and wrappers)
        self.names: Dict[int, Tuple[weakref.ref, Optional[Tuple[str, str]]]] = {}
        self.roots: List[weakref.ref] = []
        self.frames: List[ModuleFrame] = []
        self.param_owners: Dict[int, List[Tuple[str, str, str]]] = {}  # id(param) -> [(path, cls, param name)]
        self.param_handles: Dict[int, Any] = {}
        # (path, cls) -> [index, names seen, record (False: filtered out), record name]
        self.param_rounds: Dict[Tuple[str, str], List[Any]] = {}
        self.new_modules: List[Tuple[str, str, str]] = []
        self.dumped: Dict[int, Any] = {}  # id(module) -> the module_dump of it (its own hooks record it)
        self.counter_keys: Dict[Tuple[str, str], str] = {}  # (path, class) -> its call counter's key

    # -- what the adapter brings -----------------------------------------------------------------------------
    def _accepts_root(self, root: Any) -> bool:
        raise NotImplementedError

    def _named_subtree(self, root: Any) -> Iterable[Tuple[Any, Optional[str]]]:
        """``(module, path in the root)`` of each module below ``root`` to name; path None for a wrapper level
        (named nothing, its children are named as if it were not there)."""
        raise NotImplementedError

    def _parameters(self, module: Any) -> Dict[str, Any]:
        raise NotImplementedError

    def _class_name(self, module: Any) -> str:
        """The class a record names (an adapter maps a wrapper's generated class back to the model's own)."""
        return type(module).__name__

    def _hook_params(self, module: Any, path: str, cls: str) -> None:
        raise NotImplementedError

    def input_edge(self, slot: str, t: Any) -> Any:
        """Where the gradient w.r.t. input ``t`` leaves the call (taken before it runs), or None."""
        raise NotImplementedError

    def _attach(self, pending: PendingBackward, frame: ModuleFrame, outputs: List, want_inputs: bool,
                want_outputs: bool) -> bool:
        """Hooks that observe the call's backward on the autograd graph (``backward_capture.attach``)."""
        raise NotImplementedError

    def _call_flags(self) -> int:
        """Record flags of the call starting now (``naming.FLAG_RECOMPUTED`` for an activation-checkpoint re-run)."""
        return 0

    def _backward_possible(self, flags: int) -> bool:
        """Can this call's backward run at all (grad mode on, not a re-run whose graph is thrown away)?"""
        return True

    def _inputs_taken(self, frame: ModuleFrame) -> None:
        """After the input edges are taken, before the call runs (torch reads its sequence counter here)."""
        return None

    def record_name(self, path: str, cls: str, index: int) -> str:
        return naming.module_record_name(path, cls, index)

    def param_grad_name(self, path: str, cls: str, index: int) -> str:
        return naming.param_grad_record_name(path, cls, index)

    # -- naming ----------------------------------------------------------------------------------------------
    def add_root(self, model: Any) -> None:
        if isinstance(model, (list, tuple)):
            for i, m in enumerate(model):
                self._register_root(m, "%d." % i)
            return
        self._register_root(model, "")

    def _register_root(self, root: Any, prefix: str) -> None:
        if not self._accepts_root(root) or self._known(root):
            return
        if not prefix and self.roots:
            prefix = "%d." % len(self.roots)
        self.roots.append(weakref.ref(root))
        self._set(root, None)
        s = self.session
        hook_params = s.options.module_level and s.filter.data_mode.param_grads
        for sub, clean in self._named_subtree(root):
            if not clean:
                self._set(sub, None)
                continue
            cls = self._class_name(sub)
            full = prefix + clean
            self._set(sub, (full, cls))
            parent_path = full.rpartition(".")[0] if "." in clean else prefix.rstrip(".")
            self.new_modules.append((full, cls, parent_path))
            if hook_params:
                self._hook_params(sub, full, cls)

    def _known(self, module: Any) -> bool:
        entry = self.names.get(id(module))
        return entry is not None and entry[0]() is module

    def _set(self, module: Any, info: Optional[Tuple[str, str]]) -> None:
        self.names[id(module)] = (weakref.ref(module), info)

    def name_of(self, module: Any) -> Optional[Tuple[str, str]]:
        """(path, class) of a module; None for a root or a wrapper. The outermost module called becomes a root."""
        entry = self.names.get(id(module))
        if entry is not None and entry[0]() is module:
            return entry[1]
        if not self.frames:
            self._register_root(module, "")
            return None
        parent = next((f.name for f in reversed(self.frames) if f.name), "")
        parent_path = path_of(parent, self.prefix)
        cls = self._class_name(module)
        full = (parent_path + "." if parent_path else "") + cls
        self._set(module, (full, cls))
        self.new_modules.append((full, cls, parent_path))
        return (full, cls)

    # -- forward ---------------------------------------------------------------------------------------------
    def enter(self, module: Any, args: tuple, kwargs: Dict[str, Any],
              named: Optional[Tuple[str, str]] = None) -> ModuleFrame:
        """Push the frame of a module call and record its inputs (the caller holds the session busy). ``named``:
        the (path, class) a ``module_dump`` gives its module, recorded at any level."""
        s = self.session
        if named is not None:
            info: Optional[Tuple[str, str]] = named
        else:  # ``name_of``'s first test inline: a module named before
            entry = self.names.get(id(module))
            info = entry[1] if entry is not None and entry[0]() is module else self.name_of(module)
        parent_frame = self.frames[-1] if self.frames else None
        listed_parent = parent_frame is not None and parent_frame.listed
        if info is None or (named is None and not s.options.module_level):
            frame = ModuleFrame(module, parent_frame.name if parent_frame else "", listed_parent)
            if s.keep_stacks and named is None:  # a root or a wrapper: its anchor serves the calls inside it
                if parent_frame is not None:
                    frame.anchor, frame.skey = s.stacks.module_key(1, parent_frame.anchor, parent_frame.skey)
                else:
                    frame.anchor, frame.skey = s.stacks.module_key(1, None, ())
            self.frames.append(frame)
            return frame
        path, cls = info
        flags = self._call_flags()
        counter = s.recompute_counter if flags & naming.FLAG_RECOMPUTED else s.module_counter
        key = self.counter_keys.get(info)
        if key is None:
            key = self.counter_keys[info] = path + "\0" + cls
        counts = counter.counts  # ``CallCounter.next`` inline
        index = counts.get(key, 0)
        counts[key] = index + 1
        name = self.record_name(path, cls, index)
        filt = s.filter
        frame = ModuleFrame(module, name, listed_parent or (bool(filt.list_patterns) and filt.listed(name)))
        frame.flags = flags
        frame.parent = parent_name(self.frames)
        self.frames.append(frame)
        reason = None if filt.plain else filt.record_reason(name, listed_parent)
        dm = filt.data_mode
        if reason is None and not dm.forward:  # data_mode backward: no forward record, not even its arguments
            reason = REASON_DATA_MODE
        frame.want_bwd = (dm.backward and self._backward_possible(flags)
                          and (reason is None or s.backward_may_be_wanted(naming.backward_of(name), frame.listed)))
        if reason is not None:
            s.summary.skipped(reason)
        if not s.keep_stacks:
            frame.stack = -1
        elif named is None:  # from the caller (no frame object for this one), walked up to the enclosing call
            stacks = s.stacks
            if parent_frame is not None:
                frame.anchor, skey = stacks.module_key(1, parent_frame.anchor, parent_frame.skey)
            else:
                frame.anchor, skey = stacks.module_key(1, None, ())
            frame.skey = skey
            frame.stack = stacks.intern_key(skey)
        else:  # a module_dump's own hook: its caller is not torch's module call
            frame.stack = s.stacks.current(1)
        rows: List = []
        skeleton = self.walkers.call_rows(args, kwargs, rows)
        if reason is None:
            frame.save = save = s.saves(name)
            frame.record = record = s.buffer.add_record(name, naming.KIND_MODULE, naming.DIRECTION_FORWARD,
                                                        frame.parent, frame.stack, skeleton, flags)
            if dm.forward and dm.input:
                add_row = s.add_row
                for slot, t in rows:
                    add_row(record, slot, t, save)
                for pname, p in self._parameters(module).items():
                    if p is not None:
                        add_row(record, "parameters." + pname, p, save)
        if frame.want_bwd:
            self._take_edges(frame, rows)
            self._inputs_taken(frame)
        return frame

    def _take_edges(self, frame: ModuleFrame, rows: List) -> None:
        for slot, t in rows:
            e = self.input_edge(slot, t)
            if e is not None:
                frame.edges.append(e)

    def exit(self, frame: ModuleFrame, kwargs: Dict[str, Any], output: Any) -> None:
        """Record a finished call's outputs (and keyword inputs a hook saw only now), and observe its backward
        (the caller holds the session busy)."""
        s = self.session
        dm = s.filter.data_mode
        kw_rows: List = []
        if kwargs:
            walk = self.walkers.walk
            kw_skel = {str(k): walk(v, "input.%s" % k, lambda slot, t: kw_rows.append((slot, t)))
                       for k, v in kwargs.items()}
        else:
            kw_skel = {}
        outputs = self.walkers.output_tensors(output)
        if frame.record >= 0:
            if kw_skel:
                s.buffer.rec_args[frame.record]["kwargs"] = kw_skel
            if dm.forward and dm.input:
                for slot, t in kw_rows:
                    s.add_row(frame.record, slot, t, frame.save)
            if dm.forward and dm.output:
                for slot, t in outputs:
                    s.add_row(frame.record, slot, t, frame.save)
            if s.record_done_hook:  # a processor's hook (no call for the session's no-op)
                s.record_done(frame.record)
        if frame.want_bwd and outputs:
            self._take_edges(frame, kw_rows)
            pending = PendingBackward(s, naming.backward_of(frame.name), naming.KIND_MODULE, frame.parent,
                                      frame.stack, frame.flags & ~naming.FLAG_RECOMPUTED)
            if self._attach(pending, frame, outputs, dm.output, dm.input):
                s.pending_backward.append(pending)

    def current(self) -> Optional[ModuleFrame]:
        return self.frames[-1] if self.frames else None

    # -- parameter gradients ---------------------------------------------------------------------------------
    def _own_param(self, p: Any, path: str, cls: str, pname: str) -> bool:
        """Note that ``p`` is ``pname`` of module ``path``; True when it has no gradient hook yet."""
        self.param_owners.setdefault(id(p), []).append((path, cls, pname))
        return id(p) not in self.param_handles

    def param_grad(self, key: int, grad: Any) -> None:
        """A gradient of the parameter ``id`` ``key`` arrived: a row in each owner's current round."""
        for path, cls, pname in self.param_owners.get(key, ()):
            self._param_row(path, cls, pname, grad)

    def _param_row(self, path: str, cls: str, pname: str, grad: Any) -> None:
        s = self.session
        state = self.param_rounds.get((path, cls))
        if state is None:
            state = self.param_rounds[(path, cls)] = [-1, set(), None, ""]
        if state[2] is None or pname in state[1]:
            state[2] = None
            state[0] += 1
            state[1] = set()
            state[3] = name = self.param_grad_name(path, cls, state[0])
            reason = s.filter.record_reason(name, False)
            if reason is not None:
                s.summary.skipped(reason)
                state[2] = False
            else:
                state[2] = s.buffer.add_record(name, naming.KIND_PARAM_GRAD, naming.DIRECTION_BACKWARD,
                                               "", -1, None, 0)
        state[1].add(pname)
        if state[2] is not False:
            s.add_row(state[2], pname, grad, s.saves(state[3]), fresh=self.fresh_param_grads)

    def remove_param_hooks(self) -> None:
        for h in self.param_handles.values():
            try:
                h.remove()
            except Exception:
                pass
        self.param_handles = {}

    # -- step end --------------------------------------------------------------------------------------------
    def end_step(self) -> None:
        self.param_rounds = {}
        self.frames = []

    def take_new_modules(self) -> List[Tuple[str, str, str]]:
        new = self.new_modules
        self.new_modules = []
        return new


def path_of(record_name: str, prefix: str = naming.PREFIX_MODULE) -> str:
    """``Module.a.b.Linear.forward.0`` -> ``a.b``."""
    if not record_name.startswith(prefix + "."):
        return ""
    body = record_name[len(prefix) + 1:]
    return body.rsplit(".", 3)[0] if body.count(".") >= 3 else body


def parent_name(frames: List[ModuleFrame]) -> str:
    """The record name of the innermost named module call on the stack."""
    for f in reversed(frames):
        if f.name:
            return f.name
    return ""
