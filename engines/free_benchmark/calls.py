"""free_benchmark's per-call processor, framework-neutral: which selected calls are checked, the rows of the
compared outputs, their verdicts at step end, and the fix handler's replacement.

The adapter's ``FreeBenchmarkCall`` (a ``CallChecks``) takes every API call from the capture's interception, runs
the real call, re-runs it perturbed and compares the outputs on the device; ratios stay there until the step ends
(``finish_step``: one transfer, the adapter's ``resolve``). Calls the check cannot re-run safely pass through,
counted by reason: collectives, in-place calls, random ones, calls whose output is a view of an input (nothing
is computed), calls without a floating input.
"""

from collections import Counter
from typing import Any, Callable, Dict, FrozenSet, List, Optional

from engines.free_benchmark import thresholds as th
from engines.free_benchmark.options import FreeBenchmarkOptions
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


def is_random(api: str, args: tuple, kwargs: Dict[str, Any], random_apis: FrozenSet[str] = RANDOM_APIS) -> bool:
    if api in random_apis:
        return True
    if api in DROPOUT_APIS:
        p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
        training = kwargs.get("training", args[2] if len(args) > 2 else True)
        return bool(training) and not (isinstance(p, (int, float)) and p == 0)
    return False


class Pending:
    """A compared row whose ratio is still on the device."""

    __slots__ = ("row", "ratio", "strict")

    def __init__(self, row: CheckRow, ratio: Any, strict: bool = False) -> None:
        self.row = row
        self.ratio = ratio
        self.strict = strict  # the threshold is an inconsistent preheat sample's ratio: reaching it fails


def judge(pending: List[Pending], resolve: Callable[[List[Any]], List[float]]) -> List[CheckRow]:
    """The rows with their ratios on the host (``resolve``: one transfer) and their verdicts."""
    values = resolve([p.ratio for p in pending])
    rows = []
    for p, v in zip(pending, values):
        p.row.ratio = v
        p.row.consistent = th.consistent(v, p.row.threshold) and not (p.strict and v >= p.row.threshold)
        rows.append(p.row)
    return rows


class CallChecks:
    """Replaces the capture's ``ApiCapture`` in a free_benchmark session (the same ``call`` signature)."""

    random_apis: FrozenSet[str] = RANDOM_APIS
    replace_errors: tuple = (TypeError, ValueError)  # a replacement that fails with these keeps the original

    def __init__(self, session: Any, options: FreeBenchmarkOptions, backward: Any = None) -> None:
        self.session = session
        self.fb = options
        self.backward = backward
        self.pending: List[Pending] = []
        self.done: List[CheckRow] = []
        self.skipped: Counter = Counter()
        self.replaced: Counter = Counter()
        self.checked = 0

    # -- what the adapter brings -----------------------------------------------------------------------------
    def _is_inplace(self, info: Any, kwargs: Dict[str, Any]) -> bool:
        raise NotImplementedError

    def _first_eligible(self, args: tuple) -> Optional[int]:
        raise NotImplementedError

    def _resolve(self, ratios: List[Any]) -> List[float]:
        raise NotImplementedError

    def _cast_like(self, new: Any, old: Any) -> Any:
        raise NotImplementedError

    def _end_step(self, step: int) -> None:
        return None

    def _context(self, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """What the forward check needs to know about the call before it runs (torch: its autocast state)."""
        return None

    def _forward(self, info: Any, name: str, func: Any, args: tuple, kwargs: Dict[str, Any], out: Any,
                 context: Any) -> Any:
        """The forward stage of a checked call that returned ``out``: the replacement output (fix), or None."""
        raise NotImplementedError

    # -- the checks ------------------------------------------------------------------------------------------
    def call(self, info: Any, func: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """The interception's entry: the real call, checked when it is selected and eligible."""
        name = self.checked_name(info, args, kwargs)
        if name is None:
            return func(*args, **kwargs)
        if self.fb.backward:
            return self.backward.call(name, func, args, kwargs)
        context = self._context(args, kwargs)
        out = func(*args, **kwargs)
        s = self.session
        try:
            with s.busy():
                replacement = self._forward(info, name, func, args, kwargs, out, context)
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
        if self._is_inplace(info, kwargs):
            return SKIP_INPLACE
        if is_random(info.api, args, kwargs, self.random_apis):
            return SKIP_RANDOM
        if self._first_eligible(args) is None:
            return SKIP_INPUT
        return None

    def _replacement(self, api: str, out: Any, new: Any) -> Any:
        """The fix handler's output: ``new`` cast like ``out`` (None: the original output is kept)."""
        try:
            replaced = self._cast_like(new, out)
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
        rows = list(self.done) + judge(pending, self._resolve)
        self.done = []
        for r in rows:
            r.step = step
        self._end_step(step)
        return rows
