"""L0: module forward/backward records and parameter gradients through torch's global hooks.

Global module hooks (``register_module_forward_pre_hook`` & co.) see every ``nn.Module`` call of the process, so
the zero-code path needs no model handle. Naming, the forward stack and the records are framework-neutral
(``engines.capture.modules``); here: the hooks, DDP/FSDP/compile wrapper components stripped from paths,
activation-checkpoint re-runs, and parameter gradients from ``register_post_accumulate_grad_hook`` on each
parameter (they fire after accumulation into ``.grad``; ``main_grad`` is read when a parameter has one).
"""

from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch
from torch.nn.modules import module as nn_module

from engines.adapters.torch import flatten
from engines.adapters.torch.api_capture import is_compiling, pause_mode, resume_mode
from engines.adapters.torch.backward_capture import attach, input_edge, sequence_mark
from engines.capture import naming
from engines.capture.backward import PendingBackward
from engines.capture.modules import ModuleFrame, ModuleTree

# Wrapper classes that add a level to the module tree without computing anything of their own.
_WRAPPER_CLASSES = frozenset(("FullyShardedDataParallel", "CheckpointWrapper", "OptimizedModule",
                              "DistributedDataParallel", "DataParallel", "OffloadWrapper"))
_DATA_PARALLEL = frozenset(("DistributedDataParallel", "DataParallel"))
_COMPILED = "OptimizedModule"
# The mixins composable parallelism puts in front of a module's class (fully_shard, replicate).
_SHARDING_MIXINS = frozenset(("FSDPModule", "ReplicateModule", "DDP"))
_NO_KWARGS: Dict[str, Any] = {}  # read only: a hook's calls without keyword arguments share it
COMPILED_NOTE = "a torch.compile'd module ran: the operators inside compiled regions are not captured"


class ModuleCapture(ModuleTree):
    walkers = flatten.WALKERS

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.handles: List[Any] = []

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

    # -- what the neutral tree asks ----------------------------------------------------------------------------
    def _accepts_root(self, root: Any) -> bool:
        return isinstance(root, torch.nn.Module)

    def _named_subtree(self, root: Any) -> Iterable[Tuple[Any, Optional[str]]]:
        data_parallel = type(root).__name__ in _DATA_PARALLEL
        for path, sub in root.named_modules(remove_duplicate=True):
            if sub is root:
                continue
            if type(sub).__name__ in _WRAPPER_CLASSES:
                yield sub, None
                continue
            yield sub, naming.clean_module_path(path, data_parallel)

    def _parameters(self, module: Any) -> Dict[str, Any]:
        return module._parameters

    def _class_name(self, module: Any) -> str:
        return class_name(type(module))

    def input_edge(self, slot: str, t: Any) -> Any:
        return input_edge(slot, t)

    def _call_flags(self) -> int:
        if _current_graph_task_id is not None and _current_graph_task_id() != -1:  # inside backward
            return self.session.recompute_flags()
        return 0

    def _backward_possible(self, flags: int) -> bool:
        # A non-reentrant checkpoint re-run only rebuilds saved tensors; its graph is thrown away.
        return torch.is_grad_enabled() and not (flags and not self.session.last_recompute_reentrant)

    def _inputs_taken(self, frame: ModuleFrame) -> None:
        frame.seq = sequence_mark()

    def _attach(self, pending: PendingBackward, frame: ModuleFrame, outputs: List, want_inputs: bool,
                want_outputs: bool) -> bool:
        return attach(pending, frame.edges, outputs, frame.seq, want_inputs=want_inputs, want_outputs=want_outputs,
                      memo=self.session.walk_memo)

    # -- forward hooks ---------------------------------------------------------------------------------------
    def _pre(self, module: Any, args: tuple) -> None:
        s = self.session
        if s.busy_depth or not s.running or is_compiling():
            return None
        try:
            s.busy_depth += 1
            mode = s.fmode
            paused = pause_mode(mode) if mode is not None else None  # L0: no function mode to take off
            try:
                if type(module).__name__ == _COMPILED:
                    s.summary.note(COMPILED_NOTE)
                self.enter(module, args, _NO_KWARGS)
            finally:
                if paused is not None:
                    resume_mode(paused)
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("forward pre-hook of %s" % type(module).__name__, exc)
            self.frames.append(ModuleFrame(module, "", False))
        return None

    def _post(self, module: Any, args: tuple, *rest: Any) -> None:
        s = self.session
        if is_compiling() or (self.dumped and id(module) in self.dumped):  # a module_dump's hooks record it
            return None
        frame = self._pop(module)
        if frame is None or len(rest) != 2 or frame.name == "" or frame.module is not module:
            return None
        if frame.record < 0 and not frame.want_bwd:
            return None
        kwargs, output = rest
        try:
            s.busy_depth += 1
            mode = s.fmode
            paused = pause_mode(mode) if mode is not None else None
            try:
                self.exit(frame, kwargs or _NO_KWARGS, output)
            finally:
                if paused is not None:
                    resume_mode(paused)
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("forward hook of %s" % frame.name, exc)
            if frame.record >= 0:
                s.buffer.flag_record(frame.record, naming.FLAG_PARTIAL)
        return None

    def _pop(self, module: Any) -> Optional[ModuleFrame]:
        frames = self.frames
        for i in range(len(frames) - 1, -1, -1):
            if frames[i].module is module:
                frame = frames[i]
                del frames[i:]
                return frame
        return None

    # -- parameter gradients ---------------------------------------------------------------------------------
    def _hook_params(self, module: Any, path: str, cls: str) -> None:
        for pname, p in module._parameters.items():
            if p is None or not p.requires_grad:
                continue
            if self._own_param(p, path, cls, pname) and hasattr(p, "register_post_accumulate_grad_hook"):
                self.param_handles[id(p)] = p.register_post_accumulate_grad_hook(self._param_grad)

    def _param_grad(self, param: torch.Tensor) -> None:
        s = self.session
        if not s.backward_open() or is_compiling():
            return
        try:
            s.busy_depth += 1
            mode = s.fmode
            paused = pause_mode(mode) if mode is not None else None
            try:
                grad = getattr(param, "main_grad", None)
                if grad is None:
                    grad = param.grad
                if grad is None:
                    return
                self.param_grad(id(param), grad)
            finally:
                if paused is not None:
                    resume_mode(paused)
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("parameter-gradient hook", exc)


def class_name(cls: type) -> str:
    """The model's own class name: FSDP2's ``fully_shard`` (and composable ``replicate``) swaps a module's class
    for a generated ``FSDP<Class>(FSDPModule, <Class>)``; the record keeps ``<Class>``, as an unsharded run of the
    same model names it, so the layouts' records match."""
    bases = cls.__bases__
    if len(bases) == 2 and bases[0].__name__ in _SHARDING_MIXINS and cls.__name__.endswith(bases[1].__name__):
        return bases[1].__name__
    return cls.__name__


_current_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)
