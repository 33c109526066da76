"""Fuzzing the readers of dumps and mapping files (hypothesis, bounded: a few dozen examples per input kind,
derandomized so CI sees the same inputs every run): every input ends in success or in the project's bad-input
error (``engines.errors.BadInputError``) with a one-line message; never another exception.

Inputs: our HDF5 dump (byte flips, truncation, deleted datasets and groups, rewritten attributes),
its ``segments.jsonl`` (lines with values of any JSON type), a msprobe ``dump.json`` (values of any JSON type at
any place, byte flips) with its tensor files, and mapping files (any bytes, any JSON value). The job functions
are called in-process (``parse``, ``run_compare`` without writing); a few cases go through the CLI too.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.compare.engine import run_compare
from engines.errors import BadInputError
from engines.parse.inspect import parse, read_tensor
from tests import damage
from tests.test_compare_probe_dumps import model, write_msprobe, write_ours

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats()
                    | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """A good dump of ours (SWMR, tensors kept), a good msprobe tensor dump, both of the same toy model."""
    root = tmp_path_factory.mktemp("seeds")
    ours = write_ours(root / "ours" / "rank0", model()).parent
    theirs = write_msprobe(root / "ms", model())
    with h5py.File(ours / "rank0" / "dump.h5", "r") as f:
        objects = []
        f.visit(objects.append)
    return {"ours": ours, "ms": theirs, "objects": sorted(objects), "size": (ours / "rank0" / "dump.h5").stat().st_size}


def ends_well(call):
    """Run ``call``: success, or a one-line BadInputError. Anything else fails the test."""
    try:
        call()
    except BadInputError as exc:
        text = str(exc)
        assert text.strip() and "\n" not in text, repr(text)


def _copy(src: Path, scratch: str) -> Path:
    return Path(shutil.copytree(src, Path(scratch) / src.name))


def _compare(target, golden, mode="auto"):
    return run_compare({"task": "compare", "compare": {"target_path": str(target), "golden_path": str(golden),
                                                       "mode": mode}}, None, write=False)


# -- our HDF5 dump ----------------------------------------------------------------------------------------------
H5_DAMAGE = st.one_of(
    st.tuples(st.just("flip"), st.lists(st.integers(0, 1 << 20), min_size=1, max_size=32), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("delete"), st.integers(0, 1000)),
    st.tuples(st.just("attr"), st.sampled_from(["meta", "commits"]),
              st.sampled_from(["format_version", "kind", "schema_version", "tables", "arrays", "base"]),
              st.one_of(st.integers(-5, 1000), st.text(max_size=12), st.just("[1, 2]"))),
)


def _damage_h5(path: Path, how, objects, size):
    if how[0] == "flip":
        damage.flip_bytes(path, [p % size for p in how[1]], how[2])
    elif how[0] == "truncate":
        damage.truncate(path, how[1])
    elif how[0] == "delete":
        damage.h5_delete(path, objects[how[1] % len(objects)])
    else:
        damage.h5_attr(path, how[1], how[2], how[3])


@FUZZ
@given(hows=st.lists(H5_DAMAGE, min_size=1, max_size=3))
def test_a_damaged_hdf5_dump_ends_in_success_or_one_line(seeds, hows):
    with tempfile.TemporaryDirectory() as scratch:
        run = _copy(seeds["ours"], scratch)
        for how in hows:
            try:
                _damage_h5(run / "rank0" / "dump.h5", how, seeds["objects"], seeds["size"])
            except (OSError, KeyError, RuntimeError):  # h5py cannot even edit what an earlier damage broke
                pass
        ends_well(lambda: parse(run))
        ends_well(lambda: read_tensor(run, "Functional.linear.0.forward.output.0"))
        ends_well(lambda: _compare(run, seeds["ours"]))


LINE_FIELDS = ["kind", "mode", "file", "arrays", "meta", "tables", "event", "commits", "status", "pid"]


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(LINE_FIELDS), JSON), min_size=1, max_size=3),
       meta_edits=st.lists(st.tuples(st.sampled_from(["format_version", "kind", "schema_version", "rank"]), JSON),
                           max_size=2))
def test_a_garbled_segments_file_ends_in_success_or_one_line(seeds, edits, meta_edits):
    with tempfile.TemporaryDirectory() as scratch:
        run = _copy(seeds["ours"], scratch)

        def edit(lines):
            for n, key, value in edits:
                lines[n % len(lines)][key] = value
            for key, value in meta_edits:
                for ev in lines:
                    if isinstance(ev.get("meta"), dict):
                        ev["meta"][key] = value

        damage.edit_segments(run / "rank0", edit)
        ends_well(lambda: parse(run))
        ends_well(lambda: _compare(seeds["ours"], run))


# -- msprobe dump.json ------------------------------------------------------------------------------------------
def _paths(obj, prefix=()):
    """Every place in a JSON document, as key paths."""
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(doc, path, value):
    if not path:
        return value
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 10 ** 6), JSON), min_size=1, max_size=3),
       flips=st.lists(st.integers(0, 1 << 16), max_size=4))
def test_a_garbled_msprobe_dump_ends_in_success_or_one_line(seeds, edits, flips):
    with tempfile.TemporaryDirectory() as scratch:
        root = _copy(seeds["ms"], scratch)
        path = root / "step0" / "rank0" / "dump.json"
        doc = json.loads(path.read_text())
        for n, value in edits:
            places = list(_paths(doc))
            doc = _set(doc, places[n % len(places)], value)
        path.write_text(json.dumps(doc))
        if flips:
            damage.flip_bytes(path, flips, 0x20)
        ends_well(lambda: parse(root))
        ends_well(lambda: read_tensor(root, "Functional.linear.0.forward.output.0"))
        ends_well(lambda: _compare(root, seeds["ours"]))


@FUZZ
@given(which=st.lists(st.integers(0, 100), min_size=1, max_size=4), content=st.binary(max_size=64))
def test_damaged_msprobe_tensor_files_end_in_success_or_one_line(seeds, which, content):
    with tempfile.TemporaryDirectory() as scratch:
        root = _copy(seeds["ms"], scratch)
        files = sorted((root / "step0" / "rank0" / "dump_tensor_data").iterdir())
        for n in which:
            files[n % len(files)].write_bytes(content)
        ends_well(lambda: read_tensor(root, "Functional.linear.0.forward.output.0"))
        ends_well(lambda: parse(root, export_npy=Path(scratch) / "npy"))
        ends_well(lambda: _compare(root, seeds["ours"], mode="tensor"))


# -- mapping files ----------------------------------------------------------------------------------------------
@FUZZ
@given(kind=st.sampled_from(["data_mapping", "api_mapping", "cell_mapping", "layer_mapping"]),
       suffix=st.sampled_from([".json", ".yaml"]),
       content=st.one_of(st.binary(max_size=80), JSON.map(lambda v: json.dumps(v).encode()),
                         st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_a_mapping_file_ends_in_success_or_one_line(seeds, kind, suffix, content):
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / ("map" + suffix)
        path.write_bytes(content)
        ends_well(lambda: run_compare({"task": "compare", "compare": {
            "target_path": str(seeds["ours"]), "golden_path": str(seeds["ours"]), kind: str(path)}}, None,
            write=False))


# -- the same through the CLI: one line on stderr, exit code 2 --------------------------------------------------
def _cli(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "probe_tui", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", ["parse", "compare", "parse-row"])
def test_the_cli_prints_one_line_for_a_damaged_dump(seeds, tmp_path, command):
    run = Path(shutil.copytree(seeds["ours"], tmp_path / "run"))
    damage.h5_delete(run / "rank0" / "dump.h5", "strings/data")
    args = {"parse": ("parse", run), "compare": ("compare", seeds["ours"], run, "-o", tmp_path / "out"),
            "parse-row": ("parse", run, "--row", "Functional.linear.0.forward.output.0")}[command]
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("probe-tui: error:")]
    assert len(errors) == 1 and "strings/data" in errors[0] and "Traceback" not in done.stderr, done.stderr


def test_the_cli_prints_one_line_for_a_mapping_file_that_is_not_utf8(seeds, tmp_path):
    mapping = tmp_path / "map.yaml"
    mapping.write_bytes(b"Functional.relu.0.forward.output.0: \xff\xfe\n")
    config = tmp_path / "cmp.json"
    config.write_text(json.dumps({"task": "compare", "compare": {
        "target_path": str(seeds["ours"]), "golden_path": str(seeds["ours"]), "output_path": str(tmp_path / "o"),
        "data_mapping": str(mapping)}}))
    done = _cli("--run", config, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("probe-tui: error:")]
    assert len(errors) == 1 and "not UTF-8" in errors[0] and "Traceback" not in done.stderr, done.stderr
    assert np.all([not (tmp_path / "o").exists()])
