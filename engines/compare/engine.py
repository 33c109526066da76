"""``run_compare(job, events) -> CompareOutcome``: compare two dumps (ours, msprobe's, or one of each).

Ranks pair by id (never by position), steps by number (two single-step dumps pair whatever their numbers). Each
(rank, step) piece is matched, measured and judged (:mod:`engines.compare.piece`), ranked for first divergence
and rolled up the module tree (:mod:`engines.compare.divergence`); the results go to HDF5, CSV and xlsx
(:mod:`engines.compare.outputs`).
"""

from __future__ import annotations

import math
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.compare import collective_links, divergence, suspects, tensor_metrics
from engines.compare.dist_split import EchoedError, LaunchedSplit
from engines.compare.merged_source import MergeOptions, MergeTally, merge_sides
from engines.compare.options import CompareError, CompareOptions, summary_options
from engines.compare.pair_pool import PieceResult, SideSpec, piece_results
from engines.compare.piece import PieceSettings
from engines.compare.prefetch import start_prefetch
from engines.compare.stream_out import ResultChunks, StreamingReport, concat
from engines.compare.verdicts import VERDICTS
from engines.compare.workgroup import WorkGroup, join_launch
from engines.dumps.names import direction_word
from engines.dumps.opener import open_dump
from engines.dumps.source import DumpSource, DumpSourceError, require_steps
from engines.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK


@dataclass
class CompareOutcome:
    """What a compare produced. ``summary`` is JSON-ready (``--json``); ``results``/``divergence``/``tree`` are
    the tables in memory (numpy columns)."""

    summary: Dict[str, Any]
    top_suspects: List[Dict[str, Any]]
    exit_code: int
    output_dir: Optional[Path] = None  # also ``run_dir`` for the runner
    files: Dict[str, str] = field(default_factory=dict)
    results: Dict[str, np.ndarray] = field(default_factory=dict)
    divergence: Dict[str, np.ndarray] = field(default_factory=dict)
    tree: Dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def run_dir(self) -> Optional[Path]:
        return self.output_dir


def _emit(events, kind: str, **fields) -> None:
    if events is not None:
        events.emit(kind, **fields)


def _say(events, text: str, level: str = "info") -> None:
    _emit(events, "message", level=level, text=text)


def open_side(path: Path, field_name: str) -> DumpSource:
    try:
        source = open_dump(path)
        require_steps(source)
    except DumpSourceError as exc:
        raise CompareError("{}: {}".format(field_name, exc)) from None
    return source


def choose_mode(requested: str, target: DumpSource, golden: DumpSource) -> str:
    g, t = golden.holds(), target.holds()  # the golden first: a helper may be reading the target meanwhile
    if requested == "auto":
        if t["tensor"] and g["tensor"]:
            return "tensor"
        if t["statistics"] and g["statistics"]:
            return "statistics"
        if t["md5"] and g["md5"]:
            return "md5"
        raise CompareError("compare: {} and {} hold nothing comparable (one has only hashes, the other none)"
                           .format(target.path, golden.path))
    for side, holds in ((target, t), (golden, g)):
        if not holds[requested]:
            what = {"tensor": "full tensors", "statistics": "statistics", "md5": "hashes (md5/crc32)"}[requested]
            raise CompareError("compare.mode: {} needs {}, which {} does not hold".format(requested, what, side.path))
    return requested


def pair_pieces(target: DumpSource, golden: DumpSource, ranks: List[int], steps: List[int],
                notes: List[str]) -> List[Tuple[int, int, int]]:
    """(rank, target step, golden step) triples to compare."""
    t_ranks, g_ranks = set(target.ranks()), set(golden.ranks())
    if ranks:
        missing = [r for r in ranks if r not in t_ranks or r not in g_ranks]
        if missing:
            notes.append("rank(s) {} asked for but not in both dumps".format(missing))
        t_ranks &= set(ranks)
        g_ranks &= set(ranks)
    for r in sorted(t_ranks - g_ranks):
        notes.append("rank {} only in the target".format(r))
    for r in sorted(g_ranks - t_ranks):
        notes.append("rank {} only in the golden".format(r))
    out = []
    for rank in sorted(t_ranks & g_ranks):
        ts, gs = target.steps(rank), golden.steps(rank)
        if steps:
            ts = [s for s in ts if s in steps]
            gs = [s for s in gs if s in steps]
        common = sorted(set(ts) & set(gs))
        if not common and len(ts) == 1 and len(gs) == 1:
            notes.append("rank {}: target step {} compared with golden step {}".format(rank, ts[0], gs[0]))
            out.append((rank, ts[0], gs[0]))
            continue
        for s in sorted(set(ts) ^ set(gs)):
            notes.append("rank {} step {}: only in the {}".format(rank, s, "target" if s in ts else "golden"))
        out.extend((rank, s, s) for s in common)
    return out


def _suspect(div: Dict[str, np.ndarray], i: int) -> Dict[str, Any]:
    stack = str(div["stack"][i] or "")
    return {
        "position": int(div["position"][i]), "record": str(div["record"][i]), "rank": int(div["rank"][i]),
        "step": int(div["step"][i]), "kind": divergence.SUSPECT_KINDS[int(div["kind"][i])],
        "direction": direction_word(int(div["direction"][i])), "phase": divergence.PHASES[int(div["phase"][i])],
        "score": _num(div["score"][i]),
        "out_err": _num(div["out_err"][i]), "in_err": _num(div["in_err"][i]),
        "verdict": VERDICTS[int(div["worst_verdict"][i])], "changed_args": str(div["changed_args"][i]),
        "note": str(div["note"][i]),
        "stack": stack.splitlines()[-1] if stack else "",
    }


def _num(v) -> Optional[float]:
    v = float(v)
    if math.isnan(v):
        return None
    return v if math.isfinite(v) else (1e308 if v > 0 else -1e308)


#: Seconds a launched member other than rank 0 waits before exiting on bad input that rank 0 reports.
ECHO_GRACE_S = 1.0


def run_compare(job: Any, events=None, *, fail_on_findings: bool = True, write: bool = True) -> CompareOutcome:
    """Compare the two dumps a compare job names and write the reports.

    Raises :class:`CompareError` (a ``JobError``: one line naming the field or file, exit code 2) for bad input.
    ``exit_code`` is 3 when some row is an error and ``fail_on_findings`` (the default: the runner turns 3 into
    0 unless ``--fail-on-findings`` was given), else 0. Events: ``message`` and one ``step`` per (rank, step).
    Under a launcher (torchrun, srun) the launched processes share the pairs (:mod:`engines.compare.dist_split`).
    """
    group = join_launch()
    if group is None:
        return _compare(job, events, fail_on_findings, write, None)
    return run_launched(group, job, events, fail_on_findings=fail_on_findings, write=write)


def run_launched(group: WorkGroup, job: Any, events=None, *, fail_on_findings: bool = True,
                 write: bool = True) -> CompareOutcome:
    """:func:`run_compare` as one member of ``group``: rank 0 returns the compare's outcome, the others rank 0's
    exit code and a summary of their share."""
    split = LaunchedSplit(group)
    try:
        outcome = _compare(job, events, fail_on_findings, write, split)
        split.tell({"exit_code": outcome.exit_code, "summary": outcome.summary,
                    "output_dir": str(outcome.output_dir) if outcome.output_dir else None})
        return outcome
    except BaseException as exc:
        split.failed(exc)
        if split.rank != 0 and isinstance(exc, CompareError):  # rank 0 says the launch's one line
            # torchrun stops the other processes as soon as one exits: leave rank 0 the time to say it first
            time.sleep(ECHO_GRACE_S)
            raise EchoedError(str(exc)) from None
        raise
    finally:
        split.close()


def _compare(job: Any, events, fail_on_findings: bool, write: bool,
             split: Optional[LaunchedSplit]) -> CompareOutcome:
    started = time.time()
    opts = CompareOptions.from_job(job)
    target = open_side(opts.target_path, "compare.target_path")
    golden = open_side(opts.golden_path, "compare.golden_path")
    prefetch = None
    try:
        notes: List[str] = ["target " + n for n in target.notes()] + ["golden " + n for n in golden.notes()]
        # ranks of another parallel layout merge here (a process that opens the sides itself does the same)
        merge = MergeOptions.of(opts)
        target, golden = merge_sides(target, golden, merge, notes)
        tally = MergeTally(target, golden)
        pieces = pair_pieces(target, golden, opts.rank, opts.step, notes)
        if len(pieces) <= 1 or opts.workers == 1:  # else worker processes read the pieces (pair_pool)
            prefetch = start_prefetch(target, golden)  # both msprobe dumps: the target read by a helper process
        mode = choose_mode(opts.mode, target, golden)
        if not pieces:
            raise CompareError("compare: no rank/step present in both {} and {}{}".format(
                opts.target_path, opts.golden_path, " (" + "; ".join(notes) + ")" if notes else ""))
        cross = bool(target.framework and golden.framework and target.framework != golden.framework)
        renumber = "msprobe" in (target.origin, golden.origin)
        keys = opts.key_options(map_mindspore=cross, renumber_backward=renumber)
        if {target.origin, golden.origin} == {"msprobe", "probe-tui"}:  # Tensor.__mul__ there, Tensor.mul here
            keys.msprobe_side = "target" if target.origin == "msprobe" else "golden"
        settings = PieceSettings(
            mode=mode, keys=keys,
            fuzzy=opts.fuzzy_match, cross_framework=cross, rel_eps=opts.rel_eps, small_value=opts.small_value,
            thresholds=opts.thresholds, highlight=opts.highlight, workers=opts.workers)
        _say(events, "compare {} ({}) against {} ({}), mode {}, {} piece(s)".format(
            target.path, target.origin, golden.path, golden.origin, mode, len(pieces)))
        spec = SideSpec(opts.target_path, opts.golden_path, mode, settings, merge)
        progress = _Progress(events, len(pieces), started)
        if split is not None:
            split.agree()
            split.open_parts(opts)
            if split.rank != 0:  # its progress counts its own share; rank 0's counts every pair
                progress.total = len(split.share(pieces))
            share = split.compute_share(pieces, target, golden, spec, opts.workers, progress.done)
            if split.rank != 0:
                told = split.wait_outcome(share)
                target.close()
                golden.close()
                return _member_outcome(split, share, told)
            results = split.results(share, len(pieces), progress.done)
        else:
            results = piece_results(pieces, target, golden, spec, opts.workers, progress.done)
        out = _Output(opts, job, target.framework)
        chunks = ResultChunks(opts.first_divergence, target.tree,
                              (lambda first: StreamingReport(out.folder(), opts, mode, first, out.stamp))
                              if write else None)
        unreadable = _Unreadable(mode)
        try:
            with closing(results):
                for result in results:
                    if result.error:
                        raise CompareError(result.error)
                    n, cols, only = result.n, result.cols, result.only
                    rank, t_step, _ = pieces[n]
                    del result
                    target.release_others(rank)  # the ranking reads this rank's module tree: only its reader open
                    tally.add(cols)
                    _note_unmatched_records(cols, rank, t_step, opts.fuzzy_match, notes)
                    unreadable.add(cols)
                    # no chunk is written while no tensor pair could be compared yet: if that stays so, the compare
                    # is bad input and nothing may be half-written
                    chunks.add(cols, rank, t_step, only, more=n + 1 < len(pieces) and not unreadable.nothing_compared)
                    del cols, only
            tally.note(notes, pieces[0][:2])
            unreadable.check(notes)  # before anything is written: nothing compared is bad input
        except BaseException as exc:
            chunks.abort()
            _failed(out.run, exc)
            raise
    except DumpSourceError as exc:  # a dump.json that is not one, read while choosing the mode or pairing
        raise CompareError(str(exc)) from None
    finally:
        if prefetch is not None:
            prefetch.shutdown(wait=False, cancel_futures=True)
    try:
        outcome = _finish(opts, mode, target, golden, pieces, notes, chunks, out.folder() if write else None,
                          fail_on_findings, events, started)
    except BaseException as exc:
        chunks.abort()
        _failed(out.run, exc)
        raise
    if out.run is not None:
        out.run.finish("finished", outcome.exit_code, _run_summary(outcome.summary))
    summary = outcome.summary
    counts = summary["verdicts"]
    summary["elapsed_s"] = round(time.time() - started, 3)
    _say(events, "{} rows: {}".format(summary["rows"], ", ".join("{} {}".format(v, k) for k, v in counts.items()
                                                                    if v)))
    target.close()
    golden.close()
    return outcome


def _finish(opts: CompareOptions, mode: str, target: DumpSource, golden: DumpSource, pieces, notes: List[str],
            chunks: ResultChunks, out_dir: Optional[Path], fail_on_findings: bool, events,
            started: float) -> CompareOutcome:
    """Rank what is left, summarise, write the reports: in one go when every result row is still held (the CSV
    starts in the background before the ranking), else the last chunk and the ranking."""
    streamed = chunks.stream is not None
    writer = None
    table: Dict[str, np.ndarray] = {}
    if streamed:
        chunks.flush()
    else:
        table = chunks.table()
        if out_dir is not None:
            from engines.compare.outputs import ReportWriter

            writer = ReportWriter(out_dir, opts, mode, table)  # a large CSV starts in the background
    try:
        chunks.rank_pending()
        outcome = _summarise(opts, mode, target, golden, pieces, notes, chunks, fail_on_findings)
        if not streamed:
            outcome.results = table
            outcome.tree = concat(chunks.trees)
        summary = outcome.summary
        if out_dir is not None:
            outcome.output_dir = out_dir
            summary["run_dir"] = str(out_dir)
            if streamed:
                outcome.files = chunks.stream.finish(outcome.divergence, summary, events)
            else:
                outcome.files = writer.finish(outcome.divergence, outcome.tree, chunks.golden_only(), summary,
                                              events)
            summary["files"] = outcome.files
            summary["elapsed_s"] = round(time.time() - started, 3)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    return outcome


def _member_outcome(split: LaunchedSplit, share: Dict[str, Any], told: Dict[str, Any]) -> CompareOutcome:
    """A launched member other than rank 0: rank 0's exit code, a summary of this member's share."""
    out = told.get("output_dir")
    summary = {"launched_rank": split.rank, "world_size": split.size, "pairs_compared": len(share["pieces"]),
               "results_written_by": "rank 0", "run_dir": out}
    return CompareOutcome(summary=summary, top_suspects=[], exit_code=int(told.get("exit_code", EXIT_OK)),
                          output_dir=Path(out) if out else None)


class _Progress:
    """One ``step`` event per piece as it finishes, in whichever process compared it: pairs done across
    workers (``records``: result rows compared so far)."""

    def __init__(self, events, total: int, started: float):
        self.events, self.total, self.started, self.rows = events, total, started, 0

    def done(self, count: int, result: PieceResult) -> None:
        self.rows += len(result.cols.get("verdict", ()))
        _emit(self.events, "step", step=count - 1, total_steps=self.total, unit="pair",
              elapsed_s=round(time.time() - self.started, 3), records=self.rows)


class _Output:
    """The result folder, made when the first report is written (a compare that fails before leaves none)."""

    def __init__(self, opts: CompareOptions, job: Any, framework: str):
        self.opts, self.job, self.framework = opts, job, framework
        self.dir: Optional[Path] = None
        self.run = None
        self.stamp = time.strftime("%Y%m%d%H%M%S")

    def folder(self) -> Path:
        if self.dir is None:
            from engines.compare.outputs import output_folder

            self.dir, self.run = output_folder(self.opts, self.job, self.framework)
        return self.dir


def _failed(run, exc: BaseException) -> None:
    if run is not None:
        run.finish("failed", 1, {"error": str(exc)})


def _summarise(opts: CompareOptions, mode: str, target: DumpSource, golden: DumpSource, pieces,
               notes: List[str], chunks: ResultChunks, fail_on_findings: bool) -> CompareOutcome:
    """The merged first-divergence ranking and the summary (from the counts and ranking entries the chunks
    kept; the result rows themselves may be written and gone)."""
    div_all = _merge_divergence(chunks.divs)
    div_all = collective_links.link_collectives(div_all, collective_links.collective_lookup(target, div_all))
    top = [_suspect(div_all, i) for i in range(min(opts.top, len(div_all.get("record", []))))]
    groups = suspects.group_suspects(div_all, {}, opts.top)
    counts = {name: int(chunks.counts[code]) for code, name in enumerate(VERDICTS)}
    summary = {
        "mode": mode, "target": str(opts.target_path), "golden": str(opts.golden_path),
        "target_origin": target.origin, "golden_origin": golden.origin,
        "pieces": [{"rank": r, "target_step": a, "golden_step": b} for r, a, b in pieces],
        "rows": int(chunks.rows), "verdicts": counts,
        "golden_only_rows": int(chunks.golden_only_rows), "notes": notes,
        "first_differing_op": chunks.first_differing,
        "largest_error_op": chunks.largest_error,
        "errors": counts["error"], "warnings": counts["warning"], "unmatched": counts["unmatched"],
        "top_suspects": top, "suspect_groups": groups, "options": summary_options(opts),
        "tables": [dict(suspects.suspects_table(groups, _many_ranks(pieces, div_all)), max_rows=opts.top)]
        if groups else [],  # groups are cut to top already: a viewer shows them all
    }
    exit_code = EXIT_FINDINGS if (fail_on_findings and counts["error"] > 0) else EXIT_OK
    return CompareOutcome(summary=summary, top_suspects=top, exit_code=exit_code, divergence=div_all)


def _many_ranks(pieces, div: Dict[str, np.ndarray]) -> bool:
    """Whether the suspects table names ranks: several rank pieces, or one merged piece whose suspects name the
    rank whose shard diverged."""
    ranks = div.get("rank")
    return len({r for r, _, _ in pieces}) > 1 or (ranks is not None and len(np.unique(ranks)) > 1)


class _Unreadable:
    """Tensor mode: the row pairs that could not be compared because a tensor could not be read, counted piece by
    piece (the result rows may be written and gone by the end)."""

    _TRIED = (tensor_metrics.ST_OK, tensor_metrics.ST_NONFINITE, tensor_metrics.ST_EMPTY,
              tensor_metrics.ST_UNREADABLE, tensor_metrics.ST_READ_ERROR)

    def __init__(self, mode: str):
        self.on = mode == "tensor"
        self.failed = self.tried = 0
        self.names: List[str] = []
        self.why = ""

    def add(self, cols: Dict[str, np.ndarray]) -> None:
        if not self.on or not len(cols.get("status", ())):
            return
        status = cols["status"]
        self.tried += int(np.isin(status, self._TRIED).sum())
        failed = np.flatnonzero(status == tensor_metrics.ST_READ_ERROR)
        if not failed.size:
            return
        if not self.failed:
            self.why = str(cols["reasons"][failed[0]]).rpartition("read failed: ")[2]
        self.names += ["{}.{}".format(cols["record"][i], cols["slot"][i]) for i in failed[:max(0, 3 - len(self.names))]]
        self.failed += int(failed.size)

    @property
    def nothing_compared(self) -> bool:
        """Tensor mode, and every pair with data on both sides so far could not be read (or none was seen yet)."""
        return self.on and self.failed == self.tried

    def check(self, notes: List[str]) -> None:
        """Say how many pairs could not be compared, and why; when that is every pair with data on both sides,
        nothing was compared: bad input (exit code 2)."""
        if not self.failed:
            return
        detail = "first: {}{}: {}".format(", ".join(self.names), ", ..." if self.failed > 3 else "", self.why)
        if self.failed == self.tried:
            raise CompareError("no tensor pair could be compared: all {} could not be read ({})".format(
                self.failed, detail))
        notes.append("{} of {} tensor pair(s) could not be compared: their tensor data could not be read ({})"
                     .format(self.failed, self.tried, detail))


def _note_unmatched_records(cols: Dict[str, np.ndarray], rank: int, step: int, fuzzy: bool,
                            notes: List[str]) -> None:
    """Say when whole target records found no golden counterpart: with exact names, the later calls of the same
    APIs then pair with the wrong golden calls (their call indices shift)."""
    codes = cols["record_code"]
    lonely = np.flatnonzero(np.bincount(codes[cols["matched"]], minlength=int(codes.max()) + 1) == 0) \
        if codes.size else codes
    if not lonely.size:
        return
    first = cols["record"][np.argmax(codes == lonely[0])]
    text = "rank {} step {}: {} target record(s) have no golden counterpart (first: {})".format(
        rank, step, len(lonely), first)
    if not fuzzy:
        text += "; calls after them may pair with the wrong golden calls: consider fuzzy_match"
    notes.append(text)


def _run_summary(summary: Dict[str, Any]) -> Dict[str, Any]:
    """What run.json keeps: the scalars and the verdict counts (the tables live in the result files)."""
    keep = ("mode", "target", "golden", "rows", "verdicts", "errors", "warnings", "unmatched",
            "first_differing_op", "largest_error_op", "golden_only_rows", "elapsed_s")
    out = {k: summary[k] for k in keep if k in summary}
    out["top_suspects"] = [t["record"] for t in summary.get("top_suspects", [])]
    return out


def _merge_divergence(divs: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    """All pieces' rankings in one list: tier (update-phase ops after a model that shows a signal), then best
    score first (positions renumbered).

    The pieces' entries (one per record of every rank and step) are taken out of ``divs`` column by column and
    reordered in place, so they are held about once, not three times (pieces, joined, sorted): with many ranks
    this list is the largest thing a compare holds at its end."""
    if len(divs) > 1:
        keys = [k for k in divs[0] if all(k in d for d in divs)]
        table = {k: np.concatenate([d.pop(k) for d in divs]) for k in keys}
    else:
        table = divs[0] if divs else {}
    divs.clear()
    if not table or len(table["record"]) == 0:
        return table
    order = np.lexsort((table["order"], table["step"], table["rank"], -table["score"], table["tier"]))
    for k in list(table):
        table[k] = table[k][order]
    table["position"] = np.arange(1, len(order) + 1, dtype=np.int64)
    return table


__all__ = ["CompareError", "CompareOutcome", "run_compare", "run_launched", "EXIT_OK", "EXIT_BAD_INPUT",
           "EXIT_FINDINGS"]
