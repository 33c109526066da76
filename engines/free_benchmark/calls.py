"""free_benchmark's per-call processor, the whole control flow once for every framework (docs/FREE_BENCHMARK.md,
"What happens to a selected call"): which selected calls are checked, preheat, the perturbed re-run, the rows of
the compared outputs and their thresholds, their verdicts at step end, and the fix handler's replacement.

``CallChecks`` takes every API call from the capture's interception (the adapter's ``FreeBenchmarkCall`` is one,
built with its ``FrameworkOps``: ``engines.free_benchmark.framework``), runs the real call, re-runs it perturbed
and compares the outputs on the device; ratios stay there until the step ends (``finish_step``: one transfer,
``ops.resolve``), except during preheat. Calls the check cannot re-run safely pass through, counted by reason:
collectives, in-place calls, random ones, calls whose output is a view of an input (nothing is computed), calls
without a floating input, and with improve_precision calls with nothing to raise.

Every row of a call, tensor or Python number, is judged against the threshold of the call's output dtype, the
dtype of its first output tensor (docs/reference/msprobe-tasks.md §8.4; no tensor output: the default); preheat learns one per (API,
that dtype).
"""

from collections import Counter
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from engines.free_benchmark import thresholds as th
from engines.free_benchmark.framework import FrameworkOps
from engines.free_benchmark.metric import scalar_ratio
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.perturb import Cancelled
from engines.free_benchmark.preheat import Preheat, pure_name
from engines.free_benchmark.results import CheckRow

# Calls whose result is random by design: re-running them proves nothing (the adapters add their own).
RANDOM_APIS = frozenset("""
rand rand_like randn randn_like randint randint_like randperm bernoulli multinomial normal poisson gumbel_softmax
""".split())
DROPOUT_APIS = frozenset(("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"))

SKIP_COLLECTIVE = "skipped: collective"
SKIP_INPLACE = "skipped: in-place call (re-running it would write its input again)"
SKIP_RANDOM = "skipped: random call"
SKIP_INPUT = "skipped: no floating tensor in the first tensor argument (unsupported input type)"
SKIP_VIEW = "skipped: the output is a view of an input (nothing computed)"
SKIP_SHARDED = "skipped: a distributed tensor input (re-running the call could issue collectives on this rank alone)"
#: pert_modes whose re-run leaves the framework's own low-precision region (autocast)
WHOLE_CALL_MODES = ("improve_precision", "to_cpu")


def is_random(api: str, args: tuple, kwargs: Dict[str, Any], random_apis: FrozenSet[str] = RANDOM_APIS) -> bool:
    if api in random_apis:
        return True
    if api in DROPOUT_APIS:
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        return bool(training) and not (isinstance(p, (int, float)) and p == 0)
    return False


class Pending:
    """A compared row whose ratio is still on the device (and maybe its call's refusal flag: ``Perturbed``)."""

    __slots__ = ("row", "ratio", "strict", "refusal")

    def __init__(self, row: CheckRow, ratio: Any, strict: bool = False, refusal: Optional[Tuple[Any, str]] = None
                 ) -> None:
        self.row = row
        self.ratio = ratio
        self.strict = strict  # the threshold is an inconsistent preheat sample's ratio: reaching it fails
        self.refusal = refusal


def judge(pending: List[Pending], resolve: Callable[[List[Any]], List[float]], skipped: Optional[Counter] = None,
          refusals: Sequence[Tuple[Any, str]] = ()) -> List[CheckRow]:
    """The rows with their ratios on the host (``resolve``: one transfer, the calls' refusal flags with them) and
    their verdicts. The rows of a call its perturbation refused after all are dropped, the call counted in
    ``skipped``."""
    values = resolve([p.ratio for p in pending] + [flag for flag, _ in refusals])
    refused = set()
    for refusal, v in zip(refusals, values[len(pending):]):
        if v:
            refused.add(id(refusal))
            if skipped is not None:
                skipped["skipped: %s" % refusal[1]] += 1
    rows = []
    for p, v in zip(pending, values):
        if p.refusal is not None and id(p.refusal) in refused:
            continue
        p.row.ratio = v
        p.row.consistent = th.consistent(v, p.row.threshold) and not (p.strict and v >= p.row.threshold)
        rows.append(p.row)
    return rows


class CallChecks:
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (the same ``call`` signature)."""

    #: a replacement that fails with these keeps the original output, with a note
    replace_errors: tuple = (TypeError, ValueError, RuntimeError)

    def __init__(self, session: Any, options: FreeBenchmarkOptions, ops: FrameworkOps, backward: Any = None
                 ) -> None:
        self.session = session
        self.fb = options
        self.ops = ops
        self.backward = backward
        self.pending: List[Pending] = []
        self.refusals: List[Tuple[Any, str]] = []  # the step's refusal flags still on the device (Perturbed)
        self.done: List[CheckRow] = []
        self.skipped: Counter = Counter()
        self.replaced: Counter = Counter()
        self.checked = 0
        self.preheat = Preheat(options.preheat_step, options.max_sample) if options.preheat and ops.preheat \
            else None
        self.call_numbers: Counter = Counter()

    # -- the checks ------------------------------------------------------------------------------------------
    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any], collective: Any = None) -> Any:
        """The interception's entry: the real call, checked when it is selected and eligible (``collective``, the
        capture's description of a Distributed call, is not needed: collectives are never re-run)."""
        name = self.checked_name(info, args, kwargs)
        if name is None:
            return func(*args, **kwargs)
        if self.fb.backward:
            return self.backward.call(name, func, args, kwargs)
        context = self.ops.context(args, kwargs)
        out = func(*args, **kwargs)
        s = self.session
        try:
            with s.busy():
                replacement = self._forward(name, func, args, kwargs, out, context)
        except Exception as exc:  # never break training
            s.summary.failed("free_benchmark check of %s" % info.base, exc)
            return out
        return out if replacement is None else replacement

    def checked_name(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[str]:
        """The call's record name when it is checked; None (the reason counted) when it only runs."""
        index = self.session.api_counter.next(info.base)
        name = "%s.%d.forward" % (info.base, index)
        if not self.fb.selected(name):
            return None
        reason = self._ineligible(info, args, kwargs)
        if reason is not None:
            self.skipped[reason] += 1
            return None
        return name

    def _ineligible(self, info: Any, args: tuple, kwargs: Dict[str, Any]) -> Optional[str]:
        if info.distributed:
            return SKIP_COLLECTIVE
        if self.ops.is_inplace(info, kwargs):
            return SKIP_INPLACE
        if self.ops.has_sharded_input(args, kwargs):
            return SKIP_SHARDED
        if is_random(info.api, args, kwargs, self.ops.random_apis):
            return SKIP_RANDOM
        if self.ops.first_eligible(args) is None:
            return SKIP_INPUT
        return None

    # -- forward stage ---------------------------------------------------------------------------------------
    def _forward(self, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any, context: Any) -> Any:
        """The forward stage of a checked call that returned ``out``: the replacement output (fix), or None."""
        fb, ops = self.fb, self.ops
        if ops.is_view_of_input(out, args, kwargs):
            self.skipped[SKIP_VIEW] += 1
            return None
        step = self.session.step
        api = pure_name(name)
        items = ops.output_items(out)
        first = next((v for _, v in items if ops.is_tensor(v)), None)
        out_dtype = str(first.dtype) if first is not None else ""
        sample = False
        if self.preheat is not None and self.preheat.in_preheat(step):
            self.preheat.count(step, api)
            self.call_numbers[api] += 1
            sample = self.call_numbers[api] in self.preheat.sample_numbers(step, api)
            if not sample:
                return None
        lowered = None
        if fb.pert_mode == "improve_precision":
            lowered = ops.lowered(context, first, args, kwargs)
            if lowered is None and not ops.has_low_precision(args, kwargs):
                self.skipped[ops.skip_nothing] += 1
                return None
        index = ops.first_eligible(args)
        if index is None:  # skip_reason let the call through: not reached
            self.skipped[SKIP_INPUT] += 1
            return None
        try:
            p = ops.perturb(fb.pert_mode, args, kwargs, index, lowered, fb.fix)
        except Cancelled as exc:
            self.skipped["skipped: %s" % exc] += 1
            return None
        refusal = p.refusal  # read with the step's ratios, or now when a preheat sample or fix needs it
        if refusal is not None:
            if sample or fb.fix:
                if ops.resolve([refusal[0]])[0]:
                    self.skipped["skipped: %s" % refusal[1]] += 1
                    return None
                refusal = None
            else:
                self.refusals.append(refusal)
        new = ops.rerun(func, p, fb.fix, context if fb.pert_mode in WHOLE_CALL_MODES else None)
        self.checked += 1
        if sample:
            self._preheat_sample(api, func, args, kwargs, out, new, out_dtype)
            return None
        self._compare(name, api, items, ops.output_items(new), out_dtype, step, refusal)
        if fb.fix:
            return self._replacement(api, out, new)
        return None

    def threshold(self, api: str, out_dtype: str) -> Tuple[float, bool]:
        """(the threshold of the call's rows, whether reaching it fails: a frozen preheat threshold)."""
        threshold = th.ratio_threshold(out_dtype, self.fb.pert_mode)
        if self.preheat is not None and self.fb.pert_mode != "no_change":
            learned = self.preheat.threshold(api, out_dtype)
            if learned is not None:
                return learned, (api, out_dtype) in self.preheat.frozen
        return threshold, False

    def _compare(self, name: str, api: str, items: List, new_items: List, out_dtype: str, step: int,
                 refusal: Optional[Tuple[Any, str]] = None) -> None:
        fb, ops = self.fb, self.ops
        threshold, strict = self.threshold(api, out_dtype)
        for (i, a), (_, b) in zip(items, new_items):
            if ops.is_tensor(a) and ops.is_tensor(b):
                row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, str(a.dtype),
                               str(list(a.shape)), threshold=threshold, replaced=fb.fix)
                if fb.pert_mode == "to_cpu":
                    row.consistent, row.detail = ops.single_compare(a, b)
                    self.done.append(row)
                    continue
                tol = th.forward_abs_tol(str(b.dtype))
                self.pending.append(Pending(row, ops.tensor_ratio(a, b, tol), strict, refusal))
                continue
            ratio = scalar_ratio(a, b)
            if ratio is None:
                continue
            row = CheckRow(step, name, "forward", fb.pert_mode, fb.handler_type, i, type(a).__name__, "[]",
                           threshold=threshold, replaced=fb.fix)
            self.pending.append(Pending(row, ratio, strict, refusal))

    def _preheat_sample(self, api: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any, new: Any,
                        out_dtype: str) -> None:
        """A preheat sample: the perturbation ratio, and whether the call agrees with a CPU float32 re-run."""
        ops, preheat = self.ops, self.preheat
        if preheat is None:  # only called in preheat
            return
        cpu = ops.perturb("to_cpu", args, kwargs, 0, None, False)
        golden = ops.rerun(func, cpu, False, None)
        for (_, a), (_, b), (_, g) in zip(ops.output_items(out), ops.output_items(new), ops.output_items(golden)):
            if not (ops.is_tensor(a) and ops.is_tensor(b) and ops.is_tensor(g)):
                continue
            if not ops.is_floating(a):
                continue
            ratio = ops.resolve([ops.tensor_ratio(a, b, th.forward_abs_tol(str(b.dtype)))])[0]
            ok, _ = ops.single_compare(a, g)
            preheat.add(api, out_dtype, ratio, ok)
            break

    def _replacement(self, api: str, out: Any, new: Any) -> Any:
        """The fix handler's output: ``new`` cast like ``out`` (None: the original output is kept)."""
        try:
            replaced = self.ops.cast_like(new, out)
        except self.replace_errors as exc:
            self.session.summary.note("free_benchmark fix: %s kept its original output (%s)" % (api, exc))
            return None
        self.replaced[api] += 1
        return replaced

    # -- step end --------------------------------------------------------------------------------------------
    def finish_step(self, step: int) -> List[CheckRow]:
        """Every row of the step with its ratio on the host and its verdict (one transfer per device)."""
        if self.backward is not None:
            self.done.extend(self.backward.finish_step())
        pending, self.pending = self.pending, []
        refusals, self.refusals = self.refusals, []
        rows = list(self.done) + judge(pending, self.ops.resolve, self.skipped, refusals)
        self.done = []
        for r in rows:
            r.step = step
        if self.preheat is not None and self.preheat.in_preheat(step):
            self.preheat.end_step(lambda dtype: th.ratio_threshold(dtype, self.fb.pert_mode))
        self.call_numbers = Counter()
        return rows
