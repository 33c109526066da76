"""The online check's per-call re-run on MindSpore PyNative (docs/ACC_CHECK.md, "Online check").

``OnlineCall`` wraps the capture session's API interception (``api_capture.call``, which every installed API
wrapper reaches for a captured call): for a selected call it copies the tensor inputs to host memory *before* the
call (an in-place op changes them), lets the real call run exactly as without the check, then runs the same
callable on the copies raised to the reference dtype (float64 for float32 inputs, float32 as soon as one is
float16/bfloat16; float32 when the call has no float64 kernel) outside the gradient graph, and judges every
output with acc_check's rules. MindSpore runs one device target per process: the re-run runs on the process's
device target (the CPU for a CPU run).

Training stays bit-identical: the re-run sees only copies and runs under ``_no_grad``; random ops, casts,
in-place view ops and collectives are not re-run (``engines.acc_check.cases.skip_reason``); a ``Primitive.*`` call
is, through the primitive object it was made with (its attributes need no record). A re-run or judging that fails
is noted once per API and skipped.
"""

from typing import Any, Dict, List, Optional

import mindspore as ms
from mindspore import Tensor

from engines.acc_check import cases, rules
from engines.acc_check.online import OnlineCheckProcessor
from engines.adapters.mindspore import overflow_replay as ovr
from engines.adapters.mindspore.acc_replay import DTYPE_PREFIX, flatten_outputs, reference_dtype, to_numpy

_LOW = (ms.float16, ms.bfloat16)
_FLOATING = (ms.float16, ms.bfloat16, ms.float32, ms.float64)


def _copy(obj: Any) -> Any:
    if isinstance(obj, Tensor):
        if obj.dtype in _LOW:  # through float32 (exact): numpy has no bfloat16
            return Tensor(obj.astype(ms.float32).asnumpy()).astype(obj.dtype)
        return Tensor(obj.asnumpy())
    if isinstance(obj, (list, tuple)):
        return [_copy(v) for v in obj] if isinstance(obj, list) else tuple(_copy(v) for v in obj)
    if isinstance(obj, dict):
        return {k: _copy(v) for k, v in obj.items()}
    return obj


def _tensors(obj: Any) -> List[Tensor]:
    if isinstance(obj, Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _tensors(v)]
    return []


def _cast(obj: Any, dtype: Any) -> Any:
    if isinstance(obj, Tensor):
        return obj.astype(dtype) if obj.dtype in _FLOATING else obj
    if isinstance(obj, ms.dtype.Type) and obj in _FLOATING:
        return dtype
    if isinstance(obj, (list, tuple)):
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

    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        p = self.processor
        if getattr(info, "distributed", False) or not p.select(info.base):
            return self._inner(info, func, args, kwargs)
        s = self.session
        s.busy_depth += 1  # the copies' own ops are not records
        try:
            copies = self._inputs(info, args, kwargs)
        finally:
            s.busy_depth -= 1
        out = self._inner(info, func, args, kwargs)
        if copies is not None:
            s.busy_depth += 1
            try:
                self._check(info, func, copies, out)
            finally:
                s.busy_depth -= 1
        return out

    def _inputs(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[Any]:
        why = cases.skip_reason(info.prefix, info.api, "", live=True)  # a primitive re-runs as the object it is
        if why:
            self.processor.skip(info.base, why)
            return None
        try:
            return _copy(tuple(args)), _copy(kwargs)
        except Exception as exc:
            self.processor.skip(info.base, "its inputs could not be copied: %s" % type(exc).__name__)
            return None

    def _check(self, info: Any, func: Any, copies: Any, out: Any) -> None:
        p = self.processor
        name = p.call_name(info.base)
        try:
            outputs = self._judge(info, func, copies, out)
        except Exception as exc:  # never break training: the call is listed as not checked
            p.skip(info.base, "the re-run failed: %s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0][:200]
                                                             if str(exc).strip() else ""))
            return
        if outputs:
            p.add(info.base, name, outputs)

    def _judge(self, info: Any, func: Any, copies: Any, out: Any) -> List[rules.OutputResult]:
        args, kwargs = copies
        floats = [t for t in _tensors((args, kwargs)) if t.dtype in _FLOATING]
        ref = reference_dtype([str(t.dtype) for t in floats])
        try:
            bench_out = self._rerun(func, args, kwargs, ms.float64 if ref == "float64" else ms.float32)
        except Exception:
            if ref != "float64":
                raise
            ref = "float32"  # no float64 kernel for this call
            bench_out = self._rerun(func, args, kwargs, ms.float32)
        bench = dict(flatten_outputs(bench_out))
        results = []
        for slot, value in flatten_outputs(out):
            b = bench.get(slot)
            if isinstance(value, Tensor):
                dtype = DTYPE_PREFIX + str(value.dtype).lower()
                results.append(rules.judge_tensor(slot, info.api, to_numpy(value), dtype,
                                                  to_numpy(b) if isinstance(b, Tensor) else None, DTYPE_PREFIX + ref))
            elif isinstance(value, (bool, int, float)):
                results.append(rules.judge_value(slot, value, b))
        return results

    @staticmethod
    def _rerun(func: Any, args: Any, kwargs: Dict[str, Any], high: Any) -> Any:
        with ovr.no_grad():
            return func(*_cast(args, high), **_cast(kwargs, high))
