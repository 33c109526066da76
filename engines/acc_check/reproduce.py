"""``probe-tui reproduce RESULT_OR_DUMP OP_NAME``: one API call of a dump as a self-contained script and an input
file, to hand to a kernel team (docs/ACC_CHECK.md, "Reproducing one API").

The call is found in the dump (an acc_check result folder names the dump it checked), its input tensors and its
recorded outputs are written to ``<record>.npz`` (bfloat16 as float32 values, the dtypes beside them), and
``<record>.py`` (``engines.acc_check.reproduce_script``) reruns it on a device and on the CPU reference.
"""

import io
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from engines import safe_fs
from engines.acc_check import cases as cs
from engines.acc_check import reproduce_script, reproduce_script_ms
from engines.acc_check import results as rs
from engines.acc_check.engine import _read, replay_module
from engines.dumps.opener import open_dump
from engines.dumps.source import DumpSource
from engines.errors import BadInputError, JobError

_PIECE = re.compile(r"^rank(\d+)\.step(\d+)\.(.+)$")


def reproduce(path: str, op_name: str, out_dir: str = ".") -> Tuple[Path, Path]:
    """(script, input file) written for ``op_name`` (``Functional.softmax.0``, with or without ``.forward``)."""
    dump_path = _dump_of(Path(path).expanduser())
    try:
        source = open_dump(dump_path)
    except BadInputError as exc:
        raise JobError("reproduce: %s" % exc) from None
    try:
        replay = replay_module(source.framework, "reproduce")
        record, pieces = _record_and_pieces(source, op_name)
        for rank, step in pieces:
            table = source.rows(rank, step)
            args = source.record_args(rank, step)
            case = next((c for c in cs.cases_of(table, args, rank, step, backward=False) if c.record == record),
                        None)
            if case is None:
                continue
            return _write(source, table, case, rank, step, replay, Path(out_dir).expanduser())
    finally:
        source.close()
    raise JobError("reproduce: %s has no API call %s (names as in the result CSV: Functional.softmax.0)" % (
        dump_path, op_name))


def _dump_of(path: Path) -> Path:
    """The dump an acc_check result folder checked, or ``path`` itself."""
    journal = path / rs.JOURNAL
    if path.is_dir() and journal.is_file():
        try:
            with open(journal, encoding="utf-8") as fh:
                return Path(str(json.loads(fh.readline())["dump"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise JobError("reproduce: %s: not a readable acc_check journal (%s)" % (journal, exc)) from None
    return path


def _record_and_pieces(source: DumpSource, op_name: str) -> Tuple[str, List[Tuple[int, int]]]:
    m = _PIECE.match(op_name)
    pieces = [(r, s) for r in source.ranks() for s in source.steps(r)]
    if m:
        pieces = [(int(m.group(1)), int(m.group(2)))]
        op_name = m.group(3)
    record = op_name if op_name.endswith((".forward", ".backward")) else op_name + ".forward"
    if record.endswith(".backward"):
        record = record[:-len(".backward")] + ".forward"  # the script reruns the forward call
    return record, pieces


def _write(source: DumpSource, table: Any, case: cs.Case, rank: int, step: int, replay: Any,
           out_dir: Path) -> Tuple[Path, Path]:
    if case.skip and not case.skip.startswith(cs.NOT_SAVED):
        raise JobError("reproduce: %s cannot replay: %s" % (case.record, case.skip))
    try:
        expression = replay.callable_expression(case.record)
    except replay.ReplayError as exc:
        raise JobError("reproduce: %s" % exc) from None
    reader = source.tensor_spec(rank, step).open()
    try:
        arrays: Dict[str, np.ndarray] = {}
        dtypes: Dict[str, Dict[str, str]] = {"inputs": {}, "outputs": {}}
        for rows, kind in ((case.inputs, "inputs"), (case.outputs, "outputs")):
            for r in rows:
                if not bool(table.is_tensor[r]) or int(table.data[r]) < 0:
                    continue
                data, dtype, shape = _read(table, reader, r)
                arrays[str(table.slot[r])] = np.asarray(data).reshape(shape)
                dtypes[kind][str(table.slot[r])] = dtype
    finally:
        reader.close()
    missing = [str(table.slot[r]) for r in case.inputs if bool(table.is_tensor[r]) and int(table.data[r]) < 0]
    if missing:
        raise JobError("reproduce: %s: the dump did not save its input tensors (%s): a statistics dump cannot be "
                       "reproduced exactly" % (case.record, ", ".join(missing[:4])))
    try:
        safe_fs.make_dirs(out_dir)
    except OSError as exc:
        raise JobError("reproduce: %s" % safe_fs.describe_os_error(out_dir, exc)) from None
    script = out_dir / (case.record + ".py")
    npz = out_dir / (case.record + ".npz")
    buffer = io.BytesIO()
    np.savez(buffer, __dtypes__=np.array(json.dumps(dtypes)), **arrays)
    with safe_fs.atomic_file(npz, "wb") as fh:
        fh.write(buffer.getvalue())
    with safe_fs.atomic_file(script, "w", encoding="utf-8") as fh:
        fh.write(script_text(case.record, expression, case.args_json, npz.name, _note(case.record, source.framework),
                             source.framework))
    return script, npz


def _note(record: str, framework: str = "pytorch") -> str:
    prefix = record.split(".", 1)[0]
    if prefix in ("Tensor", "Functional", "Torch", "VF", "Aten", "Mint", "MintFunctional"):
        return ""
    if framework == "mindspore":
        return "\nThe call is probe-tui's demo operator: probe-tui must be importable (engines.adapters.mindspore).\n"
    return ("\nThe call is a custom operator: register it first (import the library that defines it; the demo's "
            "ops: engines.adapters.torch.demo_model).\n")


def script_text(record: str, expression: str, args_json: str, npz_name: str, note: str = "",
                framework: str = "pytorch") -> str:
    setup = ""
    template = reproduce_script.TEMPLATE
    if framework == "mindspore":
        template = reproduce_script_ms.TEMPLATE
        if record.startswith("Demo."):  # the demo's operators are probe-tui's own module
            setup = "\nimport engines.adapters.mindspore.demo_ops  # noqa: F401  (probe-tui's demo operators)\n"
    elif record.startswith("Demo."):  # the demo's operators register when its model module is imported
        setup = ("\ntry:\n    import engines.adapters.torch.demo_model  # noqa: F401  (probe-tui's demo operators)\n"
                 "except ImportError:\n    pass\n")
    return template.format(NAME=record, NAME_REPR=repr(record), CALL=expression, ARGS=repr(args_json or "{}"),
                           NPZ=npz_name, NPZ_REPR=repr(npz_name), SCRIPT=record + ".py", NOTE=note, SETUP=setup)


def usage(script: Path) -> str:
    """How to run a written script (its docstring's command line, which names the devices of its framework)."""
    try:
        for line in script.read_text(encoding="utf-8").splitlines()[:12]:
            if line.strip().startswith("python "):
                return line.strip()
    except OSError:
        pass
    return "python %s" % script


def first_failing(result_dir: Path) -> Optional[str]:
    """The first API with an error in a finished check (the app's default selection)."""
    apis, _ = rs.read_result(result_dir)
    return next((a["name"] for a in apis if a["status"] == "error"), None)
