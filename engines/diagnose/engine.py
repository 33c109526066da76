"""``run_diagnose(job, events) -> DiagnoseOutcome``: the two stages, the verdict, the result folder.

Stage 1 reads (or runs, in statistics mode) both sides and compares them; stage 2, unless ``stats_only``, re-runs
both targets capturing tensors of the suspect region only (one step) and compares again. The report says which
stage decided (docs/DIAGNOSE.md).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from engines import safe_fs
from engines.diagnose import disk, evidence, region, rule, stages
from engines.diagnose.sides import DiagnoseError, Side, resolve_side, statistics_job, tensor_job
from engines.errors import EXIT_FINDINGS, EXIT_OK

VERDICT_FILE = "verdict.json"
CULPRIT, NO_SINGLE, NO_DIFFERENCE = "culprit", "no single culprit", "no difference"


@dataclass
class DiagnoseOutcome:
    exit_code: int
    summary: Dict[str, Any]
    verdict: Dict[str, Any] = field(default_factory=dict)
    output_dir: Optional[Path] = None

    @property
    def run_dir(self) -> Optional[Path]:
        return self.output_dir


def _output(job: Any) -> Tuple[Path, Any]:
    sec = job.diagnose
    if sec.output_path is not None:
        out = Path(sec.output_path)
        if out.exists() and not out.is_dir():
            raise DiagnoseError("diagnose.output_path: {} is a file, not a folder".format(out))
        if (out / VERDICT_FILE).exists() or (out / "stage1").exists():
            raise DiagnoseError("diagnose.output_path: {} already holds a diagnose result; give a new folder".format(
                out))
        try:
            safe_fs.make_dirs(out)
        except OSError as exc:
            raise DiagnoseError("diagnose.output_path: {}".format(safe_fs.describe_os_error(out, exc))) from None
        return out, None
    from engines.runs import RunError, create_run
    from schemas import dump_config

    try:
        run = create_run(job.dump_path, task="diagnose", config=dump_config(job), framework="none")
    except (RunError, OSError) as exc:
        raise DiagnoseError("dump_path: {}".format(exc)) from None
    return run.path, run


def run_diagnose(job: Any, events: Any = None) -> DiagnoseOutcome:
    """Diagnose the two sides of ``job`` (a ``schemas.DiagnoseJob``). Bad input raises ``DiagnoseError`` (exit
    code 2) before anything is written; a target that fails ends with its exit code (1)."""
    started = time.time()
    sec = job.diagnose
    sides = [resolve_side("target", sec.target, sec.level), resolve_side("golden", sec.golden, sec.level)]
    out, run = _output(job)
    try:
        verdict = _diagnose(sec, sides, out, events)
    except stages.CaptureFailed as exc:
        if run is not None:
            run.finish("failed", exc.exit_code, {"error": str(exc)})
        summary = {"error": str(exc), "run_dir": str(out)}
        return DiagnoseOutcome(exc.exit_code, summary, output_dir=out)
    except BaseException as exc:
        if run is not None:
            run.finish("failed", 1, {"error": str(exc)})
        raise
    verdict["elapsed_s"] = round(time.time() - started, 3)
    safe_fs.write_atomic(out / VERDICT_FILE, json.dumps(verdict, indent=2, default=str),
                         tmp=out / (VERDICT_FILE + ".partial"))
    summary = summary_of(verdict, out)
    code = EXIT_FINDINGS if verdict["verdict"] == CULPRIT else EXIT_OK
    if run is not None:
        run.finish("finished", code, {k: v for k, v in summary.items() if k != "tables"})
    return DiagnoseOutcome(code, summary, verdict, out)


def _stage1(sec: Any, sides: List[Side], out: Path, events: Any) -> Tuple[Dict[str, str], Any]:
    dumps: Dict[str, str] = {}
    for side in sides:
        if side.dump is not None:
            dumps[side.name] = side.dump
            continue
        stages.say(events, "stage 1: running the {} in statistics mode".format(side.name))
        assert side.run is not None
        dumps[side.name] = stages.run_capture(statistics_job(side.run, out / "stage1" / side.name, sec.steps),
                                              events, "stage 1 {}".format(side.name))
    stages.say(events, "stage 1: comparing statistics")
    cmp1 = stages.compare(dumps["target"], dumps["golden"], out / "stage1" / "compare", "statistics",
                          sec.fuzzy_match, events, "stage 1 compare")
    return dumps, cmp1


def _stage2(sec: Any, sides: List[Side], out: Path, events: Any, cmp1: Any,
            j1: rule.Judgement) -> Dict[str, Any]:
    info: Dict[str, Any] = {"ran": False}
    if sec.stats_only:
        info["why_not"] = "statistics only was asked for (stats_only)"
        return info
    if not j1.differs:
        info["why_not"] = "nothing differs in stage 1"
        return info
    cannot = [s for s in sides if s.run is None]
    if cannot:
        info["why_not"] = "no target to re-run: " + "; ".join(s.why_not for s in cannot)
        if all(s.dump is not None and stages.holds_tensors(s.dump) for s in sides):
            # two dumps that hold real tensors already: stage 2 is their tensor compare, nothing re-run
            stages.say(events, "stage 2: the given dumps hold tensors: comparing them")
            cmp2 = stages.compare(str(sides[0].dump), str(sides[1].dump), out / "stage2" / "compare", "tensor",
                                  sec.fuzzy_match, events, "stage 2 compare")
            info.update(ran=True, why_not="", source="the given dumps' tensors (no re-run)", compare=cmp2)
        return info
    picks = rule.candidates(cmp1.summary.get("suspect_groups") or [])[:sec.suspects]
    step = int(picks[0].get("step") or 0)
    names = region.suspect_region(picks, stages.results_of(cmp1), step)
    info.update(step=step, records=names)
    runs: Dict[str, str] = {}
    try:
        for side in sides:
            stages.say(events, "stage 2: re-running the {}, tensors of {} call(s) at step {}".format(
                side.name, len(names), step))
            assert side.run is not None
            runs[side.name] = stages.run_capture(tensor_job(side.run, out / "stage2" / side.name, step, names),
                                                 events, "stage 2 {}".format(side.name))
    except stages.CaptureFailed as exc:
        info["why_not"] = "the re-run failed: {}".format(exc)
        info["dumps"] = runs
        return info
    stages.say(events, "stage 2: comparing tensors")
    try:
        cmp2 = stages.compare(runs["target"], runs["golden"], out / "stage2" / "compare", "tensor",
                              sec.fuzzy_match, events, "stage 2 compare")
    except DiagnoseError:
        raise
    except Exception as exc:  # a compare that finds nothing to compare is bad input of the compare, not ours
        info["why_not"] = "the tensor compare could not run: {}".format(exc)
        info["dumps"] = runs
        return info
    info.update(ran=True, dumps=runs, compare=cmp2)
    return info


def _diagnose(sec: Any, sides: List[Side], out: Path, events: Any) -> Dict[str, Any]:
    dumps1, cmp1 = _stage1(sec, sides, out, events)
    groups1 = cmp1.summary.get("suspect_groups") or []
    j1 = rule.judge(groups1, cmp1.divergence, score_min=sec.score_min, ratio_min=sec.ratio_min)
    info2 = _stage2(sec, sides, out, events, cmp1, j1)
    cmp2 = info2.pop("compare", None)
    j2 = None
    if cmp2 is not None:
        j2 = rule.judge(cmp2.summary.get("suspect_groups") or [], cmp2.divergence, score_min=sec.score_min,
                        ratio_min=sec.ratio_min)
    cols1 = stages.results_of(cmp1)
    verdict: Dict[str, Any] = {
        "target": sides[0].origin, "golden": sides[1].origin,
        "stage1": {"dumps": dumps1, "compare": stages.dump_of(cmp1), "judgement": j1.to_dict(),
                   "first_differing_op": cmp1.summary.get("first_differing_op"),
                   "largest_error_op": cmp1.summary.get("largest_error_op")},
        "stage2": dict(info2, compare=stages.dump_of(cmp2), judgement=j2.to_dict() if j2 else None),
        "module_shares": evidence.module_shares(cmp1.divergence, cols1),
    }
    if j2 is not None:
        verdict["decided_by"] = "stage 2 (tensors)"
        if j2.conclusive and j1.conclusive:
            verdict["stage2_outcome"] = "confirmed" if rule.same_culprit(j1.top, j2.top) else "overruled"
        else:
            verdict["stage2_outcome"] = "decided" if j2.conclusive else "inconclusive"
        deciding, cmp, cols = j2, cmp2, stages.results_of(cmp2)
    else:
        verdict["decided_by"] = "stage 1 (statistics)"
        verdict["stage2_outcome"] = None
        deciding, cmp, cols = j1, cmp1, cols1
    verdict["reason"] = deciding.reason
    if deciding.conclusive and deciding.top is not None:
        verdict["verdict"] = CULPRIT
        ev = evidence.culprit(deciding.top, cols, cmp.divergence, deciding.explained_err or 0.0)
        if cmp is not cmp1 and (not ev["module"] or not ev["stack"]):
            _fill_location(ev, cols1)
        verdict["culprit"] = ev
    else:
        verdict["verdict"] = NO_DIFFERENCE if not j1.differs else NO_SINGLE
        verdict["culprit"] = None
    verdict["disk"] = disk.disk_report(dumps1.values(), (info2.get("dumps") or {}).values())
    return verdict


def _fill_location(ev: Dict[str, Any], cols1: Dict[str, Any]) -> None:
    """Module path and stack of a stage-2 culprit from the stage-1 rows (a tensor run of a few calls may not
    record their enclosing modules)."""
    if not cols1 or "record" not in cols1:
        return
    rows = [i for i, r in enumerate(cols1["record"].tolist()) if r == ev["op"] and int(cols1["step"][i]) == ev["step"]]
    if not rows:
        return
    i = rows[0]
    parent = str(cols1["parent"][i] or "")
    if parent and not ev["module"]:
        ev["module"] = evidence.short_op(parent)
    stack = str(cols1["stack"][i] or "")
    if stack and not ev["stack"]:
        ev["stack"] = evidence._stack_lines(stack)
        ev["where"] = evidence.innermost_frame(stack) or ev["where"]


def _fmt(v: Optional[float]) -> str:
    return "-" if v is None else "{:.3g}".format(v)


def summary_of(verdict: Dict[str, Any], out: Path) -> Dict[str, Any]:
    """The runner's summary (scalars and tables): what the CLI prints on stderr and run.json keeps."""
    ev = verdict.get("culprit") or {}
    d = verdict.get("disk") or {}
    summary: Dict[str, Any] = {
        "verdict": verdict["verdict"], "culprit": ev.get("op"), "module": ev.get("module") or None,
        "where": ev.get("where") or None, "step": ev.get("step"), "rank": ev.get("rank"),
        "decided_by": verdict["decided_by"], "stage2": verdict.get("stage2_outcome") or
        verdict["stage2"].get("why_not"), "reason": verdict.get("reason"),
        "stage2_disk_bytes": d.get("stage2_disk_bytes"), "full_dump_bytes": d.get("full_dump_bytes"),
        "run_dir": str(out), "verdict_file": str(out / VERDICT_FILE),
    }
    tables = []
    if ev:
        rows = [[i["name"], _fmt(i["err"]), "yes" if i.get("matches") else "no"] for i in ev.get("inputs", [])]
        rows += [[o["name"], _fmt(o["err"]), "output"] for o in ev.get("outputs", [])]
        if rows:
            tables.append({"title": "Evidence: error against the golden", "columns": ["tensor", "rel err",
                                                                                      "input matches"],
                           "rows": rows})
    shares = verdict.get("module_shares") or []
    if shares and verdict["verdict"] != CULPRIT:
        tables.append({"title": "Share of the error added, per top-level module", "columns": [
            "module", "share", "ops", "largest op"], "rows": [
            [s["module"], "{:.1%}".format(s["share"]), s["ops"], s["largest_op"]] for s in shares[:12]]})
    summary["tables"] = tables
    return {k: v for k, v in summary.items() if v is not None}
