"""The writer process (engines/capture/writer_process.py): a statistics capture's steps written by a child process,
the same records as in the training process, the store's own reports carried back, and training untouched when
the child cannot start, dies, or the disk budget stops the store."""

import logging
import os
import signal
import sys
import time

import numpy as np
import pytest
from test_capture_support import TINY, run_demo

from engines.capture import writer_process
from engines.store import StoreReader

TINY3 = dict(TINY, steps=3)
COLUMNS = {"records": ["name", "kind", "direction", "parent", "stack", "args", "flags", "step"],
           "tensors": ["record", "slot", "dtype", "shape", "requires_grad", "max", "min", "mean", "norm",
                       "nan_count", "posinf_count", "neginf_count", "valid", "numel", "crc32"]}


def writer_pid(rank_dir) -> int:
    """The pid the store's open event names: the process that wrote it."""
    with StoreReader(rank_dir, "dump") as store:
        return int(store._open_event["pid"])


def assert_same_dump(a, b) -> None:
    for table, columns in COLUMNS.items():
        x_all, y_all = getattr(a.reader, table)(), getattr(b.reader, table)()
        assert len(x_all["record" if table == "tensors" else "name"]) > 100
        for col in columns:
            x, y = np.asarray(x_all[col]), np.asarray(y_all[col])
            if x.dtype.kind == "f":
                assert np.array_equal(x, y, equal_nan=True), (table, col)
            else:
                assert (x == y).all(), (table, col)


@pytest.mark.parametrize("options", [dict(level="L1"), dict(level="mix", summary_mode="md5")], ids=["L1", "mix-md5"])
def test_the_writer_process_writes_what_the_training_process_would(tmp_path, monkeypatch, options):
    """The demo captured twice: through a writer process (the store names the child's pid) and in the training
    process; every records and tensors column, the steps, the summary (bytes and highlights included) the same."""
    runs = {}
    for writer in ("process", "inline"):  # one line for both calls: the records' call stacks are the same text
        monkeypatch.setenv(writer_process.ENV_SWITCH, writer)
        runs[writer] = run_demo(tmp_path / writer[:4], TINY3, **options)
    (child, child_summary, child_result), (inline, inline_summary, inline_result) = runs["process"], runs["inline"]
    try:
        assert writer_pid(child.path) != os.getpid()
        assert writer_pid(inline.path) == os.getpid()
        assert child_result.losses == inline_result.losses
        assert child.steps() == inline.steps() == [0, 1, 2]
        assert_same_dump(child, inline)
        a, b = child_summary.as_dict(), inline_summary.as_dict()
        assert a == b
        assert sum(a["highlights"]["nonfinite_rows"].values()) > 0  # what came back from the writer process
    finally:
        child.close()
        inline.close()


def test_a_job_that_stores_tensors_writes_in_the_training_process(tmp_path, monkeypatch):
    monkeypatch.delenv(writer_process.ENV_SWITCH, raising=False)
    dump, _, _ = run_demo(tmp_path / "t", TINY3, task="tensor", level="L1", list_patterns=("linear",))
    try:
        assert writer_pid(dump.path) == os.getpid()
    finally:
        dump.close()
    dump, _, _ = run_demo(tmp_path / "list", TINY3, level="L1", tensor_list=("linear",))
    try:
        assert writer_pid(dump.path) == os.getpid()
    finally:
        dump.close()


def test_when_no_writer_process_starts_the_training_process_writes(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv(writer_process.ENV_SWITCH, raising=False)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    with caplog.at_level(logging.INFO, logger="engines.capture"):
        dump, summary, _ = run_demo(tmp_path / "d", TINY3, level="L1")
    try:
        assert writer_pid(dump.path) == os.getpid()
        assert dump.steps() == [0, 1, 2] and not summary.failure_detail
        assert any("written in the training process" in r.getMessage() for r in caplog.records)
    finally:
        dump.close()


def test_a_writer_process_killed_mid_run_leaves_training_and_its_steps(tmp_path, monkeypatch):
    """SIGKILL to the writer after its first step: training runs to its end with the same losses, the later
    steps are reported as not written, the committed one stays readable."""
    from engines.adapters.torch import demo
    from engines.adapters.torch.zero_code import ZeroCodeCapture
    from tests.dump_support import Dump, capture_sinks

    monkeypatch.delenv(writer_process.ENV_SWITCH, raising=False)
    baseline = demo.train(dict(TINY3)).losses
    opts, sinks, summary = capture_sinks(tmp_path, "pytorch", level="L1")
    made = []

    def remember(rank):
        sink = sinks(rank)
        made.append(sink)
        return sink

    killed = []

    def on_step(step, loss=None):
        if step == 0 and not killed:
            sink = made[0]
            sink.drain()  # step 0 is written
            os.kill(sink.pid, signal.SIGKILL)
            killed.append(sink.pid)
            deadline = time.time() + 30
            while sink._gone is None and time.time() < deadline:
                time.sleep(0.01)

    with ZeroCodeCapture(opts, remember, summary=summary):
        result = demo.train(dict(TINY3), on_step=on_step)
    assert killed and result.losses == baseline
    assert summary.steps == [0]
    assert any(k.startswith("failed: WriterGone in writing step") for k in summary.missing)
    dump = Dump(tmp_path / "rank0")
    try:
        assert dump.steps() == [0] and len(dump.names(0)) > 100
    finally:
        dump.close()


def test_the_disk_budget_stops_the_store_in_the_writer_process_and_training_goes_on(tmp_path, monkeypatch):
    monkeypatch.delenv(writer_process.ENV_SWITCH, raising=False)
    dump, summary, result = run_demo(tmp_path / "d", dict(TINY, steps=4), level="L1", disk_budget=1_000_000)
    try:
        assert writer_pid(dump.path) != os.getpid()
        assert summary.dump_stopped == "disk_budget"
        assert any("the dump stopped at step" in n for n in summary.notes)
        assert 0 < len(dump.steps()) < 4 and dump.steps() == summary.steps
        assert len(result.losses) == 4
    finally:
        dump.close()


class Half(float):
    """A float of a class of this module's: a value the writer process does not import."""


def _train_with_a_foreign_argument(root, monkeypatch, writer):
    import torch
    import torch.nn.functional as F

    from engines.adapters.torch.zero_code import ZeroCodeCapture
    from tests.dump_support import Dump, capture_sinks

    monkeypatch.setenv(writer_process.ENV_SWITCH, writer)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opts, sinks, summary = capture_sinks(root, "pytorch", level="L1")
    made = []

    def remember(rank):
        made.append(sinks(rank))
        return made[-1]

    maps = ""
    with ZeroCodeCapture(opts, remember, summary=summary):
        for _ in range(3):
            F.dropout(model(torch.ones(2, 4)), p=Half(0.5), training=False).sum().backward()
            opt.step()
            opt.zero_grad()
        if writer == "process":
            made[0].drain()
            with open("/proc/%d/maps" % made[0].pid) as fh:
                maps = fh.read()
    return Dump(root / "rank0"), summary, maps


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_frameworks_value_in_the_arguments_is_encoded_before_it_crosses(tmp_path, monkeypatch):
    """An argument of a class the writer process does not import (a float subclass here; a framework's type in
    practice) is encoded to the same JSON text in the training process; the writer never loads torch."""
    child, child_summary, maps = _train_with_a_foreign_argument(tmp_path / "proc", monkeypatch, "process")
    inline, _, _ = _train_with_a_foreign_argument(tmp_path / "inli", monkeypatch, "inline")
    try:
        assert maps and "libtorch" not in maps
        assert not child_summary.failure_detail
        assert child.steps() == inline.steps() == [0, 1, 2]
        a, b = child.reader.records(), inline.reader.records()
        assert list(a["args"]) == list(b["args"])
        dropout = [t for n, t in zip(a["name"], a["args"]) if "dropout" in n and n.endswith("forward")]
        assert dropout and all('"p":0.5' in t for t in dropout)
    finally:
        child.close()
        inline.close()


def test_a_writer_process_that_never_answers_is_given_up(tmp_path, monkeypatch, caplog):
    """A child that hangs at start (an interpreter stuck importing): after ``START_TIMEOUT_S`` it is killed and
    the steps are written in the training process."""
    hang = tmp_path / "hang"
    hang.write_text("#!/bin/sh\nexec sleep 300\n")
    hang.chmod(0o755)
    monkeypatch.delenv(writer_process.ENV_SWITCH, raising=False)
    monkeypatch.setattr(writer_process, "START_TIMEOUT_S", 1)
    monkeypatch.setattr(sys, "executable", str(hang))
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="engines.capture"):
        dump, summary, _ = run_demo(tmp_path / "d", TINY3, level="L1")
    try:
        assert time.monotonic() - started < 60
        assert writer_pid(dump.path) == os.getpid() and dump.steps() == [0, 1, 2]
        assert any("no answer in 1 s" in r.getMessage() for r in caplog.records)
    finally:
        dump.close()


def test_the_writer_writes_its_backlog_when_the_training_process_is_gone(tmp_path, monkeypatch):
    """The writer's side alone (``writer_child.serve`` on two pipes): three steps in its input, then the training
    process gone (nobody reads the answers, the input ends): every step is written and the store closes as
    ``killed``."""
    import copy
    import threading

    from engines.capture import pipe_frames, writer_child
    from engines.capture.sink import DumpSink
    from tests.dump_support import Dump

    payloads = []
    real_write = DumpSink._write

    def keep(self, payload):
        payloads.append(copy.deepcopy(payload))
        real_write(self, payload)

    monkeypatch.setenv(writer_process.ENV_SWITCH, "inline")
    monkeypatch.setattr(DumpSink, "_write", keep)
    run_demo(tmp_path / "source", TINY3, level="L1")[0].close()
    monkeypatch.setattr(DumpSink, "_write", real_write)
    assert [p.step for p in payloads] == [0, 1, 2]

    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    done = []
    worker = threading.Thread(target=lambda: done.append(writer_child.serve(in_r, out_w, os.getppid())))
    worker.start()
    folder = tmp_path / "rank0"
    pipe_frames.send(in_w, ("open", str(folder), {"framework": "pytorch"}, "auto", "none", None, None))
    assert pipe_frames.receive(out_r)[0] == "ready"
    os.close(out_r)  # the training process is gone: its answers go nowhere

    def hand_over():
        try:
            for payload in payloads:
                pipe_frames.send(in_w, ("step", payload))
        except OSError:  # the writer died: the assertion below says so
            pass
        os.close(in_w)

    sender = threading.Thread(target=hand_over, daemon=True)
    sender.start()
    worker.join(timeout=60)
    os.close(in_r)  # (unblocks the sender if the writer died early)
    sender.join(timeout=10)
    os.close(out_w)
    assert done == [0]
    with StoreReader(folder, "dump") as store:
        assert store.status == "killed"
    dump = Dump(folder)
    try:
        assert dump.steps() == [0, 1, 2] and len(dump.names(2)) > 100
    finally:
        dump.close()
