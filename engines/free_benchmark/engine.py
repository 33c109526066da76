"""What a ``free_benchmark`` run writes and reports (its task object: ``engines.free_benchmark.task``): every
selected API call checked (or fixed); ``<run>/rank<R>/free_benchmark.h5`` and ``free_benchmark.csv``
(``engines.free_benchmark.results``). Exit code 3 when a call is inconsistent."""

from collections import Counter
from typing import Any, Dict, List, Optional

from engines.capture.summary import CaptureSummary
from engines.free_benchmark.options import FreeBenchmarkOptions
from engines.free_benchmark.results import CSV_NAME, CheckRow, ResultWriter


class Tally:
    """Rows of every step: written to the rank's store and CSV, summarised for the run."""

    def __init__(self, rank_dir: Any, rank: int, meta: Dict[str, Any], store_mode: str) -> None:
        self.rank_dir = rank_dir
        self.rank = rank
        self.meta = meta
        self.store_mode = store_mode
        self.writer: Optional[ResultWriter] = None
        self.rows = 0
        self.steps: List[int] = []
        self.bad: List[CheckRow] = []
        self.worst: Dict[str, CheckRow] = {}  # api call name -> its largest-ratio row (for the summary)
        self.checked_calls: Counter = Counter()
        self.replaced_max = 1.0  # largest ratio between a replaced output and the original (fix)

    def __call__(self, step: int, rows: List[CheckRow]) -> None:
        if self.writer is None:
            self.writer = ResultWriter(self.rank_dir, self.rank, self.meta, self.store_mode)
        self.writer.write(step, rows)
        self.steps.append(step)
        self.rows += len(rows)
        for r in rows:
            self.checked_calls[r.name] += 1
            if r.replaced and r.ratio == r.ratio:
                self.replaced_max = max(self.replaced_max, r.ratio)
            if not r.consistent:
                self.bad.append(r)

    def close(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close(status)


def summarise(tally: Tally, fb: FreeBenchmarkOptions, skipped: Counter, replaced: Counter, capture: CaptureSummary,
              run: Any, rank: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if run is not None:
        out["dump"] = str(getattr(run, "path", run))
        out["csv"] = str(run.rank_dir(rank) / CSV_NAME) if tally.bad else "none (no inconsistent call)"
    calls = len(tally.checked_calls)
    bad_calls = sorted({r.name for r in tally.bad})
    out["verdict"] = verdict_line(tally, fb)
    out["mode"] = "%s, %s, %s stage" % (fb.pert_mode, fb.handler_type, fb.fuzz_stage)
    out["steps"] = len(tally.steps)
    out["calls_checked"] = calls
    out["inconsistent_calls"] = len(bad_calls)
    tables: List[Dict[str, Any]] = []
    if tally.bad:
        rows = sorted(tally.bad, key=lambda r: (-_sortable(r.ratio), r.step, r.name))
        backward = fb.backward
        tables.append({
            "title": "inconsistent calls (also in %s)" % CSV_NAME,
            "columns": ["step", "call"] + (["grad of input"] if backward else ["output"]) + ["ratio", "threshold"],
            "rows": [[r.step, r.name, r.output_index, _ratio_text(r) if r.pert_mode != "to_cpu" else r.detail,
                      "%g %s" % (r.threshold, r.dtype.replace("torch.", ""))] for r in rows],
        })
    if replaced:
        tables.append({"title": "outputs replaced (fix)", "columns": ["api", "calls"],
                       "rows": [[k, v] for k, v in sorted(replaced.items(), key=lambda kv: -kv[1])]})
    if skipped:
        tables.append({"title": "selected calls not checked, and why", "columns": ["reason", "count"],
                       "rows": [[k, v] for k, v in sorted(skipped.items(), key=lambda kv: -kv[1])]})
    notes = list(capture.notes) + [k for k in capture.missing if k.startswith("failed")]
    if notes:
        tables.append({"title": "notes", "columns": ["note"], "rows": [[n] for n in notes]})
    if tables:
        out["tables"] = tables
    out["free_benchmark"] = {"inconsistent": [r.as_dict() for r in tally.bad], "skipped": dict(skipped),
                             "replaced": dict(replaced), "rows": tally.rows, "bad_calls": bad_calls}
    return out


def verdict_line(tally: Tally, fb: FreeBenchmarkOptions) -> str:
    calls = len(tally.checked_calls)
    if not calls:
        return "no call was checked (check list/scope, the step filter and the target)"
    if not tally.bad:
        return "all %d checked calls consistent (%s)" % (calls, fb.pert_mode)
    by_api: Dict[str, CheckRow] = {}
    for r in tally.bad:
        api = r.name.rsplit(".", 2)[0]
        if api not in by_api or _sortable(r.ratio) > _sortable(by_api[api].ratio):
            by_api[api] = r
    names = {r.name for r in tally.bad}
    parts = ["%s (ratio %s > %s)" % (api, _ratio_text(r), r.threshold) if r.pert_mode != "to_cpu" else
             "%s (%s)" % (api, r.detail) for api, r in sorted(by_api.items(), key=lambda kv: -_sortable(kv[1].ratio))]
    return "%d of %d checked calls inconsistent: %s" % (len(names), calls, "; ".join(parts[:3]) +
                                                        ("; ..." if len(parts) > 3 else ""))


def fix_line(replaced: Counter, losses: Optional[List[Any]], largest: float = 1.0) -> str:
    total = sum(replaced.values())
    if not total:
        return "fix: no output was replaced (nothing selected could be raised)"
    apis = ", ".join("%s x%d" % kv for kv in sorted(replaced.items(), key=lambda kv: -kv[1])[:3])
    text = "fix: replaced the outputs of %d calls (%s) by their high-precision re-runs" % (total, apis)
    if largest > 1.0:
        text += ", which moved them by up to %s" % ("a sign flip" if largest == float("inf") else
                                                    "%.3g%%" % ((largest - 1.0) * 100))
    if losses:
        text += "; the losses of this run are those of the fixed model (final %s)" % _num(losses[-1])
    return text


def _sortable(ratio: float) -> float:
    return -1.0 if ratio != ratio else ratio


def _ratio_text(r: CheckRow) -> str:
    if r.ratio == float("inf"):
        return "sign flip"
    if r.ratio != r.ratio:
        return "-"
    return "%.6g" % r.ratio


def _num(x: Any) -> str:
    return "%.6g" % x if isinstance(x, float) else str(x)
