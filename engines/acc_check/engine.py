"""``acc_check``: replay every captured API call of a tensor dump on the reference (CPU, float64 for float32 inputs,
float32 for float16/bfloat16) and judge the dump's outputs against it with msprobe's standards (docs/ACC_CHECK.md).

The dump's own outputs are the device under test; the reference is the replay. Each API (its forward call and,
when the dump kept them, its backward gradients) is read, replayed, judged and written to the journal before the
next one is read, so memory holds one API's tensors and an interrupted check continues where it stopped
(``results.Journal``). Calls that cannot replay are listed with the reason (status SKIP), never passed.
"""

import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines.acc_check import cases as cs
from engines.acc_check import results as rs
from engines.acc_check import rules
from engines.acc_check import standards as st
from engines.acc_check.generated import SEED, generated_inputs
from engines.acc_check.seam import ReferenceReplay
from engines.capture.options import field_of as _get
from engines.dumps.opener import open_dump
from engines.dumps.rows import RowTable, parse_shape
from engines.dumps.source import DumpSource, TensorReader
from engines.errors import EXIT_FINDINGS, EXIT_OK, BadInputError, JobError
from engines.frameworks import adapter_module
from engines.overflow.replay import UnsafeApiName
from engines.result_folder import result_folder


class AccCheckResult:
    def __init__(self, exit_code: int, summary: Dict[str, Any], run_dir: Optional[str]) -> None:
        self.exit_code = exit_code
        self.summary = summary
        self.run_dir = run_dir


# Measured on a real msprobe 26.2 dump (tests/data/msprobe/real/tensor_mix): its backward hooks keep the gradients
# of the inner kernels (linear: addmm's bias, input, weight.t(); cross_entropy: nll_loss's), not the call's.
MSPROBE_BACKWARD = ("msprobe's backward records hold the gradients of the call's inner kernels, not of its inputs: "
                    "not judged")


def _after_api(count: int) -> None:
    """Called after each checked API (tests stop a check here to resume it)."""


def run_acc_check(job: Any, events: Any = None) -> AccCheckResult:
    section = _get(job, "acc_check", None)
    path = str(_get(section, "path", ""))
    source = _open(path)
    try:
        replay = _replay_module(source, section)
        pieces = _pieces(source, section)
        out_dir, run = _output_folder(job, section, path)
        journal = rs.Journal(out_dir, str(Path(path).expanduser().resolve()), time.strftime("%Y%m%d%H%M%S"))
        try:
            if journal.finished:
                raise JobError("acc_check.output_path: %s holds a finished check; give a new folder" % out_dir)
            if journal.done:
                _say(events, "resuming the check in %s: %d API(s) already checked" % (out_dir, len(journal.done)))
            _check(source, pieces, section, replay, journal, events, len(pieces) > 1)
            journal.finish()
        finally:
            journal.close()
        reference = _get(section, "reference", None)
        rs.write_store(out_dir, journal, {"dump": path, "reference": str(_get(reference, "device", "cpu")),
                                          "reference_dtype": str(_get(reference, "dtype", "auto"))})
    finally:
        source.close()
    summary = summarise(journal, out_dir)
    exit_code = EXIT_FINDINGS if summary["errors"] else EXIT_OK
    if run is not None:
        run.finish(status="finished", exit_code=exit_code, summary=summary)
    return AccCheckResult(exit_code, summary, str(out_dir))


def _open(path: str) -> DumpSource:
    if not path:
        raise JobError("acc_check.path: required")
    try:
        return open_dump(path)
    except BadInputError as exc:
        raise JobError("acc_check.path: %s" % exc) from None


def replay_module(framework: str, task: str = "acc_check") -> ReferenceReplay:
    """The reference replay of a dump's framework (``pytorch`` or ``mindspore``), one line when it is missing."""
    name = "MindSpore" if framework == "mindspore" else "PyTorch"
    try:
        module: ReferenceReplay = adapter_module("mindspore" if framework == "mindspore" else "pytorch",
                                                 "acc_replay")
    except ImportError as exc:
        raise JobError("%s: replaying the calls of this %s dump needs %s (%s)" % (task, name, name, exc)) from None
    return module


def _replay_module(source: DumpSource, section: Any = None) -> ReferenceReplay:
    replay = replay_module(source.framework)
    configure(replay, section)
    return replay


def configure(replay: ReferenceReplay, section: Any) -> None:
    """The job's reference (``acc_check.reference``) set on the replay, one line when it cannot run here."""
    reference = _get(section, "reference", None)
    dtype, device = str(_get(reference, "dtype", "auto")), str(_get(reference, "device", "cpu"))
    try:
        replay.configure_reference(dtype, device)
    except replay.ReplayError as exc:
        raise JobError("acc_check.reference.device: %s" % exc) from None


def _pieces(source: DumpSource, section: Any) -> List[Tuple[int, int]]:
    ranks = set(_get(section, "rank", None) or [])
    steps = set(_get(section, "step", None) or [])
    out = [(r, s) for r in source.ranks() if not ranks or r in ranks for s in source.steps(r)
           if not steps or s in steps]
    if not out:
        raise JobError("acc_check.path: %s holds no step%s to check" % (
            source.path, " of the chosen ranks/steps" if ranks or steps else ""))
    return out


def _output_folder(job: Any, section: Any, path: str) -> Tuple[Path, Any]:
    return result_folder(job, "acc_check", _get(section, "output_path", None), _get(job, "dump_path", "./probe_dump"),
                         {"task": "acc_check", "acc_check": {"path": path}})


# -- the check -----------------------------------------------------------------------------------------------------
class _Api:
    """An API to check: its forward case and, when the dump has it, its backward case."""

    __slots__ = ("name", "forward", "backward")

    def __init__(self, name: str, forward: Optional[cs.Case], backward: Optional[cs.Case]) -> None:
        self.name = name
        self.forward = forward
        self.backward = backward


def apis_of(table: RowTable, args: Dict[str, str], rank: int, step: int, section: Any, prefix: str) -> List[_Api]:
    """The APIs of one piece in dump order (forward cases with their backward case attached)."""
    white = set(_get(section, "api_list", None) or [])
    black = set(_get(section, "black_list", None) or [])
    backward = bool(_get(section, "backward", True))
    generate = bool(_get(section, "generate", True))
    forward: Dict[str, cs.Case] = {}
    backs: Dict[str, cs.Case] = {}
    order: List[str] = []
    for case in cs.cases_of(table, args, rank, step, backward, generate):
        if (white and case.api not in white) or case.api in black:
            continue
        base = case.forward_record[:-len(".forward")]
        if base not in forward and base not in backs:
            order.append(base)
        (forward if case.direction == "forward" else backs)[base] = case
    return [_Api(prefix + base, forward.get(base), backs.get(base)) for base in order]


def _check(source: DumpSource, pieces: List[Tuple[int, int]], section: Any, replay: Any, journal: rs.Journal,
           events: Any, several: bool) -> None:
    plan = []
    for rank, step in pieces:
        table = source.rows(rank, step)
        prefix = "rank%d.step%d." % (rank, step) if several else ""
        plan.append((rank, step, [a.name for a in apis_of(table, {}, rank, step, section, prefix)]))
    total = sum(len(names) for _, _, names in plan)
    workers = int(_get(section, "workers", 1) or 1)
    if workers > 1:
        _check_parallel(source, plan, section, journal, events, several, workers, total)
        return
    started = time.time()
    count = 0
    for rank, step, _ in plan:
        table = source.rows(rank, step)
        args = source.record_args(rank, step)
        prefix = "rank%d.step%d." % (rank, step) if several else ""
        reader = source.tensor_spec(rank, step).open()
        try:
            for api in apis_of(table, args, rank, step, section, prefix):
                if api.backward is not None and source.origin == "msprobe" and not api.backward.skip:
                    api.backward.skip = MSPROBE_BACKWARD
                count += 1
                if api.name in journal.done:
                    continue
                entry, outputs = check_api(api, table, reader, replay, rank, step)
                journal.add(entry, outputs)
                _emit(events, "step", step=count - 1, total_steps=total, unit="api",
                      elapsed_s=round(time.time() - started, 3), records=count)
                _after_api(count)
        finally:
            reader.close()
        source.release_others(rank)


def _check_parallel(source: DumpSource, plan: List[Tuple[int, int, List[str]]], section: Any, journal: rs.Journal,
                    events: Any, several: bool, workers: int, total: int) -> None:
    """APIs replayed on ``workers`` processes (each reads its own APIs' tensors); results come back in dump order
    and only this process writes them, so the files are the same as with one worker."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    todo: List[Tuple[int, int, str, str]] = []
    done_before = 0
    for rank, step, names in plan:
        prefix = "rank%d.step%d." % (rank, step) if several else ""
        for name in names:
            if name in journal.done:
                done_before += 1
            else:
                todo.append((rank, step, prefix, name))
    started = time.time()
    count = done_before
    # fork where the platform has it: a spawned worker imports torch again (seconds each); the parent has run no
    # torch computation here (it only lists the APIs), and each worker runs one torch thread
    # MindSpore's runtime does not survive a fork once it ran an op (workers forked after the demo trained in the
    # same process hung): MindSpore workers are always spawned
    methods = multiprocessing.get_all_start_methods()
    fork = "fork" in methods and sys.platform.startswith("linux") and source.framework != "mindspore"
    context = multiprocessing.get_context("fork" if fork else "spawn")
    with ProcessPoolExecutor(max_workers=min(workers, max(1, len(todo))), mp_context=context,
                             initializer=_worker_init, initargs=(str(source.path), section, source.framework)) as pool:
        try:
            for entry, outputs in pool.map(_worker_check, todo, chunksize=4):
                count += 1
                journal.add(entry, outputs)
                _emit(events, "step", step=count - 1, total_steps=total, unit="api",
                      elapsed_s=round(time.time() - started, 3), records=count)
                _after_api(count)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


_WORKER: Dict[str, Any] = {}


def _worker_init(path: str, section: Any, framework: str) -> None:
    replay = replay_module(framework)
    configure(replay, section)
    replay.set_threads(1)
    _WORKER.update(source=open_dump(path), section=section, replay=replay, piece=None)


def _worker_check(task: Tuple[int, int, str, str]) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    rank, step, prefix, name = task
    source: DumpSource = _WORKER["source"]
    piece = _WORKER["piece"]
    if piece is None or piece[0] != (rank, step):
        if piece is not None:
            piece[2].close()
        table = source.rows(rank, step)
        args = source.record_args(rank, step)
        apis = {a.name: a for a in apis_of(table, args, rank, step, _WORKER["section"], prefix)}
        piece = _WORKER["piece"] = ((rank, step), table, source.tensor_spec(rank, step).open(), apis)
    api = piece[3][name]
    if api.backward is not None and source.origin == "msprobe" and not api.backward.skip:
        api.backward.skip = MSPROBE_BACKWARD
    return check_api(api, piece[1], piece[2], _WORKER["replay"], rank, step)


def check_api(api: _Api, table: RowTable, reader: TensorReader, replay: Any, rank: int, step: int
              ) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """(the API's result row, its per-output rows)."""
    outputs: List[rules.OutputResult] = []
    messages: List[str] = []
    fwd_status = bwd_status = " "
    if api.forward is not None:
        fwd_outs, why = _guarded(_run_forward, api.forward, table, reader, replay)
        fwd_status = st.SKIP if why else st.worst([o.status for o in fwd_outs])
        if why:
            messages.append("forward: " + why)
        outputs.extend(fwd_outs)
    if api.backward is not None:
        bwd_outs, why = _guarded(_run_backward, api.backward, table, reader, replay)
        bwd_status = st.SKIP if why else st.worst([o.status for o in bwd_outs])
        if why:
            messages.append("backward: " + why)
        outputs.extend(bwd_outs)
    failures = ["%s: %s" % (_tail(o.name), o.message) for o in outputs
                if o.status in (st.ERROR, st.WARNING) and o.message]
    messages = failures + messages
    overall = st.worst([s for s in (fwd_status, bwd_status) if s != " "])
    entry = {"rank": rank, "step": step, "name": api.name, "forward": fwd_status, "backward": bwd_status,
             "status": overall, "message": "; ".join(messages)}
    rows = []
    for o in outputs:
        direction = "backward" if ".backward." in o.name else "forward"
        rows.append({"api": api.name, "name": o.name, "direction": direction, "bench_dtype": o.bench_dtype,
                     "device_dtype": o.device_dtype, "shape": o.shape, "standard": o.standard,
                     "metrics": {k: v for k, v in o.metrics.items() if v == v}, "status": o.status,
                     "message": o.message})
    return entry, rows


def _guarded(run: Any, case: cs.Case, table: RowTable, reader: TensorReader, replay: Any
             ) -> Tuple[List[rules.OutputResult], str]:
    """A call whose judging fails unexpectedly is listed (SKIP, with the error), never passed and never a crash;
    a damaged dump and a crafted record name stay bad input (exit code 2)."""
    try:
        result: Tuple[List[rules.OutputResult], str] = run(case, table, reader, replay)
        return result
    except (BadInputError, KeyboardInterrupt):
        raise
    except Exception as exc:
        return [], "not judged: %s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0][:200]
                                            if str(exc).strip() else "")


def _tail(name: str) -> str:
    for key in (".forward.", ".backward."):
        if key in name:
            return key.strip(".") + "." + name.split(key, 1)[1]
    return name


def _saved(table: RowTable, reader: TensorReader, rows: List[int]) -> Dict[str, Tuple[np.ndarray, str, List[int]]]:
    out = {}
    for r in rows:
        if bool(table.is_tensor[r]) and int(table.data[r]) >= 0:
            out[str(table.slot[r])] = _read(table, reader, r)
    return out


def _read(table: RowTable, reader: TensorReader, r: int) -> Tuple[np.ndarray, str, List[int]]:
    loc = int(table.data[r])
    _, numel, _ = reader.info(loc)
    shape = parse_shape(str(table.shape[r]))
    data = reader.read(loc, 0, numel)
    return data, cs.tensor_dtype_name(table, r), list(shape if shape is not None else (numel,))


def _run_forward(case: cs.Case, table: RowTable, reader: TensorReader, replay: Any
                 ) -> Tuple[List[rules.OutputResult], str]:
    if case.skip:
        return [], case.skip
    saved = _saved(table, reader, case.inputs)
    device_outs: Optional[Dict[str, Any]] = None
    if case.generated:
        made, why = generated_inputs(table, [r for r in case.inputs if str(table.slot[r]) not in saved], case.record)
        if made is None:
            return [], "inputs cannot be generated: " + why
        saved.update(made)
    try:
        ref, outs, _ = replay.replay_forward(case.forward_record, case.args_json, saved, autocast=case.autocast)
        ref = replay.DTYPE_PREFIX + ref  # the results name the reference dtype: torch.float64, mindspore.float32
        if case.generated:
            device_outs = replay.run_as_saved(case.forward_record, case.args_json, saved)
    except UnsafeApiName as exc:
        raise JobError("acc_check.path: %s" % exc) from None
    except replay.ReplayError as exc:
        return [], "not replayed: %s" % exc
    results = []
    for r in case.outputs:
        slot = str(table.slot[r])
        name = case.record + "." + slot
        if device_outs is not None:
            results.append(_judge_generated(case, table, r, name, device_outs.get(slot), outs.get(slot), ref))
        else:
            results.append(_judge(case, table, reader, r, name, outs.get(slot), ref))
    return results, ("" if results else "no output to compare")


GENERATED = "inputs generated from the statistics (seed %d), device side run here as recorded" % SEED


def _judge_generated(case: cs.Case, table: RowTable, r: int, name: str, device: Any, bench: Any, ref: str
                     ) -> rules.OutputResult:
    """An output of a call replayed from generated inputs: this machine's run as recorded against the reference."""
    if not isinstance(device, np.ndarray):
        got = rules.judge_value(name, device, bench)
    else:
        if bench is not None and not isinstance(bench, np.ndarray):
            bench = np.asarray(bench)
        got = rules.judge_tensor(name, case.api, device, cs.tensor_dtype_name(table, r), bench, ref)
    got.message = GENERATED + ("; " + got.message if got.message else "")
    return got


def _run_backward(case: cs.Case, table: RowTable, reader: TensorReader, replay: Any
                  ) -> Tuple[List[rules.OutputResult], str]:
    if case.skip:
        return [], case.skip
    grads_in, grads_out = cs.backward_pairs(case, table)
    if not grads_in or not grads_out:
        return [], "the backward record keeps no gradient to replay"
    saved = _saved(table, reader, case.forward_inputs)
    grads = {slot: _read(table, reader, r) for slot, r in grads_in.items()}
    try:
        ref, _, got = replay.replay_forward(case.forward_record, case.args_json, saved, grads, sorted(grads_out),
                                            autocast=case.autocast)
        ref = replay.DTYPE_PREFIX + ref
    except UnsafeApiName as exc:
        raise JobError("acc_check.path: %s" % exc) from None
    except replay.ReplayError as exc:
        return [], "not replayed: %s" % exc
    for slot, r in grads_out.items():
        grad = got.get(slot)
        shape = parse_shape(str(table.shape[r]))
        if grad is not None and shape is not None and tuple(np.shape(grad)) != shape:
            # msprobe's backward hooks record the gradients of the inner kernels (addmm: bias, input, weight.t())
            return [], ("the dump's gradients do not line up with the call's inputs (%s is %s, the gradient of %s "
                        "is %s)" % (table.slot[r], list(shape), slot, list(np.shape(grad))))
    results = []
    for slot, r in sorted(grads_out.items(), key=lambda kv: kv[1]):
        results.append(_judge(case, table, reader, r, case.record + "." + str(table.slot[r]), got.get(slot), ref))
    return results, ""


def _judge(case: cs.Case, table: RowTable, reader: TensorReader, r: int, name: str, bench: Any, ref: str
           ) -> rules.OutputResult:
    bench_dtype = ref
    if not bool(table.is_tensor[r]):
        return rules.judge_value(name, cs.device_value(table, r), bench)
    if int(table.data[r]) < 0:
        return rules.OutputResult(name, bench_dtype, str(table.dtype[r]), str(table.shape[r])).set(
            st.SKIP, "the output tensor was not saved")
    data, dtype, shape = _read(table, reader, r)
    device = np.asarray(data).reshape(shape)
    if bench is not None and not isinstance(bench, np.ndarray):
        bench = np.asarray(bench)
    if case.autocast and "float" in dtype:
        dtype = case.autocast  # computed in the low dtype (a gradient cast back to a float32 leaf's dtype too)
    return rules.judge_tensor(name, case.api, device, dtype, bench, bench_dtype, case.direction == "backward")


# -- summary -------------------------------------------------------------------------------------------------------
def summarise(journal: rs.Journal, out_dir: Path) -> Dict[str, Any]:
    apis = [e["api"] for e in journal.apis()]
    counts = {s: sum(1 for a in apis if a["status"] == s) for s in (st.PASS, st.WARNING, st.ERROR, st.SKIP)}
    failing = [a for a in apis if a["status"] in (st.ERROR, st.WARNING)]
    skipped = [a for a in apis if st.SKIP in (a["forward"], a["backward"])]
    reasons: Dict[str, List[str]] = {}
    for a in skipped:
        for part in a["message"].split("; "):
            if part.startswith(("forward: ", "backward: ")):
                reason = part.split(": ", 1)[1]
                if reason.startswith(cs.NOT_SAVED):
                    reason = cs.NOT_SAVED.rstrip(": ")
                names = reasons.setdefault(reason, [])
                if a["name"] not in names:
                    names.append(a["name"])
    head = "%d API(s) checked: %d pass, %d warning, %d error, %d not replayed (SKIP)" % (
        len(apis), counts[st.PASS], counts[st.WARNING], counts[st.ERROR], counts[st.SKIP])
    errors = [a for a in failing if a["status"] == st.ERROR]
    if errors:
        head += ". First error: %s (%s)" % (errors[0]["name"], errors[0]["message"][:160])
    out: Dict[str, Any] = {
        "verdict": head, "results": str(out_dir), "checked": len(apis), "passed": counts[st.PASS],
        "warnings": counts[st.WARNING], "errors": counts[st.ERROR], "not_replayed_apis": counts[st.SKIP],
        "result_csv": str(journal.result_csv), "details_csv": str(journal.details_csv),
        "failing": [{"name": a["name"], "status": a["status"], "message": a["message"]} for a in failing],
        "not_replayed": {k: len(v) for k, v in reasons.items()},
    }
    tables = []
    if failing:
        tables.append({"title": "APIs that fail the check (details: %s)" % journal.details_csv.name,
                       "columns": ["API", "forward", "backward", "reason"],
                       "rows": [[a["name"], a["forward"], a["backward"], a["message"][:100]] for a in failing[:30]]})
    if reasons:
        tables.append({"title": "calls not replayed, by reason",
                       "columns": ["reason", "calls", "e.g."],
                       "rows": [[k, len(v), ", ".join(v[:2])] for k, v in sorted(reasons.items(),
                                                                             key=lambda kv: -len(kv[1]))]})
    if tables:
        out["tables"] = tables
    return out


def _emit(events: Any, kind: str, **fields: Any) -> None:
    if events is not None:
        events.emit(kind, **fields)


def _say(events: Any, text: str) -> None:
    _emit(events, "message", level="info", text=text)
