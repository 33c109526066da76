"""L1: every operator call through one ``TorchFunctionMode``, no monkey-patching.

The mode sees ``torch.*``, Tensor methods and operators, ``torch.nn.functional.*``, names bound with
``from torch import relu``, ``torch.distributed`` collectives and ``torch.ops.<ns>`` custom ops (``npu``...).
While ``__torch_function__`` runs the mode is popped, so whatever the call does inside is not seen again: each
API is recorded once, at its outermost call. Inputs are summarised *before* the call (in-place ops overwrite
them), outputs after; the backward side is observed on the autograd graph (``backward_capture``).
"""

import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils.data
from torch.overrides import TorchFunctionMode

from engines.adapters.torch import api_table, flatten
from engines.adapters.torch.api_defaults import defaults_of
from engines.adapters.torch.backward_capture import attach, input_edge, sequence_mark
from engines.adapters.torch.collectives import is_functional, wait_functional
from engines.capture import naming
from engines.capture.api import ApiRecords

_current_graph_task_id = getattr(torch._C, "_current_graph_task_id", None)
# torch's function-mode stack (what TorchFunctionMode.__enter__/__exit__ push and pop)
_stack_len = getattr(torch._C, "_len_torch_function_stack", None)
_stack_at = getattr(torch._C, "_get_function_stack_at", None)
_stack_pop = getattr(torch._C, "_pop_torch_function_stack", None)
_stack_push = getattr(torch._C, "_push_on_torch_function_stack", None)
_CAN_PAUSE = None not in (_stack_len, _stack_at, _stack_pop, _stack_push)


def _is_compiling_fn():
    compiler = getattr(torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    if fn is None:
        dynamo = getattr(torch, "_dynamo", None)
        fn = getattr(dynamo, "is_compiling", None)
    return fn or (lambda: False)


# While dynamo traces a torch.compile'd region every hook steps aside: the region runs uncaptured (and says so).
is_compiling = _is_compiling_fn()


def _flag_reader() -> Any:
    """Where ``torch.compiler.is_compiling`` is exactly ``False if torch.jit.is_scripting() else
    _is_compiling_flag`` (torch >= 2.8; torch.jit.is_scripting() is always False in Python), a function reading
    that flag: one call a hook instead of two. None elsewhere (``is_compiling`` then)."""
    compiler = getattr(torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    code = getattr(fn, "__code__", None)
    if code is None or not hasattr(compiler, "_is_compiling_flag") \
            or tuple(code.co_names) != ("torch", "jit", "is_scripting", "_is_compiling_flag"):
        return None

    def compiling() -> bool:
        return compiler._is_compiling_flag  # type: ignore[union-attr]

    return compiling


is_compiling = _flag_reader() or is_compiling


# Allocations that leave their memory uninitialised (overflow_check: their values are no overflow).
UNINITIALISED = frozenset(f for f in (torch.empty, torch.empty_like, torch.empty_strided,
                                      getattr(torch, "empty_permuted", None), torch.Tensor.new_empty,
                                      torch.Tensor.new_empty_strided) if f is not None)


class ApiInfo:
    """What the session decided once for one callable: its name and whether it is captured at all."""

    __slots__ = ("prefix", "api", "base", "captured", "distributed", "defaults", "functional")

    def __init__(self, prefix: str, api: str, captured: bool, defaults: Optional[Dict[str, Any]] = None,
                 functional: bool = False) -> None:
        self.prefix = prefix
        self.api = api
        self.base = prefix + "." + api
        self.captured = captured
        self.distributed = prefix == naming.PREFIX_DISTRIBUTED
        # keyword defaults of the callable's signature (Python functions only): such kwargs are not recorded
        self.defaults = defaults
        # a torch.ops collective (``_c10d_functional``): returns new tensors, complete after ``wait_tensor``
        self.functional = functional and self.distributed


# Data loading is no model op, and how many calls it makes in a step varies (the main process unpickles what
# workers sent as it arrives). torch's DataLoader iterators run ``__next__`` inside
# ``record_function("enumerate(DataLoader)#...")``; the function mode sees the region's enter and exit ops and
# steps aside in between (unpickling, pinning, sampling, single-process collation); calls made by torch's data
# package itself outside that region (an iterator seeding itself, its sampler prefetching) are not recorded either.
try:
    _RF_ENTER: Any = torch.ops.profiler._record_function_enter_new
    _RF_EXIT: Any = torch.ops.profiler._record_function_exit._RecordFunction
except (AttributeError, RuntimeError):  # an older torch: its data loading is recorded
    _RF_ENTER = _RF_EXIT = None
DATA_LOADING_REGION = "enumerate(DataLoader)"
OUTPUT_0 = "output.0"


_DATA_PACKAGE = os.path.dirname(os.path.abspath(torch.utils.data.__file__)) + os.sep
# id(code) -> (code, is it torch's data package): keyed by id, a code object's own hash reads its bytecode
# (~0.5 us a call); the code object is held, so its id stays its own
_data_code: Dict[int, Tuple[Any, bool]] = {}
_getframe = sys._getframe


def _called_by_data_loading(code: Any) -> bool:
    """Whether the calling code is torch's data package (a DataLoader iterator seeding itself, its sampler)."""
    found = _data_code.get(id(code))
    if found is None:
        found = _data_code[id(code)] = (code, os.path.abspath(code.co_filename).startswith(_DATA_PACKAGE))
    return found[1]


class CaptureFunctionMode(TorchFunctionMode):
    """Hands every torch call to the session; calls pass straight through while the session is busy."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        self._loading: List[Any] = []  # the record handles of the data-loading regions open now

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        s = self.session
        info = s.api_infos.get(func)
        if info is False and func is not _RF_ENTER and func is not _RF_EXIT and not s.armed:
            return func(*args, **kwargs)  # never recorded (metadata calls, property getters), whatever the state
        if s.busy_depth or not s.running or is_compiling():
            if self._loading and func is _RF_EXIT and args and args[0] is self._loading[-1]:
                self._loading.pop()
                s.busy_depth -= 1
                return func(*args, **kwargs)
            if s.armed and not s.running and func in UNINITIALISED:
                # before recording begins: overflow_check remembers what uninitialised memory this made
                out = func(*args, **kwargs)
                if isinstance(out, torch.Tensor):
                    s.note_uninitialised(out)
                return out
            return func(*args, **kwargs)
        if info is None:
            info = s.api_info(func)
        if info is False:
            if func is _RF_ENTER and _RF_ENTER is not None and args and str(args[0]).startswith(DATA_LOADING_REGION):
                return self._enter_data_loading(func, args, kwargs)
            return func(*args, **kwargs)
        collective = s.describe_collective(info, func, args, kwargs) if info.distributed else None
        if not info.captured:
            return func(*args, **kwargs)
        code = _getframe(1).f_code  # ``_called_by_data_loading`` inline: its dict lookup, no call
        found = _data_code.get(id(code))
        if found is None:
            found = _data_code[id(code)] = (code, os.path.abspath(code.co_filename).startswith(_DATA_PACKAGE))
        if found[1]:
            return func(*args, **kwargs)
        return s.api_capture.call(info, func, args, kwargs, collective)


    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> Any:
        if self._loading:  # removed inside a data-loading region: its exit will not be seen, so it ends here
            self.session.busy_depth -= len(self._loading)
            self._loading.clear()
        return super().__exit__(exc_type, exc_value, traceback)

    def _enter_data_loading(self, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        handle = func(*args, **kwargs)
        self._loading.append(handle)
        self.session.busy_depth += 1  # until the region's exit op (always run: record_function is a `with`)
        return handle


class ApiCapture(ApiRecords):
    """Record assembly for API calls (``engines.capture.api``): forward now, backward through graph hooks."""

    walkers = flatten.WALKERS
    tensor_type = torch.Tensor
    plain_outputs = (torch.Tensor, torch.nn.Parameter)  # ``_outputs``' usual result
    # ``before`` <- ``call`` <- the interception (``__torch_function__``, ``__torch_dispatch__``, a wrapper of
    # ``call``): all the tool's, skipped by depth, so that ``sys._getframe`` makes no frame object for them (a
    # frame object is allocated and, when its function returns, takes a copy of its locals)
    stack_skip = 3
    info_class = ApiInfo  # what register_custom_api names its calls with (engines.capture.script_controls)

    def call(self, info: ApiInfo, func: Any, args: tuple, kwargs: Dict[str, Any],
             collective: Optional[Dict[str, Any]] = None):
        s = self.session
        s.busy_depth += 1
        try:
            pre = self.before(info, args, kwargs, collective)
        except Exception as exc:  # never break training: the call runs unrecorded (``safe_before``)
            s.summary.failed("capture of %s" % info.base, exc)
            pre = None
        finally:
            s.busy_depth -= 1
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
            s.busy_depth += 1
            try:
                if collective is not None and info.functional:
                    self._wait(info, out)
                self.after(info, pre, args, kwargs, out)
            except Exception as exc:  # never break training: the call's rows are taken back (``safe_after``)
                s.summary.failed("capture of %s" % info.base, exc)
                s.rollback(pre[0], pre[1])
            finally:
                s.busy_depth -= 1
        return out

    def pause(self) -> Any:
        mode = self.session.fmode
        return pause_mode(mode) if mode is not None else None  # L0: no mode pushed

    def resume(self, token: Any) -> None:
        resume_mode(token)

    def _wait(self, info: ApiInfo, out: Any) -> None:
        try:
            wait_functional(out)
        except Exception as exc:  # never break training: the outputs are recorded as they are
            self.session.summary.failed("waiting for %s" % info.base, exc)

    # -- what the neutral record assembly asks -----------------------------------------------------------------
    def _call_flags(self) -> int:
        if _current_graph_task_id is not None and _current_graph_task_id() != -1:
            return self.session.recompute_flags()
        return 0

    def _backward_possible(self, flags: int) -> bool:
        # A non-reentrant checkpoint re-run only rebuilds saved tensors; its graph is thrown away.
        return torch.is_grad_enabled() and not (flags and not self.session.last_recompute_reentrant)

    # their usual case without a method frame (``ApiRecords.before``)
    _graph_task_id = staticmethod(_current_graph_task_id) if _current_graph_task_id is not None else None
    _grad_enabled = staticmethod(torch.is_grad_enabled)

    # the functions themselves (no method frame around them: each runs for every captured call or input)
    input_edge = staticmethod(input_edge)  # type: ignore[assignment]
    _sequence_mark = staticmethod(sequence_mark)  # type: ignore[assignment]
    _attach = staticmethod(attach)  # type: ignore[assignment]  # (pending, edges, outputs, seq, inputs, outputs)


    def _outputs(self, info: Any, out: Any, args: tuple, kwargs: Dict[str, Any]):
        if not info.distributed:
            if type(out) is torch.Tensor or type(out) is torch.nn.Parameter:  # the usual result
                return [(OUTPUT_0, out)], False
            return flatten.output_tensors(out), False
        outputs = flatten.output_tensors(out)
        if info.functional:
            return outputs, False
        # Collectives write into their arguments: the result is the arguments after the call.
        post: List = []
        flatten.tensors_in(list(args), "output", post)
        for k, v in kwargs.items():
            flatten.tensors_in(v, "output.%s" % k, post)
        if _is_async_work(out):
            # an async_op call or an irecv: its result is written later (when the work completes), without a
            # version bump: later records must read its buffers anew, not reuse the entry summarised at the call
            for _, t in post:
                self.session.entries.mark_volatile(t)
            return [], False
        return outputs + post, True


def resolve_info(func: Any, selector: Any) -> Any:
    """ApiInfo for a callable (False for calls never recorded)."""
    name = api_table.resolve(func)
    if name is None:
        return False
    prefix, api = name
    captured = selector.admits(prefix + "." + api)
    return ApiInfo(prefix, api, captured, defaults_of(func) if captured else None, is_functional(func))


def pause_mode(mode: Any) -> Any:
    """Take our function mode off torch's stack while a module or backward hook of the tool works, when it is
    on top (a mode pushed after it is left alone, and ours with it): each torch call of the hook's statistics
    would otherwise pass through ``__torch_function__`` only to be handed on, several microseconds each.
    Returns what ``resume_mode`` pushes back (None: nothing was taken off)."""
    if mode is None or not _CAN_PAUSE:
        return None
    n = _stack_len()
    if n == 0 or _stack_at(n - 1) is not mode:
        return None
    _stack_pop()
    return mode


def resume_mode(token: Any) -> None:
    if token is not None:
        _stack_push(token)


def _is_async_work(out: Any) -> bool:
    """A ``Work`` handle (``async_op=True``), or a list of them (``batch_isend_irecv``)."""
    first = out[0] if isinstance(out, list) and out else out
    return first is not None and not isinstance(first, torch.Tensor) and callable(getattr(first, "wait", None))


def graph_task_active() -> bool:
    return _current_graph_task_id is not None and _current_graph_task_id() != -1


__all__ = ["ApiCapture", "ApiInfo", "CaptureFunctionMode", "resolve_info", "graph_task_active"]
