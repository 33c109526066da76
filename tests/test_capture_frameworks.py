"""Capture promises that hold for both frameworks, each test run on PyTorch and on MindSpore: a failing hook never
stops training, the statistics sample config runs as a new user would run it, and the L0/mix records nest as
msprobe nests them (the level dumps are shared with test_capture_levels and test_mindspore_levels)."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.dump_support import TINY, Dump

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(params=[pytest.param("pytorch"), pytest.param("mindspore", marks=pytest.mark.mindspore)])
def framework(request):
    if request.param == "pytorch":
        pytest.importorskip("torch")
    else:
        pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")
    return request.param


def _demo(framework):
    """(run_demo under zero-code capture, plain train) of the framework's demo."""
    if framework == "pytorch":
        from test_capture_support import run_demo

        from engines.adapters.torch.demo import train
    else:
        from test_mindspore_support import run_demo

        from engines.adapters.mindspore.demo import train
    return run_demo, train


def _fail_every_seventh_statistic(framework, monkeypatch):
    """Every seventh tensor summary raises, wherever the framework's adapter computes it."""
    calls = {"n": 0}

    def failing(real):
        def call(*args):
            calls["n"] += 1
            if calls["n"] % 7 == 0:
                raise RuntimeError("injected failure")
            return real(*args)
        return call

    if framework == "pytorch":
        from engines.adapters.torch import tensor_stats

        # both ways a summary is computed: the native fast path's call (``TensorEntries.entry`` asks it directly)
        # and the Python path
        fast = tensor_stats.host_row()
        if fast is not None:
            monkeypatch.setattr(tensor_stats, "host_row", lambda: failing(fast))
        monkeypatch.setattr(tensor_stats.StatsBatch, "add_general", failing(tensor_stats.StatsBatch.add_general))
    else:
        from engines.adapters.mindspore import tensor_stats

        monkeypatch.setattr(tensor_stats, "host_row", failing(tensor_stats.host_row))


def test_a_failing_hook_never_stops_training(tmp_path, caplog, monkeypatch, framework):
    run_demo, train = _demo(framework)
    baseline = train(dict(TINY)).losses
    _fail_every_seventh_statistic(framework, monkeypatch)
    # import-linter (tests/test_layering.py, same process) configures logging and disables existing loggers
    monkeypatch.setattr(logging.getLogger("engines.capture"), "disabled", False)
    with caplog.at_level("WARNING", logger="engines.capture"):
        dump, summary, result = run_demo(tmp_path, TINY, level="mix")
    assert result.steps == 2 and all(np.isfinite(result.losses))
    assert result.losses == baseline  # training went on, numbers untouched
    failed = {k: v for k, v in summary.missing.items() if k.startswith("failed: RuntimeError")}
    assert failed and sum(failed.values()) >= 10
    logged = [r for r in caplog.records if "injected failure" in r.getMessage()]
    assert len(logged) == len(failed)  # one log line per reason, not per occurrence
    assert dump.steps() == [0, 1] and len(dump.names(0)) > 100 and dump.names(1)


SAMPLES = {"pytorch": ("statistics.json", "Functional.linear.8.backward"),
           "mindspore": ("mindspore_statistics.json", "MintFunctional.linear.8.backward")}


def test_probe_tui_run_on_the_sample_config_prints_where_the_dump_is(tmp_path, framework):
    """Tried as a new user would: the sample config, from a clean directory."""
    name, last_linear_backward = SAMPLES[framework]
    cfg = json.loads((ROOT / "sample_configs" / name).read_text())
    (tmp_path / name).write_text(json.dumps(cfg))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "probe_tui", "--run", name], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    runs = [p for p in (tmp_path / cfg["dump_path"]).iterdir() if p.is_dir() and p.name != "latest"]
    assert len(runs) == 1, runs
    assert runs[0].name in done.stderr and "records" in done.stderr
    assert json.loads((runs[0] / "run.json").read_text())["framework"] == framework
    dump = Dump(runs[0] / "rank0")
    assert dump.steps() == list(range(cfg["target"]["demo"]["steps"]))
    assert last_linear_backward in dump.names(2)


# a module record's kind, then the API names the demo's linear and softmax calls are recorded under
NAMING = {"pytorch": ("Module", "Functional.linear", "Functional.softmax"),
          "mindspore": ("Cell", "MintFunctional.linear", "MintFunctional.softmax")}


def test_l0_hierarchy_and_parents(framework, demo_level_dumps):
    kind = NAMING[framework][0]
    dump = demo_level_dumps(framework)["L0"][0]
    mods = dump.reader.modules()
    table = dict(zip(mods["name"], zip(mods["cls"], mods["parent"])))
    assert table["blocks.0.attn.qkv"] == ("Linear", "blocks.0.attn")
    assert table["head"] == ("Linear", "")
    rec = dump.record(kind + ".blocks.0.attn.qkv.Linear.forward.0")
    assert rec["parent"] == kind + ".blocks.0.attn.CausalSelfAttention.forward.0"
    assert dump.record(kind + ".blocks.0.attn.qkv.Linear.backward.0")["parent"] == \
        kind + ".blocks.0.attn.CausalSelfAttention.backward.0"
    frames = dump.reader.stack(int(rec["stack"]))
    assert frames and any("demo_model.py" in f for f in frames)


def test_mix_links_apis_to_modules_and_agrees_with_l1(framework, demo_level_dumps):
    kind, linear, softmax = NAMING[framework]
    mix, summary, _ = demo_level_dumps(framework)["mix"]
    l1 = demo_level_dumps(framework)["L1"][0]
    names = mix.names(0)
    assert kind + ".blocks.1.mlp.fc2.Linear.forward.0" in names and "Functional.gelu.1.forward" in names
    assert mix.record(linear + ".0.forward")["parent"] == kind + ".blocks.0.attn.qkv.Linear.forward.0"
    assert mix.record(linear + ".0.backward")["parent"] == kind + ".blocks.0.attn.qkv.Linear.backward.0"
    assert mix.record("Functional.gelu.0.forward")["parent"] == kind + ".blocks.0.mlp.MLP.forward.0"
    assert mix.record("Functional.cross_entropy.0.forward")["parent"] == ""
    # the same API records, with the same statistics, as L1
    api = [n for n in names if not n.startswith(kind + ".")]
    assert sorted(api) == sorted(l1.names(0))
    for name in (linear + ".3.forward", softmax + ".1.backward"):
        a, b = mix.rows(name), l1.rows(name)
        assert {k: tuple(v[c] for c in ("max", "min", "mean", "norm")) for k, v in a.items()} == \
            {k: tuple(v[c] for c in ("max", "min", "mean", "norm")) for k, v in b.items()}
    assert not summary.missing
