"""compare given bad input: mapping files that are not UTF-8, too deep or of the wrong shape, and tensor files
that cannot be read. Bad input is one line and exit code 2; rows that could not be compared are said in the
summary."""

import json

import numpy as np
import pytest

from engines.runner import JobError
from probe_tui.cli import main
from tests import damage
from tests.test_compare_probe_dumps import model, write_msprobe, write_ours

MAPPINGS = {"data_mapping": {"Module.block.Block.forward.0.output.0": "Module.block.Block.forward.0.output.0"},
            "api_mapping": [{"ms_api": "Functional.relu", "pt_api": "Functional.relu", "comment": "block"}],
            "cell_mapping": {"block": "block"},
            "layer_mapping": {"TopLayer": {"block": "block"}}}


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("dumps")
    return write_ours(root / "t" / "rank0", model()).parent, write_ours(root / "g" / "rank0", model()).parent


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
@pytest.mark.parametrize("kind", sorted(MAPPINGS))
@pytest.mark.parametrize("how", ["latin-1 bytes", "a BOM-less UTF-16 file"])
def test_a_mapping_file_that_is_not_utf8_is_one_line(dumps, tmp_path, kind, suffix, how):
    text = json.dumps(MAPPINGS[kind]).replace("block", "blöck")
    path = tmp_path / ("map" + suffix)
    path.write_bytes(text.encode("latin-1") if how == "latin-1 bytes" else text.encode("utf-16-le"))
    with pytest.raises(JobError) as err:
        damage.run_compare(*dumps, tmp_path, **{kind: str(path)})
    damage.assert_one_line(err, "compare." + kind, str(path), "not UTF-8")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", sorted(MAPPINGS))
@pytest.mark.parametrize("content,said", [
    ("[" * 50000 + "]" * 50000, "nested too deeply"),
    ("a: 2020-13-45\n", "not valid YAML"),
    ('{"x": [1, 2]}', "expected"),
    ('[{"ms_api": 5, "pt_api": "x"}]', "expected"),
    ('[{"ms_api": "a", "pt_api": "b", "ms_args": 5}]', "expected"),
])
def test_a_mapping_file_of_the_wrong_shape_is_one_line(dumps, tmp_path, kind, content, said):
    path = tmp_path / ("map.json" if content.startswith("[[") else "map.yaml")
    path.write_text(content)
    with pytest.raises(JobError) as err:
        damage.run_compare(*dumps, tmp_path, **{kind: str(path)})
    text = str(err.value)
    assert damage.one_line_error(text) and "compare." in text and str(path) in text, text
    if said in ("nested too deeply", "not valid YAML"):
        assert said in text, text


def _unreadable_target(tmp_path, how_many):
    """A msprobe tensor dump of the model whose first ``how_many`` tensor files are garbage."""
    root = write_msprobe(tmp_path / "ms", model())
    files = sorted((root / "step0" / "rank0" / "dump_tensor_data").iterdir())
    for p in files[:how_many]:
        p.write_bytes(b"garbage")
    return root, len(files)


def test_tensor_mode_with_every_tensor_unreadable_is_bad_input(dumps, tmp_path, capsys):
    target, n = _unreadable_target(tmp_path, how_many=10 ** 6)
    assert main(["compare", str(target), str(dumps[1]), "--mode", "tensor", "-o", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "no tensor pair could be compared" in err[0] and "could not be read" in err[0], err
    assert "first: Module.block.Block.forward.0.input.0" in err[0] and "garbage" not in err[0].split("(")[0]
    assert not (tmp_path / "out").exists()  # nothing written


def test_tensor_mode_says_which_rows_could_not_be_read(dumps, tmp_path):
    target, n = _unreadable_target(tmp_path, how_many=2)
    outcome = damage.run_compare(target, dumps[1], tmp_path, mode="tensor")
    assert outcome.exit_code in (0, 3)
    notes = [x for x in outcome.summary["notes"] if "could not be compared" in x]
    assert len(notes) == 1, outcome.summary["notes"]
    assert notes[0].startswith("2 of ") and "tensor data could not be read" in notes[0] and ".npy" in notes[0]
    assert outcome.summary["verdicts"]["skipped"] >= 2


def test_statistics_mode_does_not_read_tensor_files(dumps, tmp_path):
    target, _ = _unreadable_target(tmp_path, how_many=10 ** 6)
    outcome = damage.run_compare(target, dumps[1], tmp_path, mode="statistics")
    assert outcome.exit_code in (0, 3) and not any("could not" in x for x in outcome.summary["notes"])
    assert np.isfinite(outcome.summary["rows"])
