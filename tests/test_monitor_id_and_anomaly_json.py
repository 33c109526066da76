"""monitor: msprobe's ``id`` op is the value of a 0-dim tensor and nothing otherwise (no all-NaN series, no
AnomalyNan on every series); anomalies.jsonl is strict JSON (NaN and inf written as null)."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_monitor_session import monitored, section  # noqa: E402

from engines.monitor.alerts import RuleSpec  # noqa: E402
from engines.monitor.reader import open_metrics  # noqa: E402
from engines.monitor.writer import MetricsWriter  # noqa: E402


def _strict(text):
    def refuse(constant):
        raise ValueError("not JSON: " + constant)
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


def test_id_of_non_scalar_tensors_is_no_series_and_no_alert(tmp_path):
    sec = section(xy_distribution=True, wg_distribution=True, ops=["norm", "id"])
    metrics, _ = monitored(tmp_path, sec, steps=2)
    series = metrics.series()
    assert [s for s in series if s.metric == "norm"]  # the other op is still there
    assert [s.key for s in series if s.metric == "id"] == []  # every tensor here has dimensions
    assert metrics.alerts() == []
    anomalies = tmp_path / "rank0" / "anomalies.jsonl"
    assert not anomalies.exists() or anomalies.read_text() == ""


def test_id_of_a_scalar_is_its_value(tmp_path):
    writer = MetricsWriter(tmp_path / "rank0", rules=[RuleSpec("AnomalyNan")])
    keys = [("actv", "head.output", "id"), ("actv", "body.output", "id"), ("actv", "body.output", "norm")]
    alerts = writer.write_step(0, keys, np.array([2.5, np.nan, 3.0]), ["[]", "[4, 3]", "[4, 3]"],
                               ["torch.float32"] * 3)
    writer.close()
    assert alerts == []
    metrics = open_metrics(tmp_path)
    assert sorted(s.key for s in metrics.series()) == ["actv/body.output/norm", "actv/head.output/id"]
    assert list(metrics.read("actv/head.output/id").values) == [2.5]


def test_anomalies_jsonl_is_json_with_null_for_nan_and_inf(tmp_path):
    writer = MetricsWriter(tmp_path / "rank0", rules=[RuleSpec("AnomalyNan")])
    keys = [("grad_reduced", "fc1.weight", "norm"), ("grad_reduced", "fc2.weight", "norm")]
    alerts = writer.write_step(0, keys, np.array([np.nan, np.inf]), ["[3]", "[3]"], ["torch.float32"] * 2)
    writer.close()
    assert len(alerts) == 2
    lines = _strict((tmp_path / "rank0" / "anomalies.jsonl").read_text())
    assert [(line["name"], line["kind"], line["value"], line["baseline"]) for line in lines] == [
        ("fc1.weight", "nan", None, None), ("fc2.weight", "inf", None, None)]
