"""A damaged store file (a truncated dump.h5, as a full disk leaves it) is a one-line error with exit code 2 from
parse and compare, at once: a file its writer closed is read without SWMR, whose reader would retry the broken
metadata with growing sleeps instead of failing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_compare_probe_dumps import model, write_ours

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def damaged(tmp_path):
    good = write_ours(tmp_path / "good" / "rank0", model(), tensors=False).parent
    bad = write_ours(tmp_path / "bad" / "rank0", model(), tensors=False)
    h5 = bad / "dump.h5"
    assert h5.is_file()
    with open(h5, "r+b") as fh:
        fh.truncate(h5.stat().st_size // 2)
    return bad.parent, good


def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "probe_tui", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["parse", "compare"])
def test_a_truncated_store_is_a_one_line_error(damaged, tmp_path, command):
    bad, good = damaged
    args = (bad,) if command == "parse" else (bad, good)
    done = _cli(command, *args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "dump.h5" in lines[0] and "Traceback" not in done.stderr, done.stderr


# -- every damage is bad input: one line naming the file, from parse and from compare alike ------------------
import json  # noqa: E402
import random  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

from engines.errors import BadInputError  # noqa: E402
from engines.events import NullSink  # noqa: E402
from engines.parse.inspect import parse  # noqa: E402
from engines.runner import JobError, run_job  # noqa: E402
from engines.store import DumpWriter, StoreWarning  # noqa: E402
from schemas import load_config  # noqa: E402
from tests import damage  # noqa: E402


def _head_flips(path):
    rng = random.Random(2)  # flips in the first 4 KiB that break a metadata checksum of /commits
    damage.flip_bytes(path, [rng.randrange(0, 4096) for _ in range(16)], mask=0)
    data = bytearray(path.read_bytes())
    for _ in range(16):
        i = rng.randrange(0, 4096)
        data[i] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


H5 = "dump.h5"
DAMAGES = {
    "commit log deleted": lambda d: damage.h5_delete(d / H5, "commits/check"),
    "commit log of the wrong width": lambda d: damage.h5_replace(d / H5, "commits/counts",
                                                                 np.zeros((1, 2), dtype=np.int64)),
    "string table deleted": lambda d: damage.h5_delete(d / H5, "strings/data"),
    "string offsets deleted": lambda d: damage.h5_delete(d / H5, "strings/offset"),
    "string offsets outside the table": lambda d: damage.h5_replace(d / H5, "strings/offset",
                                                                    np.full(1000, -5, dtype=np.int64)),
    "a column shorter than the commit log": lambda d: damage.h5_replace(d / H5, "tables/tensors/max",
                                                                        np.zeros(3)),
    "tensor rows naming no record": lambda d: damage.h5_replace(d / H5, "tables/tensors/record",
                                                                np.full(1000, 1 << 40, dtype=np.int64)),
    "metadata checksums broken": lambda d: _head_flips(d / H5),
    "open line without arrays": lambda d: damage.edit_segments(d, lambda ls: [ev.pop("arrays", None)
                                                                              for ev in ls] and None),
    "open line with garbled tables": lambda d: damage.edit_segments(d, damage.set_in_open_line("tables", "x")),
    "open line whose meta is a list": lambda d: damage.edit_segments(d, damage.set_in_open_line("meta", [1])),
    "open line without its file": lambda d: damage.edit_segments(d, lambda ls: [ev.pop("file", None)
                                                                                for ev in ls] and None),
    "open line naming a file outside the folder": lambda d: damage.edit_segments(
        d, damage.set_in_open_line("file", "../../good/rank0/dump.h5")),
    "format_version garbled": lambda d: damage.edit_segments(
        d, damage.set_in_open_line("format_version", "x", meta=True)),
}


@pytest.fixture
def pair(tmp_path):
    """(a dump to damage, a good dump, a scratch folder)."""
    bad = write_ours(tmp_path / "bad" / "rank0", model(), tensors=True)
    good = write_ours(tmp_path / "good" / "rank0", model(), tensors=True).parent
    return bad, good, tmp_path


@pytest.mark.parametrize("what", sorted(DAMAGES))
def test_a_damaged_store_is_bad_input_for_parse_and_compare(pair, what):
    bad, good, tmp_path = pair
    DAMAGES[what](bad)
    with pytest.raises(BadInputError) as parsed:
        parse(bad.parent)
    damage.assert_one_line(parsed, "rank0")
    with pytest.raises(JobError) as compared:  # the runner turns the store's error into the job's
        damage.run_compare(bad.parent, good, tmp_path)
    damage.assert_one_line(compared, "rank0")
    with pytest.raises(JobError):
        damage.run_compare(good, bad.parent, tmp_path)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing half-written


# -- structure that cannot be read correctly is refused; intact data with a lying count is a warning ---------
REFUSED = {
    "a newer format_version in the file, segments.jsonl present": (
        lambda d: damage.h5_attr(d / H5, "meta", "format_version", 2), "newer than this probe-tui reads"),
    "a garbage format_version in the file": (
        lambda d: damage.h5_attr(d / H5, "meta", "format_version", "garbage"), "not a version number"),
    "kind=bogus in the file": (lambda d: damage.h5_attr(d / H5, "meta", "kind", "bogus"), "bogus"),
    "kind=bogus in the announcement": (
        lambda d: damage.edit_segments(d, damage.set_in_open_line("kind", "bogus", meta=True)), "bogus"),
    "schema_version=99 announced": (
        lambda d: damage.edit_segments(d, damage.set_in_open_line("schema_version", 99, meta=True)), "99"),
    "schema_version=99 everywhere (a newer probe-tui wrote it)": (
        lambda d: (damage.edit_segments(d, damage.set_in_open_line("schema_version", 99, meta=True)),
                   damage.h5_attr(d / H5, "meta", "schema_version", 99)), "dump schema 99 is newer"),
    "schema_version=99 in the file": (lambda d: damage.h5_attr(d / H5, "meta", "schema_version", 99), "99"),
}


@pytest.mark.parametrize("what", sorted(REFUSED))
def test_structure_that_cannot_be_read_correctly_is_refused(pair, what):
    bad, good, tmp_path = pair
    edit, words = REFUSED[what]
    edit(bad)
    with pytest.raises(BadInputError) as parsed:
        parse(bad.parent)
    damage.assert_one_line(parsed, words)
    with pytest.raises(JobError) as compared:
        damage.run_compare(good, bad.parent, tmp_path)
    damage.assert_one_line(compared, words)


def test_an_empty_store_left_by_a_full_disk_is_refused(tmp_path):
    """A writer that met a full disk before its first commit: an open line, a failed close, no step."""
    rank = tmp_path / "run" / "rank0"
    DumpWriter(rank, meta={"rank": 0, "world_size": 1, "framework": "pytorch"}).close("failed")
    with pytest.raises(BadInputError) as parsed:
        parse(rank.parent)
    damage.assert_one_line(parsed, "no committed step", "failed")
    good = write_ours(tmp_path / "good" / "rank0", model()).parent
    with pytest.raises(JobError) as compared:
        damage.run_compare(rank.parent, good, tmp_path)
    damage.assert_one_line(compared, "compare.target_path", "no committed step")


def test_commits_the_writer_made_but_cannot_be_read_back_are_a_warning(pair):
    bad, _, _ = pair
    damage.edit_segments(bad, lambda ls: [ev.update(commits=5) for ev in ls if ev.get("event") == "close"]
                         and None)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = parse(bad.parent)
    assert out.summary["steps"] == [0] and out.summary["rows"] > 0
    said = [str(w.message) for w in seen if issubclass(w.category, StoreWarning)]
    assert any("made 5 commit(s), 1 can be read" in s for s in said), said


def test_a_run_json_whose_counts_lie_is_a_one_line_warning_and_the_stores_are_read(pair):
    bad, _, tmp_path = pair
    (bad.parent / "run.json").write_text(json.dumps({"task": "statistics", "status": "finished", "steps": []}))
    done = _cli("parse", bad.parent, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["steps"] == [0]
    warned = [line for line in done.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1 and "run.json" in warned[0] and "'steps' is []" in warned[0], done.stderr


def test_lines_no_writer_wrote_are_skipped(pair):
    """segments.jsonl lines that are JSON but not objects (a list, a number) are no writer's: skipped like torn
    lines, and the store reads as before."""
    bad, _, _ = pair
    with open(bad / "segments.jsonl", "a") as fh:
        fh.write('[1, 2]\n5\n"x"\n{"event": "open", "kind": 7}\n')
    assert parse(bad.parent).summary["rows"] == len(parse(bad.parent).rows) > 0


# -- analyze-overflow on a damaged overflow_check run -----------------------------------------------------------
@pytest.fixture(scope="module")
def overflow_run(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("overflow")
    job = load_config({"task": "overflow_check", "dump_path": str(root / "dump"),
                       "target": {"demo": {"preset": "tiny", "steps": 2, "dtype": "fp16",
                                           "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}},
                       "overflow_check": {"overflow_nums": 1}})
    run_job(job, events=NullSink())
    return next(p for p in (root / "dump").iterdir() if p.is_dir() and not p.is_symlink())


OVERFLOW_DAMAGES = {
    "overflow.h5 truncated": lambda d: damage.truncate(d / "overflow.h5", 0.5),
    "overflow.h5 deleted": lambda d: (d / "overflow.h5").unlink(),
    "its calls table deleted": lambda d: damage.h5_delete(d / "overflow.h5", "tables/calls"),
    "dump.h5 truncated": lambda d: damage.truncate(d / "dump.h5", 0.5),
    "the records' args deleted": lambda d: damage.h5_delete(d / "dump.h5", "tables/records/args"),
    "overflow.h5 of a newer format": lambda d: damage.edit_segments(d, lambda ls: [
        ev["meta"].update(format_version=2) for ev in ls if ev.get("event") == "open"] and None),
}


@pytest.mark.parametrize("what", sorted(OVERFLOW_DAMAGES))
def test_analyze_overflow_on_a_damaged_run_is_one_line_bad_input(overflow_run, tmp_path, what):
    import shutil

    run = shutil.copytree(overflow_run, tmp_path / "run")
    OVERFLOW_DAMAGES[what](run / "rank0")
    job = load_config({"task": "analyze_overflow", "dump_path": str(tmp_path / "analysis"),
                       "analyze_overflow": {"path": str(run)}})
    with pytest.raises(JobError) as err:
        run_job(job, events=NullSink())
    damage.assert_one_line(err, "rank0")


def test_analyze_overflow_cli_prints_one_line(overflow_run, tmp_path):
    import shutil

    run = shutil.copytree(overflow_run, tmp_path / "run")
    damage.truncate(run / "rank0" / "overflow.h5", 0.5)
    done = _cli("analyze-overflow", run, "-o", tmp_path / "out", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "overflow.h5" in errors[0] and "Traceback" not in done.stderr, done.stderr


def test_an_hdf5_message_spanning_lines_is_one_line():
    """h5py and JSON messages quoted in an error may hold newlines; every bad-input error is one line."""
    from engines.compare.mapping import MappingError
    from engines.dumps.source import DumpSourceError
    from engines.store import StoreError

    for cls in (StoreError, DumpSourceError, MappingError, JobError):
        text = str(cls("dump.h5: cannot open (Unable to open file\n  (truncated file: eof = 10,\n stored_eof = 20))"))
        assert text == "dump.h5: cannot open (Unable to open file (truncated file: eof = 10, stored_eof = 20))"
