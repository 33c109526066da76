"""Level L2 (msprobe's kernel level): msprobe's MindSpore static-graph L2 configs load
(tests/test_schemas_msprobe.py); where L2 does not run (PyTorch) the run refuses it with one line
naming what probe-tui offers instead, exit code 2, nothing written (engines/task.py ``check_level``;
docs/MINDSPORE.md "Graph mode"). MindSpore's statistics and tensor at L2: tests/test_mindspore_graph_dump.py; overflow_check at L2:
tests/test_mindspore_graph_overflow.py."""

import json
from pathlib import Path

import pytest

from probe_tui.cli import main

DATA = Path(__file__).resolve().parent / "data" / "configs" / "msprobe"


PYTORCH = "is not offered by probe-tui: use level L1"


@pytest.mark.parametrize("name,framework,says", [
    ("ms_static_l2_statistics.json", "pytorch", PYTORCH),
    ("ms_static_l2_tensor.json", "pytorch", PYTORCH),
    ("ms_static_l2_overflow_check.json", "pytorch", PYTORCH),
])
def test_l2_config_is_refused_at_run_with_one_line(tmp_path, capsys, name, framework, says):
    config = json.loads((DATA / name).read_text())
    config.update(dump_path=str(tmp_path / "dump"), framework=framework,
                  target={"demo": {"preset": "tiny", "steps": 1}})
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(config))
    code = main(["run", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    errors = [line for line in err.splitlines() if line.strip() and "warning:" not in line]  # the foreign-key ones
    assert len(errors) == 1 and says in errors[0] and "level: L2" in errors[0], err
    assert not (tmp_path / "dump").exists()
