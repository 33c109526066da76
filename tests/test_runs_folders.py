"""Run folders: creation, run.json, the latest pointer, opening, listing, crash detection (docs/decisions/0002-run-folders.md)."""

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from engines import runs
from engines.run_list import list_runs
from engines.runs import RunError, create_run, new_run_id, open_run, resolve_latest

ROOT = str(Path(__file__).resolve().parents[1])
CONFIG = {"task": "statistics", "dump_path": "x", "statistics": {"level": "L1"}}


@pytest.fixture(autouse=True)
def no_shared_run_id(monkeypatch):
    monkeypatch.delenv("PROBE_TUI_RUN_ID", raising=False)


def test_create_run_writes_run_json_and_latest(tmp_path):
    dump = tmp_path / "dump"
    run = create_run(dump, task="statistics", config=CONFIG, framework="pytorch")
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", run.run_id)
    assert run.path == dump / run.run_id and run.owner
    meta = json.loads((run.path / "run.json").read_text())
    assert meta["schema_version"] == 1 and meta["run_id"] == run.run_id
    assert (meta["task"], meta["framework"], meta["status"]) == ("statistics", "pytorch", "running")
    assert meta["config"] == CONFIG and meta["pid"] == os.getpid() and meta["host"]
    assert meta["argv"] == sys.argv
    datetime.fromisoformat(meta["started"])
    latest = dump / "latest"
    assert latest.is_symlink() and os.readlink(latest) == run.run_id  # relative
    assert resolve_latest(dump) == run.path
    assert not [p for p in dump.iterdir() if p.name.endswith(".tmp")]


def test_runs_never_reuse_a_folder_and_latest_moves(tmp_path):
    first = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    (first.rank_dir(0) / "dump.h5").write_bytes(b"x" * 10)
    second = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert second.path != first.path
    assert (first.rank_dir(0) / "dump.h5").read_bytes() == b"x" * 10
    assert open_run(tmp_path).path == second.path


def test_rank_dir_update_and_finish(tmp_path):
    run = create_run(tmp_path, task="monitor", config={}, framework="pytorch")
    assert run.rank_dir(3) == run.path / "rank3" and (run.path / "rank3").is_dir()
    run.rank_dir(0)
    run.update(steps=2, note="warm")
    assert run.read()["steps"] == 2 and run.read()["note"] == "warm"
    meta = run.finish("done", 0, {"records": 12})
    assert meta == run.read()
    assert (meta["status"], meta["exit_code"], meta["summary"]) == ("done", 0, {"records": 12})
    assert meta["ranks"] == [0, 3] and meta["duration_s"] >= 0
    datetime.fromisoformat(meta["finished"])
    with pytest.raises(RunError, match="^rank:"):
        run.rank_dir(-1)


def test_shared_run_id_lets_every_rank_join_one_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("PROBE_TUI_RUN_ID", "20260101-000000-abcdef")
    rank0 = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    rank1 = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert rank0.path == rank1.path == tmp_path / "20260101-000000-abcdef"
    assert rank0.owner and not rank1.owner
    rank0.rank_dir(0), rank1.rank_dir(1)
    rank0.finish("done", 0, {})
    # a finished run is never reused, even with the same id
    with pytest.raises(RunError, match="already holds a done run"):
        create_run(tmp_path, task="statistics", config={}, framework="pytorch")


@pytest.mark.parametrize("bad", ["../x", "a/b", "latest", ".hidden", "x" * 200])
def test_bad_run_ids_are_one_line_errors(tmp_path, bad):
    with pytest.raises(RunError, match="^run_id: .* is not a valid run-id"):
        create_run(tmp_path, task="t", config={}, framework="pytorch", run_id=bad)


def test_dump_path_that_is_a_file_is_a_one_line_error(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(RunError) as err:
        create_run(target, task="t", config={}, framework="pytorch")
    assert str(err.value) == f"{target}: dump_path is a file, not a folder"


def test_a_folder_named_latest_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "latest").mkdir()
    with pytest.raises(RunError, match="latest: is a folder"):
        create_run(tmp_path, task="t", config={}, framework="pytorch")
    assert [p.name for p in tmp_path.iterdir()] == ["latest"]


def test_latest_as_text_file_when_symlinks_fail(tmp_path, monkeypatch):
    def no_symlinks(*args, **kwargs):
        raise OSError("symlinks not supported")

    monkeypatch.setattr(runs.os, "symlink", no_symlinks)
    run = create_run(tmp_path, task="t", config={}, framework="pytorch")
    latest = tmp_path / "latest"
    assert latest.is_file() and not latest.is_symlink()
    assert latest.read_text().strip() == run.run_id
    assert open_run(latest).path == run.path
    assert open_run(tmp_path).path == run.path
    second = create_run(tmp_path, task="t", config={}, framework="pytorch")
    assert latest.read_text().strip() == second.run_id


def test_open_run_accepts_folder_pointer_and_dump_path(tmp_path):
    run = create_run(tmp_path / "d", task="statistics", config={}, framework="pytorch")
    for path in (run.path, tmp_path / "d" / "latest", tmp_path / "d", str(tmp_path / "d")):
        opened = open_run(path)
        assert opened.path == run.path and opened.run_id == run.run_id and not opened.owner


def test_open_run_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(RunError) as err:
        open_run(tmp_path / "missing")
    assert str(err.value) == f"{tmp_path / 'missing'}: no such file or folder"
    (tmp_path / "empty").mkdir()
    with pytest.raises(RunError, match="no run.json"):
        open_run(tmp_path / "empty")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("{not json")
    with pytest.raises(RunError, match="unreadable run.json"):
        open_run(broken)


def test_list_runs_newest_first_with_sizes_steps_and_ranks(tmp_path):
    older = create_run(tmp_path / "a", task="statistics", config={}, framework="pytorch")
    older.update(started_unix=older.read()["started_unix"] - 100)
    (older.rank_dir(0) / "dump.h5").write_bytes(b"x" * 1000)
    older.finish("done", 0, {"steps": 5})
    newer = create_run(tmp_path / "b" / "nested", task="monitor", config={}, framework="mindspore")
    newer.rank_dir(0), newer.rank_dir(1)
    newer.update(steps=2)
    too_deep = create_run(tmp_path / "c" / "d" / "e", task="statistics", config={}, framework="pytorch")

    infos = list_runs(tmp_path, max_depth=3)
    assert [i.run_id for i in infos] == [newer.run_id, older.run_id]
    new, old = infos
    assert (new.task, new.framework, new.status, new.steps, new.ranks) == ("monitor", "mindspore", "running", 2,
                                                                            [0, 1])
    assert (old.status, old.steps, old.ranks, old.exit_code) == ("done", 5, [0], 0)
    assert old.size_bytes >= 1000 + len((older.path / "run.json").read_bytes())
    assert old.started and old.path == older.path
    assert too_deep.run_id in [i.run_id for i in list_runs(tmp_path, max_depth=4)]
    # the latest symlinks are not followed, so no run appears twice
    assert len(list_runs(tmp_path, max_depth=4)) == 3


def test_list_runs_shows_unreadable_and_bad_root(tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "run.json").write_text("[]")
    [info] = list_runs(tmp_path)
    assert info.status == "unreadable" and info.run_id == "broken"
    with pytest.raises(RunError, match="no such folder"):
        list_runs(tmp_path / "nope")


def test_a_run_whose_process_died_is_crashed(tmp_path):
    script = (
        "import sys; from engines.runs import create_run\n"
        "run = create_run(sys.argv[1], task='statistics', config={}, framework='pytorch')\n"
        "print(run.path)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    path = out.stdout.strip()
    assert json.loads(open(os.path.join(path, "run.json")).read())["status"] == "running"
    assert open_run(path).status == "crashed"
    [info] = list_runs(tmp_path)
    assert info.status == "crashed"
    # this process is alive: its own run stays running
    mine = create_run(tmp_path, task="statistics", config={}, framework="pytorch")
    assert mine.status == "running"


def test_new_run_id_format():
    assert new_run_id(datetime(2026, 3, 4, 5, 6, 7)).startswith("20260304-050607-")
    assert new_run_id() != new_run_id()


def test_run_json_is_still_finished_when_the_disk_is_full(tmp_path, monkeypatch):
    """On a full disk the temporary file of an atomic replace cannot be made: run.json once stayed ``running`` and
    a temporary file was left. It is rewritten in its own space instead (compact, the summary left out if needed)."""
    import errno

    run = create_run(tmp_path, task="statistics", config={"task": "statistics", "note": "x" * 2000},
                     framework="pytorch")

    def no_space(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runs, "_write_tmp", no_space)
    run.finish(status="disk_full", exit_code=0, summary={"records": 12, "steps": "0-2"})
    data = json.loads((run.path / "run.json").read_text())
    assert data["status"] == "disk_full" and data["exit_code"] == 0 and data["summary"]["records"] == 12
    run.finish(status="disk_full", exit_code=0, summary={"detail": "y" * 100_000})  # does not fit: summary dropped
    data = json.loads((run.path / "run.json").read_text())
    assert data["status"] == "disk_full" and "detail" not in data["summary"]
    assert not [p for p in run.path.iterdir() if p.name.endswith(".tmp")]
