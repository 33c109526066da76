"""The online check's per-call re-run on PyTorch (docs/ACC_CHECK.md, "Online check").

``OnlineCall`` wraps the capture session's API interception (``api_capture.call``, reached from the session's
torch-function mode for every captured call): for a selected call it copies the inputs to the CPU *before* the
call (an in-place op changes them), lets the real call run exactly as without the check, then runs the same
callable on the copies raised to the reference dtype (float64 for float32 inputs, float32 as soon as one is
float16/bfloat16: docs/decisions/0026-acc-check-reference.md) and judges every output with acc_check's rules.

Training stays bit-identical: the re-run sees only copies, runs with autocast and autograd off, and the CPU RNG
state is restored after it; random ops, casts, in-place view ops and collectives are not re-run
(``engines.acc_check.cases.skip_reason``). A re-run or judging that fails is noted once per API and skipped.
``OnlineDispatch`` is the same check one level down (``online_check.level: aten``): every aten op, forward and
backward, through a ``TorchDispatchMode``.
When the call's inputs need gradients its backward is checked too (``online_backward``): the copies are kept until
the call's gradients have arrived, then re-run with autograd on and the input gradients judged.
"""

from typing import Any, Dict, List, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from engines.acc_check import cases, prescreen, rules
from engines.acc_check.online import OnlineCheckProcessor
from engines.adapters.torch import online_backward as ob
from engines.adapters.torch.acc_replay import flatten_outputs, reference_dtype, to_numpy
from engines.adapters.torch.api_capture import graph_task_active
from engines.adapters.torch.backward_capture import sequence_mark

_LOW = (torch.float16, torch.bfloat16)


def _copy(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [_copy(v) for v in obj] if isinstance(obj, list) else tuple(_copy(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    if isinstance(obj, torch.device):
        return torch.device("cpu")
    return obj


def _tensors(obj: Any) -> List[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [t for v in obj for t in _tensors(v)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def _cast(obj: Any, dtype: torch.dtype) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, torch.dtype) and obj.is_floating_point:
        return dtype
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [_cast(v, dtype) for v in obj] if isinstance(obj, list) else tuple(_cast(v, dtype) for v in obj)
    if isinstance(obj, dict):
        return {k: _cast(v, dtype) for k, v in obj.items()}
    return obj


class OnlineCall:
    """Installed over ``session.api_capture.call``; the judged calls go to ``processor.add``."""

    def __init__(self, session: Any, processor: OnlineCheckProcessor) -> None:
        self.session = session
        self.processor = processor
        api = session.api_capture
        self._inner = api.call
        api.call = self.call

    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any],
             collective: Optional[Dict[str, Any]] = None) -> Any:
        p = self.processor
        if collective is not None or not p.select(info.base):
            return self._inner(info, func, args, kwargs, collective)
        s = self.session
        s.busy_depth += 1
        try:
            copies = self._inputs(info, args, kwargs)
            edges = self._edges(info, args, kwargs) if copies is not None else []
            seq = sequence_mark() if edges else -1
        finally:
            s.busy_depth -= 1
        out = self._inner(info, func, args, kwargs, collective)
        if copies is not None:
            s.busy_depth += 1
            try:
                self._check(info, func, copies, out, edges, seq)
            finally:
                s.busy_depth -= 1
        return out

    def _edges(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> List[Any]:
        """The input edges whose gradients the backward check judges (none: no backward check)."""
        if not torch.is_grad_enabled() or graph_task_active() or _in_place(info.api):
            return []
        try:
            return ob.input_edges(_tensors((tuple(args), kwargs)))
        except Exception:  # never break training: the call is checked forward only
            return []

    def _inputs(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[Any]:
        why = cases.skip_reason(info.prefix, info.api, "")
        if why or "out" in kwargs:
            self.processor.skip(info.base, why or "writes into out=")
            return None
        try:
            return _copy(tuple(args)), _copy(kwargs)
        except Exception as exc:
            self.processor.skip(info.base, "its inputs could not be copied: %s" % type(exc).__name__)
            return None

    def _check(self, info: Any, func: Any, copies: Any, out: Any, edges: List[Any], seq: int) -> None:
        p = self.processor
        name = p.call_name(info.base)
        try:
            outputs = self._judge(info, func, copies, out, name)
        except Exception as exc:  # never break training: the call is listed as not checked
            p.skip(info.base, "the re-run failed: %s" % _why(exc))
            return
        if outputs:
            p.add(info.base, name, outputs)
        if edges:
            try:
                ob.watch(self.session, name[:-len("forward")] + "backward", edges, out, seq,
                         lambda pending: self._backward(info, func, copies, out, pending))
            except Exception as exc:
                p.skip(info.base + " (backward)", "its backward could not be watched: %s" % _why(exc))

    def _backward(self, info: Any, func: Any, copies: Any, out: Any, pending: ob.OnlineBackward) -> None:
        """Every gradient of the call has arrived (inside an autograd hook, the session busy)."""
        p = self.processor
        try:
            args, kwargs, ref, low = self._reference_inputs(copies, out)
            outputs = ob.rerun(func, args, kwargs, _tensors((args, kwargs)), pending, info.api, ref, low)
        except Exception as exc:  # never break training
            p.skip(info.base + " (backward)", "the backward re-run failed: %s" % _why(exc))
            return
        if outputs:
            p.add(info.base, pending.name, outputs)

    def _reference_inputs(self, copies: Any, out: Any) -> Any:
        """``(args, kwargs, reference dtype name, autocast's dtype or None)``: the copies in the reference dtype."""
        args, kwargs = copies
        floats = [t for t in _tensors((args, kwargs)) if t.is_floating_point()]
        dev_floats = [v for _, v in flatten_outputs(out) if isinstance(v, torch.Tensor) and v.is_floating_point()]
        low = None
        if floats and dev_floats and any(t.dtype not in _LOW for t in floats) \
                and all(v.dtype in _LOW for v in dev_floats):
            # wider inputs, only low outputs: autocast (type promotion would give the wider dtype), so the kernel
            # saw every floating input rounded to the outputs' dtype (a bf16 activation times a float32 weight too)
            low = dev_floats[0].dtype
            args, kwargs = _cast(args, low), _cast(kwargs, low)
            floats = [t.to(low) for t in floats]
        ref = reference_dtype([str(t.dtype) for t in floats])
        high = torch.float64 if ref == "float64" else torch.float32
        return _cast(args, high), _cast(kwargs, high), ref, low

    def _judge(self, info: Any, func: Any, copies: Any, out: Any, name: str) -> List[rules.OutputResult]:
        device = [(slot, v) for slot, v in flatten_outputs(out)]
        args, kwargs, ref, _ = self._reference_inputs(copies, out)
        rng = torch.get_rng_state()
        try:
            with torch.no_grad(), torch.autocast("cpu", enabled=False):
                bench_out = func(*args, **kwargs)
        finally:
            torch.set_rng_state(rng)
        return _judge_outputs(info.api, device, bench_out, ref)


def _judge_outputs(api: str, device: List[Any], bench_out: Any, ref: str) -> List[rules.OutputResult]:
    """Each ``(slot, value)`` the device returned judged against the re-run's output of that slot."""
    bench = dict(flatten_outputs(bench_out))
    results = []
    for slot, value in device:
        b = bench.get(slot)
        if isinstance(value, torch.Tensor):
            results.append(prescreen.judge(slot, api, to_numpy(value), str(value.dtype),
                                           None if not isinstance(b, torch.Tensor) else to_numpy(b),
                                           "torch." + ref))
        elif isinstance(value, (bool, int, float)):
            results.append(rules.judge_value(slot, value, b))
    return results


_COLLECTIVE_NAMESPACES = frozenset(("c10d", "_c10d_functional", "c10d_functional", "_c10d_functional_autograd"))
# aten's casts, copies and allocations beyond the API-level list (cases.NOT_COMPUTE): no arithmetic to check
_NOT_COMPUTE_OPS = frozenset(("_to_copy", "lift_fresh", "lift_fresh_copy", "zeros_like", "ones_like", "full_like",
                              "new_zeros", "new_ones", "new_full", "scalar_tensor", "_local_scalar_dense", "zero_",
                              "fill_", "_copy_from", "_copy_from_and_resize", "_unsafe_view"))
_NOT_CHECKED = False  # the cached verdict for an op that is never re-run


class _Op:
    """What the dispatch-level check knows of one op overload."""

    __slots__ = ("base", "api", "mutable")

    def __init__(self, base: str, api: str, mutable: bool) -> None:
        self.base, self.api, self.mutable = base, api, mutable


def op_name(func: Any) -> str:
    """``Aten.gelu.default`` for ``torch.ops.aten.gelu.default``; another namespace capitalised the same way
    (``Demo.naive_softmax.default``)."""
    return "%s.%s.%s" % (func.namespace.capitalize(), func.overloadpacket.__name__, func._overloadname)


class OnlineDispatch(TorchDispatchMode):
    """The online check at the dispatch level (``online_check.level: aten``): a ``TorchDispatchMode`` the session
    pushes on top while it runs (``session.check_mode``). Each selected op runs as it would without the check;
    then, with every dispatch mode disabled (a mode below this one cannot alter the reference), autograd and CPU
    autocast off and the CPU RNG state restored, it runs again on CPU copies of its inputs in the reference dtype
    and its outputs are judged. Backward is covered as it is made of ops too (``gelu_backward``, the backward's
    ``mm``). Not re-run (listed once per op): collectives, random ops, views and in-place view ops, casts, copies
    and allocations, ops returning nothing, factory ops (no tensor input), calls with no floating tensor output.
    Nothing is checked while the session is busy (its own statistics)."""

    def __init__(self, session: Any, processor: OnlineCheckProcessor) -> None:
        super().__init__()
        self.session = session
        self.processor = processor
        self._ops: Dict[Any, Any] = {}
        session.check_mode = self

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[Dict[str, Any]] = None
                           ) -> Any:
        if kwargs is None:
            kwargs = {}
        s = self.session
        if s.busy_depth or not s.running:  # the session's own work (its statistics) is not checked
            return func(*args, **kwargs)
        op = self._ops.get(func)
        if op is None:
            op = self._ops[func] = self._describe(func)
        if op is _NOT_CHECKED:
            return func(*args, **kwargs)
        copies = None
        if op.mutable:  # it writes its inputs: copy them first
            copies = self._guarded(op, self._copies, op, args, kwargs)
            if copies is None:
                return func(*args, **kwargs)
        out = func(*args, **kwargs)
        self._guarded(op, self._check, op, func, args, kwargs, copies, out)
        return out

    def _guarded(self, op: _Op, work: Any, *params: Any) -> Any:
        """``work(*params)`` as the tool's own work: the session busy, no dispatch mode, no autograd; a failure is
        listed once for the op and None returned (never break training)."""
        s = self.session
        s.busy_depth += 1
        try:
            with _disable_current_modes(), torch.no_grad():
                return work(*params)
        except Exception as exc:
            self.processor.skip(op.base, "the re-run failed: %s" % _why(exc))
            return None
        finally:
            s.busy_depth -= 1

    def _describe(self, func: Any) -> Any:
        try:
            base = op_name(func)
            api = func.overloadpacket.__name__
            tags = set(getattr(func, "tags", ()))
            schema = func._schema
        except Exception:  # not an op overload this check understands
            return _NOT_CHECKED
        if not self.processor.select(base):
            return _NOT_CHECKED
        why = ""
        if func.namespace in _COLLECTIVE_NAMESPACES:
            why = "collective: its result needs the other ranks"
        elif torch.Tag.nondeterministic_seeded in tags:
            why = "random op: it draws from the generator"
        elif getattr(func, "is_view", False):
            why = "view or alias: it shares its input's storage, no arithmetic"
        elif torch.Tag.inplace_view in tags:
            why = "in-place view op: it changes a tensor's view, not its values"
        elif api in _NOT_COMPUTE_OPS:
            why = "not a computation (cast, copy or allocation)"
        elif not schema.returns:
            why = "returns nothing (it writes its inputs in place)"
        else:
            why = cases.skip_reason("Aten", api, "")
        if why:
            self.processor.skip(base, why)
            return _NOT_CHECKED
        return _Op(base, api, bool(schema.is_mutable))

    def _copies(self, op: _Op, args: tuple, kwargs: Dict[str, Any]) -> Any:
        if not _tensors((args, kwargs)):
            self.processor.skip(op.base, "factory op: no tensor input")
            return None
        return _copy(tuple(args)), _copy(kwargs)

    def _check(self, op: _Op, func: Any, args: tuple, kwargs: Dict[str, Any], copies: Any, out: Any) -> None:
        p = self.processor
        device = flatten_outputs(out)
        if not any(isinstance(v, torch.Tensor) and v.is_floating_point() for _, v in device):
            p.skip(op.base, "calls with no floating tensor output are not re-run")
            return
        if copies is None:
            copies = self._copies(op, args, kwargs)
            if copies is None:
                return
        c_args, c_kwargs = copies
        floats = [t for t in _tensors(copies) if t.is_floating_point()]
        ref = reference_dtype([str(t.dtype) for t in floats])
        high = torch.float64 if ref == "float64" else torch.float32
        c_args, c_kwargs = _cast(c_args, high), _cast(c_kwargs, high)
        rng = torch.get_rng_state()
        try:
            with torch.autocast("cpu", enabled=False):
                bench_out = func(*c_args, **c_kwargs)
        finally:
            torch.set_rng_state(rng)
        outputs = _judge_outputs(op.api, device, bench_out, ref)
        if outputs:
            p.add(op.base, p.call_name(op.base), outputs)


def _in_place(api: str) -> bool:
    """An in-place call (``add_``, ``__iadd__``): its forward re-run rewrites the copies, so no backward check."""
    return (api.endswith("_") and not api.endswith("__")) or api.startswith("__i")


def _why(exc: Exception) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return "%s: %s" % (type(exc).__name__, text)
