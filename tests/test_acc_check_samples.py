"""Tried as a new user would, from a clean folder: the two sample configs of each framework (a tensor dump of the
demo with the injected low-precision softmax, then acc_check on it) run with ``probe-tui --run`` and name exactly
the injected API."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = {"pytorch": ("tensor_lowp.json", "acc_check.json"),
           "mindspore": ("mindspore_tensor_lowp.json", "mindspore_acc_check.json")}


@pytest.fixture(params=[pytest.param("pytorch"), pytest.param("mindspore", marks=pytest.mark.mindspore)])
def framework(request):
    if request.param == "pytorch":
        pytest.importorskip("torch")
    else:
        pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
    return request.param


def _run(name, cwd):
    (cwd / name).write_text((ROOT / "sample_configs" / name).read_text())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "probe_tui", "--run", name], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_the_acc_check_sample_names_the_injected_softmax(tmp_path, framework):
    dump_sample, check_sample = SAMPLES[framework]
    dumped = _run(dump_sample, tmp_path)
    assert dumped.returncode == 0, dumped.stderr[-3000:]
    checked = _run(check_sample, tmp_path)
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert "Demo.naive_softmax.0" in checked.stdout + checked.stderr
    out = json.loads((tmp_path / check_sample).read_text())["dump_path"]
    (result,) = [p for p in (tmp_path / out).glob("*/accuracy_checking_result_*.csv") if p.parent.name != "latest"]
    with open(result, newline="", encoding="utf-8") as fh:
        rows = {r["API name"]: r for r in csv.DictReader(fh)}
    failing = sorted(n for n, r in rows.items()
                     if {r["Forward Test Success"], r["Backward Test Success"]} & {"error", "warning"})
    assert failing == ["Demo.naive_softmax.0"]
    passed = [n for n, r in rows.items() if r["Forward Test Success"] == "pass"]
    assert len(passed) > 40
