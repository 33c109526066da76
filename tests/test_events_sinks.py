"""Progress events: the sinks, the JSON-lines round trip, and the rich renderer on a TTY and off it."""

import io
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from engines.events import (
    Event,
    EventError,
    JsonlSink,
    ListSink,
    NullSink,
    TeeSink,
    check_event,
    parse_event_line,
)
from probe_tui.progress import RichProgressSink

ROOT = str(Path(__file__).resolve().parents[1])


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _demo_run(sink, knobs, run_dir="dump/run1"):
    """Drive a real demo run the way the runner does: run_started, a step event per step, run_finished."""
    from engines.adapters.torch.demo import train

    knobs = dict(knobs)
    total = knobs.get("steps", 5)
    sink.emit("run_started", run_dir=run_dir, task="statistics", total_steps=total)
    start = time.perf_counter()
    result = train(knobs, on_step=lambda step, loss: sink.emit(
        "step", step=step, total_steps=total, loss=loss, elapsed_s=time.perf_counter() - start))
    sink.emit("message", level="info", text="demo finished")
    sink.emit("run_finished", status="done", exit_code=0, run_dir=run_dir, summary=result.summary())
    return result


def test_jsonl_round_trip_on_a_real_demo_run():
    pytest.importorskip("torch")
    stream = io.StringIO()
    result = _demo_run(JsonlSink(stream), {"preset": "tiny", "steps": 3})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6 and all(json.loads(line)["event"] for line in lines)
    events = [parse_event_line(line) for line in lines]
    assert [e.kind for e in events] == ["run_started", "step", "step", "step", "message", "run_finished"]
    for event in events:
        check_event(event.kind, event.fields)
    assert [e["loss"] for e in events if e.kind == "step"] == result.losses  # exact float round trip
    assert [e["step"] for e in events if e.kind == "step"] == [0, 1, 2]
    assert events[-1]["summary"]["steps"] == 3


def test_non_finite_loss_is_strict_json_and_reads_back_as_float():
    pytest.importorskip("torch")
    stream = io.StringIO()
    _demo_run(JsonlSink(stream), {"preset": "tiny", "steps": 2, "faults": {"fp16_overflow": {"layer": 0}}})
    for line in stream.getvalue().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"non-standard JSON token {name}"))
    steps = [parse_event_line(line) for line in stream.getvalue().splitlines()]
    losses = [e["loss"] for e in steps if e.kind == "step"]
    assert len(losses) == 2 and all(isinstance(x, float) and math.isnan(x) for x in losses)


def test_parse_event_line_ignores_other_output():
    assert parse_event_line("hello from the training script") is None
    assert parse_event_line('{"event": "nonsense"}') is None
    assert parse_event_line('{"event": "step", "step": 1') is None  # torn line
    assert parse_event_line("[1, 2]") is None
    event = parse_event_line('{"event":"message","level":"warning","text":"x"}\n')
    assert event == Event("message", {"level": "warning", "text": "x"})
    assert event["level"] == "warning" and event.get("missing", 7) == 7
    assert event.to_dict() == {"event": "message", "level": "warning", "text": "x"}


def test_list_sink_is_strict_and_tee_fans_out():
    a, b = ListSink(), ListSink()
    tee = TeeSink(a, NullSink(), b)
    tee.emit("message", level="info", text="one")
    tee.emit("step", step=0, total_steps=None, elapsed_s=0.1)  # loss is optional
    assert a.kinds() == b.kinds() == ["message", "step"]
    assert a.of("message")[0]["text"] == "one"
    with pytest.raises(EventError, match="unknown kind"):
        a.emit("bogus")
    with pytest.raises(EventError, match="missing field 'exit_code'"):
        a.emit("run_finished", status="done", run_dir="x", summary={})
    with pytest.raises(EventError, match="unknown field 'colour'"):
        a.emit("message", level="info", text="x", colour="red")
    with pytest.raises(EventError, match="level 'loud'"):
        a.emit("message", level="loud", text="x")
    ListSink(strict=False).emit("anything", x=1)


def test_jsonl_sink_survives_a_closed_stream():
    stream = io.StringIO()
    sink = JsonlSink(stream)
    sink.emit("message", level="info", text="before")
    stream.close()
    sink.emit("message", level="info", text="after")  # must not raise into training
    sink.emit("message", level="info", text="again")


def test_jsonl_paths_become_strings(tmp_path):
    stream = io.StringIO()
    JsonlSink(stream).emit("run_started", run_dir=tmp_path, task="t", total_steps=1)
    assert parse_event_line(stream.getvalue())["run_dir"] == str(tmp_path)


def test_rich_renderer_on_a_terminal_draws_a_progress_bar():
    pytest.importorskip("torch")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120, color_system="standard")
    sink = RichProgressSink(console)
    assert sink.live
    result = _demo_run(sink, {"preset": "tiny", "steps": 3})
    text = out.getvalue()
    assert "\x1b[" in text  # ANSI: a live display
    assert "━" in text  # the bar
    assert "step 3/3" in text and f"loss {result.losses[-1]:.4f}" in text
    assert "demo finished" in text and "done" in text and "dump/run1" in text


def test_rich_renderer_degrades_to_plain_lines_off_a_terminal():
    pytest.importorskip("torch")
    out = io.StringIO()
    sink = RichProgressSink(Console(file=out, width=200), plain_interval_s=0.0)
    assert not sink.live
    result = _demo_run(sink, {"preset": "tiny", "steps": 3})
    lines = out.getvalue().splitlines()
    assert "\x1b[" not in out.getvalue()
    assert lines[0] == "probe-tui statistics → dump/run1"
    step_lines = [line for line in lines if line.startswith("step ")]
    assert len(step_lines) == 3
    assert step_lines[2].startswith(f"step 3/3  loss {result.losses[2]:.4f}  ")
    assert lines[-2] == "demo finished"
    assert lines[-1] == "done (exit 0) → dump/run1"


def test_plain_lines_are_throttled_but_keep_first_and_last():
    out = io.StringIO()
    sink = RichProgressSink(Console(file=out, width=200), plain_interval_s=3600)
    sink.emit("run_started", run_dir="r", task="monitor", total_steps=100)
    for step in range(100):
        sink.emit("step", step=step, total_steps=100, loss=float(step), elapsed_s=0.01 * step, records=step,
                  bytes=2048 * step)
    sink.emit("message", level="warning", text="careful")
    sink.emit("run_finished", status="failed", exit_code=1, run_dir="r", summary={})
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[0] for line in lines if line.startswith("step")] == ["step 1/100", "step 100/100"]
    assert "99 records  202.8 KB" in lines[2]  # 202,752 bytes in decimal units, as the app shows them
    assert lines[3] == "warning: careful" and lines[4] == "failed (exit 1) → r"


def test_a_run_that_stops_early_prints_its_last_step():
    out = io.StringIO()
    sink = RichProgressSink(Console(file=out, width=200), plain_interval_s=3600)
    for step in range(3):
        sink.emit("step", step=step, total_steps=None, loss=None, elapsed_s=1.0)
    sink.emit("run_finished", status="failed", exit_code=1, run_dir="r", summary={})
    assert out.getvalue().splitlines() == ["step 1  1.0s", "step 3  1.0s", "failed (exit 1) → r"]


def test_a_job_refused_before_its_first_event_prints_no_header():
    out = io.StringIO()
    sink = RichProgressSink(Console(file=out, width=200))
    sink.emit("run_started", run_dir=None, task="compare", total_steps=None)
    sink.close()
    assert out.getvalue() == ""


def test_default_console_is_stderr_and_plain_when_piped():
    code = (
        "from probe_tui.progress import RichProgressSink\n"
        "s = RichProgressSink(plain_interval_s=0)\n"
        "s.emit('run_started', run_dir='d', task='t', total_steps=2)\n"
        "s.emit('step', step=0, total_steps=2, loss=1.5, elapsed_s=0.2)\n"
        "s.emit('step', step=1, total_steps=2, loss=float('nan'), elapsed_s=0.4)\n"
        "s.emit('run_finished', status='done', exit_code=0, run_dir='d', summary={})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=ROOT, env={"PYTHONPATH": ROOT, "TERM": "xterm-256color", "PATH": "/usr/bin:/bin"})
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == ["probe-tui t → d", "step 1/2  loss 1.5000  0.2s", "step 2/2  loss nan  0.4s",
                                        "done (exit 0) → d"]


def test_analysis_runs_have_no_run_dir():
    out = io.StringIO()
    sink = RichProgressSink(Console(file=out, width=200))
    sink.emit("run_started", run_dir=None, task="compare", total_steps=None)
    sink.emit("run_finished", status="finished", exit_code=0, run_dir=None, summary={})
    assert out.getvalue().splitlines() == ["probe-tui compare", "finished (exit 0)"]
