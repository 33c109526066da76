"""Two msprobe dumps: the target's pieces read by a helper process while this one reads the golden's; the result
is the one a serial read gives, a helper that cannot run falls back to reading here, and a bad dump.json read by
the helper is still a one-line error."""

import json
import os
from concurrent.futures import Future

import numpy as np
import pytest

from engines.compare import prefetch
from engines.compare.engine import run_compare
from engines.compare.options import CompareError
from engines.dumps.msprobe.source import MsprobeSource
from tests.test_compare_probe_dumps import model, write_msprobe


def _job(target, golden, out):
    return {"task": "compare", "compare": {"target_path": str(target), "golden_path": str(golden),
                                           "output_path": str(out), "formats": ["hdf5"]}}


@pytest.fixture
def dumps(tmp_path):
    return write_msprobe(tmp_path / "t", model(scale=1.05)), write_msprobe(tmp_path / "g", model())


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no helper process")
def test_the_helper_reads_the_target_and_the_result_is_the_serial_one(dumps, tmp_path, monkeypatch):
    target, golden = dumps
    serial = run_compare(_job(target, golden, tmp_path / "serial"), None)
    used = []
    real = MsprobeSource.prefetch

    def spy(self, executor):
        used.append(self.path)
        real(self, executor)

    monkeypatch.setattr(prefetch, "PREFETCH_MIN_BYTES", 0)
    monkeypatch.setattr(MsprobeSource, "prefetch", spy)
    helped = run_compare(_job(target, golden, tmp_path / "helped"), None)
    assert used == [target]
    for column in ("target_name", "verdict", "rel_err"):
        a, b = serial.results[column], helped.results[column]
        assert np.array_equal(a, b) if a.dtype == object else np.array_equal(a, b, equal_nan=True), column
    assert helped.top_suspects[0]["record"] == serial.top_suspects[0]["record"] == "Functional.relu.0.forward"


def test_a_helper_that_cannot_run_leaves_the_read_to_this_process(dumps):
    target, _ = dumps

    class Broken:
        def submit(self, fn, *args):
            future = Future()
            future.set_exception(RuntimeError("the helper died"))
            return future

    source = MsprobeSource(target)
    source.prefetch(Broken())
    rows = source.rows(0, 0)
    assert "Functional.relu.0.forward.output.0" in rows.name.tolist()


def test_a_bad_dump_read_by_the_helper_is_a_one_line_error(dumps, tmp_path, monkeypatch):
    target, golden = dumps
    (target / "step0" / "rank0" / "dump.json").write_text(json.dumps({"task": "tensor"}))
    monkeypatch.setattr(prefetch, "PREFETCH_MIN_BYTES", 0)
    with pytest.raises(CompareError, match="not a msprobe dump.json"):
        run_compare(_job(target, golden, tmp_path / "out"), None)


def test_a_bad_dump_json_is_exit_code_2_on_the_command_line(dumps, tmp_path, capsys):
    from probe_tui.cli import main

    target, golden = dumps
    (target / "step0" / "rank0" / "dump.json").write_text('{"task": "tensor", "data": {"x": [1, 2')
    assert main(["compare", str(target), str(golden)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dump.json: not valid JSON" in err[0], err
