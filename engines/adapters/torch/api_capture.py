"""L1: every operator call through one ``TorchFunctionMode``, no monkey-patching.

The mode sees ``torch.*``, Tensor methods and operators, ``torch.nn.functional.*``, names bound with
``from torch import relu``, ``torch.distributed`` collectives and ``torch.ops.<ns>`` custom ops (``npu``...).
While ``__torch_function__`` runs the mode is popped, so whatever the call does inside is not seen again: each
API is recorded once, at its outermost call. Inputs are summarised *before* the call (in-place ops overwrite
them), outputs after; the backward side is observed on the autograd graph (``backward_capture``).
"""

from typing import Any, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

from engines.adapters.torch import api_table, flatten
from engines.adapters.torch.api_defaults import defaults_of, split_kwargs
from engines.adapters.torch.backward_capture import PendingBackward, attach, input_edge, sequence_mark
from engines.capture import naming

_current_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)


def _is_compiling_fn():
    compiler = getattr(torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    if fn is None:
        dynamo = getattr(torch, "_dynamo", None)
        fn = getattr(dynamo, "is_compiling", None)
    return fn or (lambda: False)


# While dynamo traces a torch.compile'd region every hook steps aside: the region runs uncaptured (and says so).
is_compiling = _is_compiling_fn()


class ApiInfo:
    """What the session decided once for one callable: its name and whether it is captured at all."""

    __slots__ = ("prefix", "api", "base", "captured", "distributed", "defaults")

    def __init__(self, prefix: str, api: str, captured: bool, defaults: Optional[Dict[str, Any]] = None) -> None:
        self.prefix = prefix
        self.api = api
        self.base = prefix + "." + api
        self.captured = captured
        self.distributed = prefix == naming.PREFIX_DISTRIBUTED
        # keyword defaults of the callable's signature (Python functions only): such kwargs are not recorded
        self.defaults = defaults


class CaptureFunctionMode(TorchFunctionMode):
    """Hands every torch call to the session; calls pass straight through while the session is busy."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        s = self.session
        if s.busy_depth or not s.running or is_compiling():
            return func(*args, **kwargs)
        info = s.api_infos.get(func)
        if info is None:
            info = s.api_info(func)
        if info is False or not info.captured:
            return func(*args, **kwargs)
        return s.api_capture.call(info, func, args, kwargs)


class ApiCapture:
    """Record assembly for API calls (forward now, backward through graph hooks)."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def call(self, info: ApiInfo, func: Any, args: tuple, kwargs: Dict[str, Any]):
        s = self.session
        pre = None
        try:
            s.busy_depth += 1
            try:
                pre = self._before(info, args, kwargs)
            finally:
                s.busy_depth -= 1
        except Exception as exc:
            s.summary.failed("capture of %s" % info.base, exc)
            pre = None
        s.api_depth += 1
        try:
            out = func(*args, **kwargs)
        except BaseException:
            if pre is not None:
                s.rollback(pre[0], pre[1])
            raise
        finally:
            s.api_depth -= 1
        if pre is not None:
            try:
                s.busy_depth += 1
                try:
                    self._after(info, pre, args, kwargs, out)
                finally:
                    s.busy_depth -= 1
            except Exception as exc:
                s.summary.failed("capture of %s" % info.base, exc)
                s.rollback(pre[0], pre[1])
        return out

    # -- forward ---------------------------------------------------------------------------------------------
    def _before(self, info: ApiInfo, args: tuple, kwargs: Dict[str, Any]):
        s = self.session
        flags = 0
        if _current_graph_task_id is not None and _current_graph_task_id() != -1:
            flags = s.recompute_flags()
        counter = s.recompute_counter if flags & naming.FLAG_RECOMPUTED else s.api_counter
        index = counter.next(info.base)
        name = "%s.%d.forward" % (info.base, index)
        frame = s.module_frame()
        listed_parent = frame is not None and frame.listed
        reason = s.filter.record_reason(name, listed_parent)
        dm = s.filter.data_mode
        if flags and not s.last_recompute_reentrant:
            # A non-reentrant checkpoint re-run only rebuilds saved tensors; its graph is thrown away.
            want_bwd = False
        else:
            want_bwd = dm.backward and torch.is_grad_enabled()
        want_bwd = (want_bwd
                    and (reason is None or s.backward_may_be_wanted(naming.backward_of(name), listed_parent)))
        if reason is not None:
            s.summary.skipped(reason)
            if not want_bwd:
                return None
        marks = s.buffer_marks()
        edges: List = []
        record = -1
        stack = s.stacks.current(0) if s.keep_stacks else -1
        parent = frame.name if frame is not None else ""
        save = s.saves(name)
        if reason is None:
            rows: List[Tuple[str, torch.Tensor]] = []
            kept_defaults = None
            rec_kwargs = kwargs
            if kwargs and info.defaults is not None:
                rec_kwargs, kept_defaults = split_kwargs(kwargs, info.defaults)
            skeleton = flatten.walk_call(args, rec_kwargs, lambda slot, t: rows.append((slot, t)))
            if kept_defaults is not None:
                skeleton["defaults"] = {k: flatten.walk(v, "", None) for k, v in kept_defaults.items()}
            record = s.buffer.add_record(name, naming.KIND_API, naming.DIRECTION_FORWARD, parent, stack,
                                         skeleton, flags)
            want_in = dm.forward and dm.input
            for slot, t in rows:
                if want_in:
                    s.add_row(record, slot, t, save)
                if want_bwd:
                    e = input_edge(slot, t)
                    if e is not None:
                        edges.append(e)
        elif want_bwd:
            rows = []
            flatten.walk_call(args, kwargs, lambda slot, t: rows.append((slot, t)))
            for slot, t in rows:
                e = input_edge(slot, t)
                if e is not None:
                    edges.append(e)
        seq = sequence_mark() if want_bwd else -1
        return (marks[0], marks[1], record, name, parent, stack, flags, edges, seq, want_bwd, save)

    def _after(self, info: ApiInfo, pre, args: tuple, kwargs: Dict[str, Any], out: Any) -> None:
        s = self.session
        _, _, record, name, parent, stack, flags, edges, seq, want_bwd, save = pre
        outputs = flatten.output_tensors(out)
        if info.distributed:
            # Collectives write into their arguments: the result is the arguments after the call.
            post: List = []
            flatten.tensors_in(list(args), "output", post)
            for k, v in kwargs.items():
                flatten.tensors_in(v, "output.%s" % k, post)
            outputs = outputs + post
        dm = s.filter.data_mode
        if record >= 0:
            if not isinstance(out, torch.Tensor):
                s.buffer.rec_args[record]["output"] = flatten.walk_output(out, None)
            if dm.forward and dm.output:
                fresh = info.distributed
                for slot, t in outputs:
                    s.add_row(record, slot, t, save, fresh=fresh)
            s.record_done(record)
        if want_bwd and outputs:
            pending = PendingBackward(s, naming.backward_of(name), naming.KIND_API, parent, stack,
                                      flags & ~naming.FLAG_RECOMPUTED)
            if attach(pending, edges, outputs, seq, want_inputs=dm.output, want_outputs=dm.input):
                s.pending_backward.append(pending)


def resolve_info(func: Any, selector: Any) -> Any:
    """ApiInfo for a callable (False for calls never recorded)."""
    name = api_table.resolve(func)
    if name is None:
        return False
    prefix, api = name
    captured = selector.admits(prefix + "." + api)
    return ApiInfo(prefix, api, captured, defaults_of(func) if captured else None)


def graph_task_active() -> bool:
    return _current_graph_task_id is not None and _current_graph_task_id() != -1


__all__ = ["ApiCapture", "ApiInfo", "CaptureFunctionMode", "resolve_info", "graph_task_active"]
