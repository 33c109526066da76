"""The online check (docs/ACC_CHECK.md, "Online check"): a statistics/tensor run's selected API calls re-run on the
reference as training runs, judged with acc_check's rules, and the verdicts written per step.

Framework-neutral: ``OnlineCheckProcessor`` is a ``engines.capture.processor.CallProcessor`` plugged into the
capture session; the per-call re-run comes from the adapter (``<adapter>.online_check.OnlineCall``), which wraps
the session's API interception and hands each judged call to ``OnlineCheckProcessor.add`` (at level aten,
PyTorch's ``OnlineDispatch``: every aten op through a dispatch mode, into the same processor). The verdicts go to the
rank's ``online_check`` store (docs/FORMAT.md, "online_check store") when each step ends.
"""

import json
import math
from typing import Any, Callable, Dict, List, Optional

from engines.acc_check import standards as st
from engines.acc_check.rules import OutputResult
from engines.capture.processor import CallProcessor
from engines.store import Column, StoreReader, StoreWriter, TableSpec

KIND = "online_check"
SCHEMA_VERSION = 1
_METRICS = ("cosine", "max_abs_err", "max_rel_err", "rmse", "eb", "max_ulp_err")

CHECKS = TableSpec("checks", (
    Column("step", "int64"),
    Column("name", "str"),
    Column("api", "str"),
    Column("output", "str"),
    Column("status", "str"),
    Column("standard", "str", default=""),
    Column("dtype", "str", default=""),
    Column("bench_dtype", "str", default=""),
    Column("shape", "str", default=""),
    Column("message", "str", default=""),
    Column("metrics", "json", default=""),
))


class Selection:
    """Which API calls are checked: names (``Functional.softmax``) containing one of the patterns; all if none."""

    def __init__(self, patterns: List[str]) -> None:
        self.patterns = tuple(patterns)
        self._seen: Dict[str, bool] = {}

    def __call__(self, base: str) -> bool:
        got = self._seen.get(base)
        if got is None:
            got = self._seen[base] = not self.patterns or any(p in base for p in self.patterns)
        return got


def _metrics(out: OutputResult) -> str:
    kept = {k: out.metrics[k] for k in _METRICS if k in out.metrics and not math.isnan(out.metrics[k])}
    return json.dumps(kept) if kept else ""


class OnlineCheckProcessor(CallProcessor):
    """Collects the judged outputs of a step; ``on_step(step, rows)`` gets them when the step is flushed.

    ``failing`` maps each API (``Demo.naive_softmax``) with an error output to its first failing call name
    (``Demo.naive_softmax.0.forward``, or ``.backward`` when its input gradients are the ones that fail)."""

    def __init__(self, patterns: List[str], on_step: Optional[Callable[[int, List[Dict[str, Any]]], None]] = None
                 ) -> None:
        self.select = Selection(patterns)
        self.on_step = on_step
        self.rows: List[Dict[str, Any]] = []
        self.calls = 0  # calls judged forward, all steps
        self.backward_calls = 0  # calls whose backward was judged, all steps
        self.not_checked: Dict[str, str] = {}  # API -> why its calls are not re-run (first reason)
        self.failing: Dict[str, str] = {}
        self.warning: Dict[str, str] = {}
        self._counts: Dict[str, int] = {}

    def call_name(self, base: str) -> str:
        """``base.N.forward``, N counting this step's calls of ``base`` (as the capture names them)."""
        n = self._counts.get(base, 0)
        self._counts[base] = n + 1
        return "%s.%d.forward" % (base, n)

    def skip(self, base: str, why: str) -> None:
        self.not_checked.setdefault(base, why)

    def add(self, base: str, name: str, outputs: List[OutputResult]) -> None:
        step = int(getattr(self.session, "step", 0))
        if name.endswith(".backward"):
            self.backward_calls += 1
        else:
            self.calls += 1
        for out in outputs:
            self.rows.append({"step": step, "name": name, "api": base, "output": out.name, "status": out.status,
                              "standard": out.standard, "dtype": out.device_dtype, "bench_dtype": out.bench_dtype,
                              "shape": out.shape, "message": out.message, "metrics": _metrics(out)})
            if out.status == st.ERROR:
                self.failing.setdefault(base, name)
            elif out.status == st.WARNING:
                self.warning.setdefault(base, name)

    def after_flush(self) -> None:
        rows, self.rows = self.rows, []
        self._counts = {}
        if self.on_step is None:
            return
        try:
            self.on_step(int(self.session.step), rows)
        except Exception as exc:  # never break training
            self.session.summary.failed("writing the online check of step %d" % self.session.step, exc)


class OnlineStore:
    """The rank's ``online_check`` store: every judged output, committed per step."""

    def __init__(self, rank_dir: Any, rank: int, meta: Dict[str, Any], mode: str = "auto") -> None:
        meta = dict(meta)
        meta.setdefault("schema_version", SCHEMA_VERSION)
        meta.setdefault("rank", rank)
        self.store = StoreWriter(rank_dir, KIND, (CHECKS,), meta=meta, mode=mode)

    def write(self, step: int, rows: List[Dict[str, Any]]) -> None:
        if rows:
            self.store.append("checks", **{c.name: [r[c.name] for r in rows] for c in CHECKS.columns})
        self.store.commit(step, checks=len(rows), errors=sum(1 for r in rows if r["status"] == st.ERROR))

    def close(self, status: str) -> None:
        self.store.close(status)


def read_checks(rank_dir: Any, step: Optional[int] = None) -> List[Dict[str, Any]]:
    """The rows of a rank's ``online_check`` store (of one step), as dicts (for the app and tests)."""
    with StoreReader(rank_dir, KIND) as r:
        cols = r.read("checks", steps=None if step is None else [int(step)])
    names = list(cols)
    n = len(cols[names[0]]) if names else 0
    return [{k: (cols[k][i].item() if hasattr(cols[k][i], "item") else cols[k][i]) for k in names}
            for i in range(n)]


def build(adapter: Callable[[str], Any], session: Any, patterns: List[str],
          on_step: Optional[Callable[[int, List[Dict[str, Any]]], None]] = None, level: str = "api"
          ) -> OnlineCheckProcessor:
    """Plug the online check into ``session`` (the adapter's capture session): at ``level`` api over its API
    interception (``OnlineCall``), at aten as a dispatch mode the session pushes while it runs (``OnlineDispatch``,
    PyTorch only)."""
    module = adapter("online_check")  # ImportError: this framework has no online check
    call = getattr(module, "OnlineDispatch" if level == "aten" else "OnlineCall", None)
    if call is None:
        raise ImportError("this framework's online check has no level %s" % level)
    processor = OnlineCheckProcessor(patterns, on_step)
    session.plug(processor)
    call(session, processor)
    return processor
