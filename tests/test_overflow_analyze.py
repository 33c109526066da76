"""analyze_overflow: replay the flagged calls of an overflow_check run and classify them."""

import csv

import pytest

torch = pytest.importorskip("torch")

from engines.events import NullSink  # noqa: E402
from engines.overflow.analyze import CSV_COLUMNS, CSV_NAME, judge_replay  # noqa: E402
from engines.runner import JobError, run_job  # noqa: E402
from engines.store import StoreReader  # noqa: E402
from schemas import load_config  # noqa: E402
from tests.test_overflow_check import _session_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _analyze(path, tmp_path, dtype="float64", fail=True):
    job = load_config({"task": "analyze_overflow", "dump_path": str(tmp_path / "analysis"),
                       "analyze_overflow": {"path": str(path), "dtype": dtype}})
    return run_job(job, events=NullSink(), fail_on_findings=fail)


def test_demo_fp16_exp_is_a_float16_range_overflow(tmp_path):
    job = load_config({"task": "overflow_check", "dump_path": str(tmp_path / "dump"),
                       "target": {"demo": {"preset": "tiny", "steps": 3, "dtype": "fp16",
                                           "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}},
                       "overflow_check": {"overflow_nums": 2}})
    run_job(job, events=NullSink())
    outcome = _analyze(tmp_path / "dump" / "latest", tmp_path)
    assert outcome.exit_code == 3
    replays = outcome.summary["replays"]
    assert [(r["name"], r["category"]) for r in replays] == [("Torch.exp.0.forward", "precision"),
                                                             ("Tensor.masked_fill.1.forward", "inherited")]
    exp = replays[0]
    assert exp["step"] == 1 and exp["dtype"] == "torch.float16" and exp["as_saved"] == "+inf"
    assert exp["high_precision"] == "finite" and exp["high_max_abs"] > 65504
    assert "above float16's" in exp["verdict"] and "Torch.exp.0.forward is" not in exp["verdict"]
    assert "the step's first origin is Torch.exp.0.forward" in replays[1]["verdict"]
    assert outcome.summary["verdict"].startswith("2 flagged calls: 1 precision, 1 inherited. Torch.exp.0.forward")
    out = outcome.run_dir
    with open(f"{out}/{CSV_NAME}", newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_COLUMNS and rows[1][2] == "Torch.exp.0.forward" and rows[1][9] == "precision"
    with StoreReader(out, "overflow_analysis") as r:
        table = r.read("replays")
    assert list(table["name"]) == ["Torch.exp.0.forward", "Tensor.masked_fill.1.forward"]
    assert list(table["category"]) == ["precision", "inherited"]


class _Log(torch.nn.Module):
    def forward(self, x):
        return torch.log(x) + (x / x).sum()


def test_log_of_zero_and_zero_over_zero_overflow_in_float64_too(tmp_path):
    x = torch.tensor([0.0, 1.0, 2.0])
    _session_run(lambda: _Log()(x), tmp_path / "run")
    outcome = _analyze(tmp_path / "run" / "rank0", tmp_path)
    replays = {r["name"]: r for r in outcome.summary["replays"]}
    assert replays["Torch.log.0.forward"]["category"] == "range"
    assert "overflows in float64 too (-inf)" in replays["Torch.log.0.forward"]["verdict"]
    assert replays["Tensor.div.0.forward"]["category"] == "range"
    assert "gives nan too" in replays["Tensor.div.0.forward"]["verdict"]
    assert replays["Tensor.add.0.forward"]["category"] == "inherited"


class _InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 1.0
        return y.mul_(1e4)


def test_in_place_call_replays_from_its_pre_call_input(tmp_path):
    _session_run(lambda: _InPlace()(torch.full((3,), 10.0, dtype=torch.float16)), tmp_path / "run")
    outcome = _analyze(tmp_path / "run" / "rank0", tmp_path, dtype="float32")
    (r,) = outcome.summary["replays"]
    assert r["name"] == "Tensor.mul_.0.forward" and r["category"] == "precision"
    assert r["high_max_abs"] == pytest.approx(1e5)


def test_a_healthy_run_has_nothing_to_replay(tmp_path):
    job = load_config({"task": "overflow_check", "dump_path": str(tmp_path / "dump"),
                       "target": {"demo": {"preset": "tiny", "steps": 1}}})
    run_job(job, events=NullSink())
    outcome = _analyze(tmp_path / "dump", tmp_path)  # a dump_path means its latest run
    assert outcome.exit_code == 0 and outcome.summary["verdict"] == "the run flagged no call: nothing to replay"


def test_bad_paths_are_one_line_errors(tmp_path):
    with pytest.raises(JobError, match="analyze_overflow.path: .*no such file"):
        _analyze(tmp_path / "missing", tmp_path)
    job = load_config({"task": "statistics", "dump_path": str(tmp_path / "stats"),
                       "target": {"demo": {"preset": "tiny", "steps": 1}}})
    run_job(job, events=NullSink())
    with pytest.raises(JobError, match="is not an overflow_check run"):
        _analyze(tmp_path / "stats" / "latest", tmp_path)
    # a run folder without rank folders (what compare writes)
    from engines.runs import create_run

    result = create_run(tmp_path / "cmp", task="compare", config={"task": "compare"}, framework="")
    with pytest.raises(JobError, match="is not an overflow_check run"):
        _analyze(result.path, tmp_path)


def test_judge_replay_wording():
    from engines.adapters.torch.overflow_replay import OutputFacts, ReplayResult
    from engines.overflow import origin as og

    res = ReplayResult(OutputFacts(og.POSINF, 1.0, "torch.float16"), OutputFacts(0, 3e4, "torch.float64"),
                       "float64")
    category, text = judge_replay(res, "torch.float16", "float64", 65504.0)
    assert category == "precision" and "fits float16" in text
    res = ReplayResult(OutputFacts(0, 1.0, "torch.float16"), OutputFacts(0, 3.0, "torch.float64"), "float64")
    assert judge_replay(res, "torch.float16", "float64", 65504.0)[0] == "not reproduced"
