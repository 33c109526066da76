"""``analyze_overflow``: replay each call an overflow_check run flagged, in high precision, and classify it.

For every flagged call kept in the run's dump (``engines.overflow.results``), the call that *produced* the
non-finite values is run again from its saved inputs (``engines.adapters.torch.overflow_replay``), once as saved
and once with its floating tensors raised to float32/float64, and judged:

- ``range``: the high-precision replay overflows too: the math itself gives inf/NaN on these inputs (msprobe's
  "normal overflow"); scale the inputs or guard the op.
- ``precision``: only the low-precision dtype overflows (msprobe's "abnormal overflow"): the true result is
  finite; run the op in a wider dtype or rescale.
- ``not reproduced``: the saved inputs do not overflow on the replay device: the original device's kernel did.
- ``inherited``: the call's inputs were already non-finite (or, for a collective, arrived from another rank); the
  step's first origin is the one to look at, and across ranks the summary's ``cross_rank_origin``
  (``engines.overflow.cross_rank``).
- ``not replayed``: backward and module calls (their forward inputs are not kept), collectives, or arguments
  that cannot be rebuilt; the row says why.

Results: ``overflow_analysis.h5`` (table ``replays``) and ``overflow_analysis.csv`` in a new run folder under
``dump_path`` (or ``output_path``), and a summary with one verdict line per call.
"""

import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from engines import safe_fs
from engines.capture.options import field_of as _get
from engines.errors import EXIT_FINDINGS, EXIT_OK, JobError
from engines.frameworks import adapter_module
from engines.overflow import origin as og
from engines.overflow.cross_rank import cross_rank_origin, origin_line, origin_table, read_ranks
from engines.overflow.replay import UnsafeApiName
from engines.overflow.results import KIND as OVERFLOW_KIND
from engines.overflow.results import read_calls
from engines.result_folder import result_folder
from engines.store import Column, DumpReader, StoreError, StoreWriter, TableSpec, open_rank_dirs, store_kinds

RESULT_KIND = "overflow_analysis"
CSV_NAME = "overflow_analysis.csv"
CSV_COLUMNS = ("rank", "step", "name", "origin", "dtype", "replay_dtype", "as_saved", "high_precision",
               "high_max_abs", "category", "verdict")

REPLAYS = TableSpec("replays", (
    Column("rank", "int64"),
    Column("step", "int64"),
    Column("name", "str"),
    Column("origin", "str"),
    Column("dtype", "str", default=""),
    Column("replay_dtype", "str", default=""),
    Column("as_saved", "str", default=""),
    Column("high_precision", "str", default=""),
    Column("high_max_abs", "float64", default="nan"),
    Column("category", "str"),
    Column("verdict", "json", default=""),
))


class AnalysisResult:
    def __init__(self, exit_code: int, summary: Dict[str, Any], run_dir: Optional[str]) -> None:
        self.exit_code = exit_code
        self.summary = summary
        self.run_dir = run_dir


class Judgement:
    __slots__ = ("rank", "step", "name", "origin", "dtype", "replay_dtype", "as_saved", "high", "high_max_abs",
                 "category", "verdict")

    def __init__(self, rank: int, step: int, name: str, origin: str, category: str, verdict: str,
                 dtype: str = "", replay_dtype: str = "", as_saved: str = "", high: str = "",
                 high_max_abs: float = float("nan")) -> None:
        self.rank = rank
        self.step = step
        self.name = name
        self.origin = origin
        self.dtype = dtype
        self.replay_dtype = replay_dtype
        self.as_saved = as_saved
        self.high = high
        self.high_max_abs = high_max_abs
        self.category = category
        self.verdict = verdict

    def row(self) -> List[Any]:
        return [self.rank, self.step, self.name, self.origin, self.dtype, self.replay_dtype, self.as_saved,
                self.high, self.high_max_abs, self.category, self.verdict]


def _job_error(text: str) -> Exception:
    return JobError(text)


def locate_ranks(path: str) -> Dict[int, Path]:
    """Rank folders holding an ``overflow`` store: from a run folder, its ``latest``, a dump_path, or one rank
    folder."""
    given = Path(path).expanduser()
    if not given.exists():
        raise _job_error("analyze_overflow.path: %s: no such file or folder" % given)
    if given.is_dir() and OVERFLOW_KIND in _kinds(given):
        rank = int(given.name[4:]) if given.name.startswith("rank") and given.name[4:].isdigit() else 0
        return {rank: given}
    from engines.runs import RunError, open_run

    try:
        run = open_run(given)
    except RunError as exc:
        raise _job_error("analyze_overflow.path: %s" % exc) from None
    try:
        ranks = {r: d for r, d in open_rank_dirs(run.path).items() if OVERFLOW_KIND in _kinds(d)}
    except StoreError:  # a run folder without rank folders (a compare result)
        ranks = {}
    if not ranks:
        raise _job_error("analyze_overflow.path: %s is not an overflow_check run (no rank folder holds an "
                         "overflow store)" % run.path)
    return ranks


def _kinds(folder: Path) -> List[str]:
    try:
        return list(store_kinds(folder))
    except (StoreError, OSError):
        return []


def _saved_call(dump: DumpReader, step: int, name: str) -> Tuple[Optional[str], Dict[str, Any], Dict[str, str]]:
    """(args JSON, {slot: (array, dtype, shape)}, {slot: dtype}) of the record ``name`` of ``step``."""
    recs = dump.records(step, ["name", "args"])
    rows = [i for i, n in enumerate(recs["name"].tolist()) if n == name]
    if not rows:
        return None, {}, {}
    record_row = int(recs["row"][rows[0]])
    args = recs["args"][rows[0]]
    t = dump.tensors(step, ["record", "slot", "dtype", "shape", "pool", "offset"])
    saved: Dict[str, Any] = {}
    dtypes: Dict[str, str] = {}
    for i in range(len(t["record"])):
        if int(t["record"][i]) != record_row:
            continue
        slot = t["slot"][i]
        dtypes[slot] = t["dtype"][i]
        if t["pool"][i] and int(t["offset"][i]) >= 0:
            data = dump.tensor_data(int(t["row"][i]))
            saved[slot] = (data, t["dtype"][i], json.loads(t["shape"][i]))
    return args, saved, dtypes


def judge_replay(result: Any, low_dtype: str, replay_dtype: str, finfo_max: Optional[float]) -> Tuple[str, str]:
    """(category, verdict line) from a replay's facts."""
    high = result.high
    as_saved = result.as_saved
    if high.kinds:
        if high.kinds & og.NAN and not high.kinds & (og.POSINF | og.NEGINF):
            return "range", ("%s gives nan too: the op is undefined on these inputs (0/0, inf-inf, log or sqrt of "
                             "a negative...); guard its inputs" % replay_dtype)
        return "range", ("overflows in %s too (%s): the math itself exceeds every float range on these inputs; "
                         "rescale the inputs or guard the op" % (replay_dtype, og.kinds_text(high.kinds)))
    if not as_saved.kinds:
        return "not reproduced", ("no overflow when replayed as saved, finite in %s: the original device's kernel "
                                  "produced it (compare with a CPU or another device's run)" % replay_dtype)
    low = low_dtype.replace("torch.", "") or "the saved dtype"
    if finfo_max is not None and high.max_abs > finfo_max:
        return "precision", ("finite in %s (largest |value| %.4g, above %s's %.4g): a %s range overflow; run this "
                             "op in float32 or rescale its input" % (replay_dtype, high.max_abs, low, finfo_max, low))
    return "precision", ("finite in %s (largest |value| %.4g fits %s): the %s computation overflowed inside the "
                         "op; run it in a wider dtype" % (replay_dtype, high.max_abs, low, low))


def _output_dtype(dtypes: Dict[str, str], nonfinite: Dict[str, str]) -> str:
    for slot in sorted(nonfinite):
        if slot.startswith("output") and slot in dtypes:
            return dtypes[slot]
    for slot, dt in sorted(dtypes.items()):
        if slot.startswith("output"):
            return dt
    return ""


def analyse_rank(rank: int, rank_dir: Path, replay_dtype: str, device: str, replay_mod: Any) -> List[Judgement]:
    calls = read_calls(rank_dir)
    if not calls:
        return []
    dump = DumpReader(rank_dir) if "dump" in _kinds(rank_dir) else None
    firsts = {c["step"]: c["name"] for c in calls if c.get("first")}
    out: List[Judgement] = []
    try:
        for c in calls:
            if not c.get("kept"):
                continue
            step, name, origin_name = int(c["step"]), c["name"], c["origin"]
            j = Judgement(rank, step, name, origin_name, "not replayed", "", replay_dtype=replay_dtype)
            if origin_name == og.ORIGIN_NAMES[og.INPUTS]:
                first = firsts.get(step)
                j.category = "inherited"
                j.verdict = ("its inputs were already non-finite" +
                             ("; the step's first origin is %s" % first if first and first != name else
                              " when the step began (see earlier steps)"))
            elif origin_name == og.ORIGIN_NAMES[og.RECEIVED]:
                j.category = "inherited"
                j.verdict = ("its non-finite values arrived from another rank through this collective; the "
                             "cross-rank origin names the rank and op that produced them")
            elif c.get("kind") != "api":
                j.verdict = "%s calls are not replayed (only API calls are)" % c.get("kind")
            elif c.get("direction") != "forward":
                j.verdict = "backward calls are not replayed (their forward inputs are not kept)"
            elif dump is None:
                j.verdict = "the run's dump store is missing"
            else:
                args, saved, dtypes = _saved_call(dump, step, name)
                j.dtype = _output_dtype(dtypes, c.get("nonfinite") or {})
                if args is None:
                    j.verdict = "its record is not in the dump"
                elif c.get("not_saved"):
                    lost = c["not_saved"]
                    j.verdict = "inputs not saved: " + "; ".join("%s (%s)" % kv for kv in sorted(lost.items()))
                else:
                    try:
                        result = replay_mod.replay(name, args, saved, replay_dtype, device)
                    except UnsafeApiName as exc:
                        raise _job_error("analyze_overflow.path: %s, step %d: %s" % (rank_dir, step, exc)) from None
                    except replay_mod.ReplayError as exc:
                        j.verdict = str(exc)
                    else:
                        j.as_saved = og.kinds_text(result.as_saved.kinds) or "finite"
                        j.high = og.kinds_text(result.high.kinds) or "finite"
                        j.high_max_abs = result.high.max_abs
                        j.category, j.verdict = judge_replay(result, j.dtype, replay_dtype,
                                                             replay_mod.finfo_max(j.dtype))
            out.append(j)
    finally:
        if dump is not None:
            dump.close()
    return out


def run_analyze_overflow(job: Any, events: Any = None) -> AnalysisResult:
    section = getattr(job, "analyze_overflow", None)
    if section is None and isinstance(job, dict):
        section = job.get("analyze_overflow")
    path = _get(section, "path", None)
    if not path:
        raise _job_error("analyze_overflow.path: required")
    replay_dtype = _get(section, "dtype", "float64")
    device = _get(section, "device", "cpu")
    ranks = locate_ranks(str(path))
    _say(events, "replaying the flagged calls of %s in %s on %s" % (path, replay_dtype, device))
    judgements: List[Judgement] = []
    for rank, rank_dir in sorted(ranks.items()):
        judgements.extend(analyse_rank(rank, rank_dir, replay_dtype, device, _replay_module(rank_dir)))
    out_dir, run = _output_folder(job, _get(section, "output_path", None))
    _write(out_dir, judgements)
    summary = summarise(judgements, replay_dtype, out_dir)
    if len(ranks) > 1:
        found = cross_rank_origin(read_ranks(ranks))
        if found is not None:
            summary["cross_rank_origin"] = found
            summary["verdict"] = origin_line(found, len(ranks)) + ". " + summary["verdict"]
            summary.setdefault("tables", []).insert(0, origin_table(found))
    exit_code = EXIT_FINDINGS if judgements else EXIT_OK
    if run is not None:
        run.finish(status="finished", exit_code=exit_code, summary=summary)
    return AnalysisResult(exit_code, summary, str(out_dir))


def _replay_module(rank_dir: Path) -> Any:
    """The replay of the framework that wrote the dump (PyTorch unless the dump says MindSpore)."""
    framework = "pytorch"
    if "dump" in _kinds(rank_dir):
        reader = DumpReader(rank_dir)
        try:
            framework = str(reader.meta.get("framework") or "pytorch")
        finally:
            reader.close()
    name, package = ("MindSpore", "mindspore") if framework == "mindspore" else ("PyTorch", "torch")
    try:
        return adapter_module(framework if framework == "mindspore" else "pytorch", "overflow_replay")
    except ImportError as exc:
        raise _job_error("analyze_overflow: replaying calls of this dump needs %s (%s)" % (name, exc)) from None


def summarise(judgements: List[Judgement], replay_dtype: str, out_dir: Path) -> Dict[str, Any]:
    counts: Dict[str, int] = {}
    for j in judgements:
        counts[j.category] = counts.get(j.category, 0) + 1
    out: Dict[str, Any] = {"results": str(out_dir)}
    if not judgements:
        out["verdict"] = "the run flagged no call: nothing to replay"
    else:
        parts = ["%d %s" % (n, c) for c, n in sorted(counts.items(), key=lambda kv: _ORDER.get(kv[0], 9))]
        head = next((j for j in judgements if j.category in ("range", "precision", "not reproduced")), None)
        line = "%d flagged call%s: %s" % (len(judgements), "" if len(judgements) == 1 else "s", ", ".join(parts))
        if head is not None:
            line += ". %s (step %d): %s" % (head.name, head.step, head.verdict)
        out["verdict"] = line
    for c in ("range", "precision", "not reproduced", "inherited", "not replayed"):
        out[c.replace(" ", "_")] = counts.get(c, 0)
    if judgements:
        ranks = len({j.rank for j in judgements}) > 1
        out["tables"] = [{
            "title": "flagged calls replayed in %s (details: %s)" % (replay_dtype, CSV_NAME),
            "columns": (["rank"] if ranks else []) + ["step", "call", "verdict"],
            "rows": [([j.rank] if ranks else []) + [j.step, j.name, short_verdict(j)] for j in judgements],
        }]
    out["replays"] = [dict(zip(CSV_COLUMNS, j.row())) for j in judgements]
    return out


def short_verdict(j: Judgement) -> str:
    """A table cell: the category and the one fact behind it."""
    if j.category == "range":
        return "range: %s in %s too" % (j.high, j.replay_dtype)
    if j.category == "precision":
        low = j.dtype.replace("torch.", "") or "low precision"
        return "precision: only in %s (%s max |x| %.3g)" % (low, j.replay_dtype, j.high_max_abs)
    if j.category == "not reproduced":
        return "not reproduced on replay"
    if j.category == "inherited":
        return "inherited: inputs already non-finite"
    return "not replayed: " + j.verdict.split(";")[0][:60]


_ORDER = {"range": 0, "precision": 1, "not reproduced": 2, "inherited": 3, "not replayed": 4}


def _output_folder(job: Any, output_path: Optional[str]) -> Tuple[Path, Any]:
    return result_folder(job, "analyze_overflow", output_path, _get(job, "dump_path", "./probe_dump"),
                         {"task": "analyze_overflow"}, taken=(CSV_NAME, RESULT_KIND + ".h5"))


def _write(out_dir: Path, judgements: List[Judgement]) -> None:
    with safe_fs.atomic_file(out_dir / CSV_NAME, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for j in judgements:
            w.writerow(j.row())
    writer = StoreWriter(out_dir, RESULT_KIND, (REPLAYS,), meta={"schema_version": 1})
    status = "failed"
    try:
        for step in sorted({j.step for j in judgements}):
            rows = [j for j in judgements if j.step == step]
            writer.append("replays", rank=[j.rank for j in rows], step=[j.step for j in rows],
                          name=[j.name for j in rows], origin=[j.origin for j in rows], dtype=[j.dtype for j in rows],
                          replay_dtype=[j.replay_dtype for j in rows], as_saved=[j.as_saved for j in rows],
                          high_precision=[j.high for j in rows], high_max_abs=[j.high_max_abs for j in rows],
                          category=[j.category for j in rows], verdict=[j.verdict for j in rows])
            writer.commit(step)
        status = "finished"
    finally:
        writer.close(status)




def _say(events: Any, text: str) -> None:
    if events is not None:
        events.emit("message", level="info", text=text)
