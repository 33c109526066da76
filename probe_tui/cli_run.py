"""``--run CONFIG`` and the shorthand job commands: build a job, run it through engines.runner, report."""

import sys
from typing import Any, Dict

from probe_tui.cli_config import load_or_report
from probe_tui.cli_output import fail, print_json
from schemas.layout import layout_from_text


def _event_sink(args):
    """Rich progress on stderr, plus JSON lines when --events is given. Returns (sink, progress, opened file)."""
    from engines.events import JsonlSink, TeeSink
    from probe_tui.launch_view import progress_choice
    from probe_tui.progress import RichProgressSink

    label, shown = progress_choice()  # several processes: each line says its rank; local rank 0 draws progress
    progress = RichProgressSink(rank_label=label, progress=shown)
    sinks = [progress]
    opened = None
    target = getattr(args, "events", None)
    if target == "-":
        sinks.append(JsonlSink(sys.stdout))
    elif target:
        try:
            opened = open(target, "a", encoding="utf-8")
        except OSError as exc:
            raise _BadInput(f"--events {target}: {exc.strerror or exc}") from None
        sinks.append(JsonlSink(opened))
    return TeeSink(*sinks), progress, opened


class _BadInput(Exception):
    pass


def run_job_reporting(job, args, *, label: str) -> int:
    from engines.runner import JobError, run_job
    from engines.runs import RunError
    from engines.targets import TargetError

    try:
        sink, progress, opened = _event_sink(args)
    except _BadInput as exc:
        return fail(str(exc))
    try:
        outcome = run_job(job, events=sink, fail_on_findings=getattr(args, "fail_on_findings", False))
    except (JobError, TargetError, RunError) as exc:
        if getattr(exc, "echoed", False):  # a launched compare's member: rank 0 prints the launch's one line
            return 2
        return fail(f"{label}: {exc}")
    finally:
        progress.close()
        if opened is not None:
            opened.close()
    from probe_tui.launch_view import launch_json, launch_summary, quiet_line
    from probe_tui.summary_view import print_mapping, print_summary

    launch = getattr(outcome, "launch", None)
    if launch and not launch.get("owner"):  # one summary per launch: the owner's (probe_tui/launch_view.py)
        line = quiet_line(outcome)
        if line:
            print(f"probe-tui: {line}", file=sys.stderr)
        return outcome.exit_code
    if launch:
        print_mapping(launch_summary(dict(outcome.summary or {}), launch), stream=sys.stderr)
    elif getattr(job, "task", None) == "diagnose" and not getattr(args, "json", False):
        from probe_tui.diagnose_view import print_report, read_verdict

        verdict = read_verdict((outcome.summary or {}).get("verdict_file", ""))
        if verdict is not None:  # the report on stdout; a diagnose that failed says why on stderr
            print_report(verdict, stream=sys.stdout)
        else:
            print_summary(outcome, stream=sys.stderr)
    else:
        print_summary(outcome, stream=sys.stderr)
    if getattr(args, "json", False) and getattr(args, "events", None) != "-":
        print_json(launch_json(outcome))
    return outcome.exit_code


def run_config_file(path: str, args) -> int:
    job = load_or_report(path)
    if job is None:
        return 2
    return run_job_reporting(job, args, label=path)


def _run_section(task: str, section: Dict[str, Any], args, label: str) -> int:
    """Run a one-section job built from the command line (``--output`` sets the section's ``output_path``)."""
    if args.output:
        section["output_path"] = args.output
    job = load_or_report({"task": task, task: section}, label=label)
    if job is None:
        return 2
    return run_job_reporting(job, args, label=label)


def cmd_compare(args) -> int:
    section = {"target_path": args.target, "golden_path": args.golden, "mode": args.mode,
               "fuzzy_match": bool(args.fuzzy)}
    for flag, key in (("target_layout", "target_layout"), ("golden_layout", "golden_layout")):
        text = getattr(args, flag, None)
        if text:
            try:
                section[key] = layout_from_text(text)
            except ValueError as exc:
                return fail("compare --{}: {}".format(flag.replace("_", "-"), exc))
    if args.workers is not None:
        section["workers"] = args.workers  # checked by the config schema (at least 1): one line, exit 2
    if args.top is not None:
        try:
            section["top"] = int(args.top)
        except ValueError:
            return fail("compare --top: {!r} is not a whole number".format(args.top))
        # below 1: refused by the config schema (compare.top), one line, exit 2
    return _run_section("compare", section, args, label="compare")


def _diagnose_side(text: str) -> Dict[str, Any]:
    """A side from the command line: 'demo', a script (.py), a config (.json other than an msprobe dump.json),
    else a run or dump path."""
    from pathlib import Path

    if text == "demo":
        return {"target": "demo"}
    path = Path(text)
    if path.suffix == ".py":
        return {"target": {"script": text}}
    if path.suffix == ".json" and path.name != "dump.json" and path.is_file():
        return {"config": text}
    return {"path": text}


def cmd_diagnose(args) -> int:
    section: Dict[str, Any] = {"target": _diagnose_side(args.target), "golden": _diagnose_side(args.golden),
                               "stats_only": bool(args.stats_only), "fuzzy_match": not args.exact}
    for flag in ("suspects", "steps"):
        text = getattr(args, flag)
        if text is not None:
            try:
                section[flag] = int(text)
            except ValueError:
                return fail("diagnose --{}: {!r} is not a whole number".format(flag, text))
    return _run_section("diagnose", section, args, label="diagnose")


def cmd_analyze_overflow(args) -> int:
    return _run_section("analyze_overflow", {"path": args.path, "dtype": args.dtype}, args,
                        label="analyze-overflow")


def cmd_acc_check(args) -> int:
    section: Dict[str, Any] = {"path": args.dump}
    if args.workers is not None:
        section["workers"] = args.workers  # checked by the config schema (1..64): one line, exit 2
    if args.api:
        section["api_list"] = list(args.api)
    if args.no_backward:
        section["backward"] = False
    reference = {key: value for key, value in (("dtype", args.reference_dtype), ("device", args.reference_device))
                 if value is not None}
    if reference:
        section["reference"] = reference
    return _run_section("acc_check", section, args, label="acc-check")


def cmd_reproduce(args) -> int:
    """``reproduce RESULT_OR_DUMP OP_NAME``: the script and input file of one API call (engines/acc_check/reproduce.py)."""
    from engines.acc_check.reproduce import reproduce, usage
    from engines.errors import BadInputError

    try:
        script, npz = reproduce(args.source, args.op, args.output)
    except BadInputError as exc:
        return fail(str(exc))
    print("wrote %s and %s; run: %s" % (script, npz, usage(script).replace(script.name, str(script), 1)))
    return 0


def cmd_api_precision_compare(args) -> int:
    """``api-precision-compare NPU GPU -o DIR``: the three-way verdict (engines/acc_check/precision_compare.py)."""
    from engines.acc_check.precision_compare import api_precision_compare
    from engines.errors import EXIT_FINDINGS, BadInputError

    try:
        summary = api_precision_compare(args.npu, args.gpu, args.output)
    except BadInputError as exc:
        return fail(str(exc))
    if args.json:
        print_json(summary)
    else:
        c = summary["counts"]
        print("%d APIs: %d error, %d warning, %d SKIP, %d pass" % (summary["apis"], c["error"], c["warning"],
                                                                  c["SKIP"], c["pass"]))
        for api in summary["failing"][:20]:
            print("  %s %s: %s" % (api["status"], api["name"], api["message"][:160]))
        print("wrote %s and %s" % (summary["result_csv"], summary["details_csv"]))
    return EXIT_FINDINGS if args.fail_on_findings and summary["counts"]["error"] else 0


def cmd_merge_runs(args) -> int:
    """``merge-runs OUT RUN...``: one run folder from the node-local copies of a launch (engines/run_merge.py)."""
    from engines.run_merge import MergeError, describe, merge_runs
    from probe_tui.launch_view import rank_table
    from probe_tui.summary_view import print_mapping

    try:
        meta = merge_runs(args.out, args.runs, link=args.link)
    except MergeError as exc:
        return fail(str(exc))
    if args.json:
        print_json({"run_dir": args.out, **{k: meta.get(k) for k in ("run_id", "status", "ranks", "world_size",
                                                                     "per_rank", "totals", "merged_from")}})
        return 0
    totals = meta.get("totals") or {}
    print(describe(meta, args.out))
    print_mapping({"status": meta.get("status"), "records": totals.get("records"),
                   "tensor_rows": totals.get("tensor_rows"), "size_bytes": totals.get("bytes"),
                   "steps": totals.get("steps"), "tables": [rank_table(meta.get("per_rank") or {})]},
                  stream=sys.stdout)
    return 0
