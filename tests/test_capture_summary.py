"""The one-screen summary after a capture: where non-finite values start (masks and what follows them set apart),
else the largest magnitudes; one size, a number in run.json and the same text in the CLI and the app; under 20
lines at 80 columns; strict JSON in run.json."""

import io
import json
import os
import re
from pathlib import Path

import numpy as np
from test_capture_support import TINY, Dump

from engines.capture.highlights import TensorHighlights


def _run(tmp_path, knobs, level="L1"):
    from engines.runner import run_job
    from schemas import load_config

    job = load_config({"task": "statistics", "level": level, "dump_path": str(tmp_path),
                       "target": {"demo": knobs}})
    outcome = run_job(job)
    assert outcome.exit_code == 0
    return outcome


def _strict(text):
    def refuse(name):
        raise AssertionError("non-JSON constant %s" % name)

    return json.loads(text, parse_constant=refuse)


def _render(summary):
    from probe_tui.summary_view import print_mapping

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"
    try:
        print_mapping(summary, out)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in out.getvalue().splitlines()]


def test_a_healthy_run_lists_its_largest_magnitudes(tmp_path):
    outcome = _run(tmp_path, dict(TINY, steps=2))
    summary = outcome.summary
    assert "bytes" not in summary and "size" not in summary
    assert summary["size_bytes"] == summary["capture"]["bytes"] > 0
    # the demo's causal mask is -inf: filled on purpose, and the softmax input after it inherits it
    assert re.fullmatch(r"\d+ rows: \d+ mask, \d+ inherited", summary["non_finite"])
    table = summary["tables"][0]
    assert table["title"] == "largest magnitudes" and table["columns"] == ["tensor", "step", "max", "min"]
    rows = table["rows"]
    assert len(rows) == 5 and len({r[0] for r in rows}) == 5
    # the first row is the largest finite |value| of any multi-element float tensor in the dump
    dump = Dump(Path(outcome.run_dir) / "rank0")
    t = dump._tensors
    ok = np.array([("float" in str(d)) and s not in ("[]", "[1]") for d, s in zip(t["dtype"], t["shape"])])
    mag = np.maximum(np.abs(t["max"]), np.abs(t["min"]))
    ok &= np.isfinite(mag)
    assert max(abs(rows[0][2]), abs(rows[0][3])) == mag[ok].max()
    assert [max(abs(r[2]), abs(r[3])) for r in rows] == sorted((max(abs(r[2]), abs(r[3])) for r in rows),
                                                               reverse=True)
    assert not [n for n in summary["capture"]["notes"] if "optimizer" in n]  # the demo steps its optimizer
    lines = _render(summary)
    assert len(lines) <= 20 and max(len(line) for line in lines) <= 80, "\n".join(lines)
    meta = _strict((Path(outcome.run_dir) / "run.json").read_text())
    assert meta["summary"]["capture"]["highlights"]["nonfinite_rows"]["produced"] == 0
    # run.json keeps the size as a number; the CLI's summary and the app's run summary print the same text
    size = meta["summary"]["size_bytes"]
    assert isinstance(size, int) and size == summary["size_bytes"]
    from probe_tui.app.screens.summary import _summary_items
    from probe_tui.formatting import format_bytes

    app_size = dict(_summary_items(meta["summary"]))["size"]
    cli_size = [line.split(None, 1)[1].strip() for line in lines if line.split()[:1] == ["size"]]
    assert cli_size == [app_size] == [format_bytes(size)], (cli_size, app_size)


def test_a_script_with_no_optimizer_step_says_how_its_steps_were_counted(tmp_path):
    """Tried as a new user would: ``probe-tui --run`` on a loop that never calls ``optimizer.step()``."""
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(
        "import torch\nmodel = torch.nn.Linear(4, 1)\nfor _ in range(3):\n"
        "    model(torch.randn(2, 4)).sum().backward()\n")
    (tmp_path / "cfg.json").write_text(json.dumps(
        {"task": "statistics", "level": "L1", "dump_path": "dump", "target": {"script": "train.py"}}))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), COLUMNS="200")
    done = subprocess.run([sys.executable, "-m", "probe_tui", "--run", "cfg.json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    said = "no optimizer step was seen"
    assert said in done.stdout + done.stderr
    run_json = _strict((tmp_path / "dump" / "latest" / "run.json").read_text())
    notes = run_json["summary"]["capture"]["notes"]
    assert [n for n in notes if said in n] and run_json["summary"]["steps"] == "0"


def test_an_overflow_is_named_where_it_starts(tmp_path):
    outcome = _run(tmp_path, dict(TINY, steps=2, faults={"fp16_overflow": {"layer": 1}}))
    summary = outcome.summary
    table = summary["tables"][0]
    assert table["title"].startswith("where non-finite values start")
    name, step, values, mx, mn = table["rows"][0]
    # the demo's fault: float16 exp of a scaled finite input gives +inf (docs/decisions/0015-demo-faults-by-numeric-effect.md)
    assert name.startswith("Torch.exp.") and name.endswith(".output.0") and step == 0 and values == "+inf"
    assert mx == "inf"  # non-finite statistics are text in the JSON summary
    assert "produced" in summary["non_finite"] and "inherited" in summary["non_finite"]
    lines = _render(summary)
    assert len(lines) <= 20 and max(len(line) for line in lines) <= 80, "\n".join(lines)
    _strict((Path(outcome.run_dir) / "run.json").read_text())


def _step(names, rows):
    """Step columns as StepBuffer.build makes them: rows = (record, slot, dtype, shape, max, min, nan, +inf, -inf)."""
    n = len(rows)
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    records = {"name": [nm for nm, _, _ in names], "direction": np.array([d for _, d, _ in names]),
               "args": [a for _, _, a in names]}
    tensors = {"record": np.array(col(0)), "slot": col(1), "dtype": col(2), "shape": col(3),
               "max": np.array(col(4), dtype=float), "min": np.array(col(5), dtype=float),
               "mean": np.zeros(n), "norm": np.arange(n, dtype=float), "valid": np.full(n, 15, dtype=np.uint8),
               "nan_count": np.array(col(6)), "posinf_count": np.array(col(7)), "neginf_count": np.array(col(8))}
    return records, tensors


def test_kinds_of_non_finite_rows():
    h = TensorHighlights(keep=3)
    f32 = "torch.float32"
    inf = float("inf")
    names = [("Tensor.masked_fill.0.forward", 0, '{"args":[],"kwargs":{},"value":{"type":"float","value":"-inf"}}'),
             ("Functional.softmax.0.forward", 0, '{"args":[{"tensor":"input.0"}]}'),
             ("Torch.exp.0.forward", 0, '{"args":[{"tensor":"input.0"}]}'),
             ("Torch.exp.0.backward", 1, ""),
             ("Tensor.sum.0.forward", 0, ""),
             ("Tensor.add_.0.forward", 0, "")]
    rows = [(0, "output.0", f32, "[2, 2]", 1.0, -inf, 0, 0, 2),
            (1, "input.0", f32, "[2, 2]", 1.0, -inf, 0, 0, 2),
            (1, "output.0", f32, "[2, 2]", 0.9, 0.0, -1, -1, -1),
            (2, "input.0", f32, "[3]", 90.0, -7.0, -1, -1, -1),
            (2, "output.0", f32, "[3]", inf, 0.0, 0, 1, 0),
            (3, "input.0", f32, "[3]", 1.0, -1.0, -1, -1, -1),
            (3, "output.0", f32, "[3]", float("nan"), float("nan"), 3, 0, 0),  # backward of a bad forward
            (4, "input.0", "torch.int64", "[5]", 1e9, 0.0, -1, -1, -1),  # integers are not ranked
            (5, "output.0", f32, "[]", 1e6, 1e6, -1, -1, -1),  # neither are single values
            (5, "input.0", f32, "[8]", 50.0, 50.0, -1, -1, -1)]  # nor constant tensors (fills)
    h.add_step(0, *_step(names, rows))
    assert h.nonfinite == {"produced": 1, "mask": 1, "inherited": 2}
    assert h.produced == [("Torch.exp.0.forward.output.0", 0, "+inf", inf, 0.0)]
    assert [r[0] for r in h.largest()] == ["Torch.exp.0.forward.input.0", "Torch.exp.0.backward.input.0",
                                           "Functional.softmax.0.forward.output.0"]
    assert h.describe() == "4 rows: 1 produced, 1 mask, 2 inherited"


def test_uninitialised_allocations_are_not_where_non_finite_values_start():
    """FSDP2's all-gather buffers and a pipeline stage's receive buffers come from torch.empty: NaN under
    deterministic algorithms, never a value an op produced."""
    h = TensorHighlights(keep=3)
    f32 = "torch.float32"
    nan = float("nan")
    names = [("Torch.empty_strided.0.forward", 0, '{"args":[],"kwargs":{}}'),
             ("Tensor.new_empty.0.forward", 0, '{"args":[{"tensor":"input.0"}]}'),
             ("Torch.exp.0.forward", 0, '{"args":[{"tensor":"input.0"}]}')]
    rows = [(0, "output.0", f32, "[2]", nan, nan, 2, 0, 0),
            (1, "input.0", f32, "[2]", 1.0, 0.0, -1, -1, -1),
            (1, "output.0", f32, "[2]", nan, nan, 2, 0, 0),
            (2, "input.0", f32, "[2]", 100.0, 0.0, -1, -1, -1),
            (2, "output.0", f32, "[2]", float("inf"), 1.0, 0, 1, 0)]
    h.add_step(0, *_step(names, rows))
    assert h.nonfinite == {"produced": 1, "mask": 2, "inherited": 0}
    assert [r[0] for r in h.produced] == ["Torch.exp.0.forward.output.0"]
