"""The torch monitor on a small model: stored values equal ones computed directly, alerts name the module,
training is unchanged, exports and the reader API work."""

import csv
import json
import types

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch.monitor import MonitorSession, alert_rules  # noqa: E402
from engines.monitor.reader import open_metrics  # noqa: E402
from engines.monitor.writer import MetricsWriter  # noqa: E402

ALL_OPS = ["min", "max", "mean", "norm", "zeros", "nans"]


def section(**overrides):
    base = dict(targets={}, xy_distribution=False, all_xy=False, forward_only=False, backward_only=False,
                wg_distribution=True, mv_distribution=False, ur_distribution=False, param_distribution=False,
                mg_direction=False, ops=["norm"], eps=1e-8, start_step=0, step_interval=1,
                collect_times=100_000_000, module_ranks=[], squash_name=False,
                alert={"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 3.0}},
                                 {"rule_name": "AnomalyNan", "args": {}}]})
    base.update(overrides)
    return types.SimpleNamespace(**base)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(10, 20)
        self.fc2 = torch.nn.Linear(20, 4)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def train(steps=4, seed=0, explode_at=None, record=None):
    """Plain training loop; ``record(step, model, optimizer, out, loss)`` snapshots values after backward."""
    torch.manual_seed(seed)
    model = Net()
    loss_fn = torch.nn.MSELoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses, grads = [], []
    for step in range(steps):
        x = torch.randn(6, 10)
        out = model(x)
        loss = loss_fn(out, torch.zeros(6, 4))
        optimizer.zero_grad()
        loss.backward()
        if explode_at == step:
            with torch.no_grad():
                model.fc1.weight.grad.mul_(1e4)
        if record is not None:
            record(step, model, optimizer, x, loss)
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        optimizer.step()
        losses.append(loss.item())
    train.last_optimizer = optimizer
    return model, losses, grads


def monitored(tmp_path, sec, formats=("hdf5",), **train_kwargs):
    writer = MetricsWriter(tmp_path / "rank0", rules=alert_rules(sec), formats=formats)
    session = MonitorSession(sec, writer).install()
    try:
        result = train(**train_kwargs)
    finally:
        session.remove()
        writer.close()
    return open_metrics(tmp_path), result


def test_weight_gradient_norms_loss_and_total_norm_match_direct_values(tmp_path):
    metrics, (_, losses, grads) = monitored(tmp_path, section())
    assert metrics.steps() == [0, 1, 2, 3]
    keys = [s.key for s in metrics.series()]
    assert "grad_reduced/fc1.weight/norm" in keys and "train/loss/value" in keys and "train/grad_norm/value" in keys
    for name in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        series = metrics.read(f"grad_reduced/{name}/norm")
        assert list(series.steps) == [0, 1, 2, 3]
        expected = [g[name].norm().item() for g in grads]
        np.testing.assert_allclose(series.values, expected, rtol=1e-6)
    np.testing.assert_allclose(metrics.read("train/loss/value").values, losses, rtol=1e-6)
    total = [torch.linalg.vector_norm(torch.stack([t.norm() for t in g.values()])).item() for g in grads]
    np.testing.assert_allclose(metrics.read("train/grad_norm/value").values, total, rtol=1e-6)
    window = metrics.read("grad_reduced/fc2.bias/norm", steps=(1, 2))
    assert list(window.steps) == [1, 2]


def test_activation_metrics_match_direct_values(tmp_path):
    seen = {}

    def record(step, model, optimizer, x, loss):
        seen[step] = x

    sec = section(xy_distribution=True, wg_distribution=False, ops=ALL_OPS)
    metrics, (model, _, _) = monitored(tmp_path, sec, steps=2, record=record)
    names = {s.name for s in metrics.series(tag="actv")}
    assert names == {"fc1.input", "fc1.output", "fc2.input", "fc2.output"}
    assert {s.name for s in metrics.series(tag="actv_grad")} >= {"fc1.output", "fc2.output"}
    # fc1's input is the batch itself: check every op against numpy
    x = seen[1].double().numpy()
    got = {s.metric: metrics.read(s).values[1] for s in metrics.series(tag="actv", name="fc1.input")}
    assert got["min"] == pytest.approx(x.min()) and got["max"] == pytest.approx(x.max())
    assert got["mean"] == pytest.approx(x.mean(), rel=1e-9) and got["norm"] == pytest.approx(np.linalg.norm(x))
    assert got["zeros"] == 0.0 and got["nans"] == 0.0 and got["infs"] == 0.0
    info = metrics.series(tag="actv", name="fc1.output")[0]
    assert info.shape == "[6, 20]" and info.dtype == "torch.float32" and info.module == "fc1"


def test_gradient_explosion_raises_an_alert_at_that_step_naming_the_module(tmp_path):
    metrics, _ = monitored(tmp_path, section(), steps=5, explode_at=3)
    alerts = metrics.alerts()
    assert alerts, "no alert raised"
    first = alerts[0]
    assert first["step"] == 3 and first["module"] == "fc1" and first["name"] == "fc1.weight"
    assert first["metric"] == "norm" and first["rule"] == "AnomalyTurbulence" and first["kind"] == "up"
    lines = [json.loads(line) for line in (tmp_path / "rank0" / "anomalies.jsonl").read_text().splitlines()]
    assert lines[0]["step"] == 3 and lines[0]["name"] == "fc1.weight" and "fc1.weight" in lines[0]["message"]
    assert {"rank", "micro_step", "pp_stage", "vpp_stage", "call_id", "tag_name", "group_mates"} <= set(lines[0])
    # a follower reads only the alerts after those it has seen
    assert metrics.alerts(since=1) == alerts[1:]
    assert metrics.alerts(since=len(alerts)) == [] and metrics.alerts(since=len(alerts) + 5) == []


def test_optimizer_state_update_and_direction_metrics(tmp_path):
    snapshots = {}

    def record(step, model, optimizer, x, loss):
        state = optimizer.state.get(model.fc1.weight) or {}
        snapshots[step] = {"grad": model.fc1.weight.grad.clone(), "m": state.get("exp_avg", None)}
        if snapshots[step]["m"] is not None:
            snapshots[step]["m"] = snapshots[step]["m"].clone()

    sec = section(wg_distribution=False, mv_distribution=True, ur_distribution=True, mg_direction=True,
                  param_distribution=True)
    metrics, (model, _, _) = monitored(tmp_path, sec, steps=3, record=record)
    tags = {s.tag for s in metrics.series()}
    assert {"exp_avg", "exp_avg_sq", "update", "update_ratio", "mg_direction", "param_origin",
            "param_updated"} <= tags
    # after the last step the optimizer state and the parameters are what the monitor saw last
    state = train.last_optimizer.state[model.fc1.weight]
    assert metrics.read("exp_avg/fc1.weight/norm").values[-1] == pytest.approx(state["exp_avg"].norm().item(),
                                                                              rel=1e-6)
    assert metrics.read("param_updated/fc1.weight/norm").values[-1] == pytest.approx(model.fc1.weight.norm().item(),
                                                                                    rel=1e-6)
    assert metrics.read("mg_direction/fc1.weight/value").values[0] == 1.0
    g, m = snapshots[2]["grad"], snapshots[2]["m"]
    agree = ((torch.sign(g) * torch.sign(m)).sum().item() / g.numel() + 1) / 2
    assert metrics.read("mg_direction/fc1.weight/value").values[2] == pytest.approx(agree)
    ratio = metrics.read("update_ratio/fc1.weight/value").values
    assert np.all(ratio > 0) and np.all(ratio < 1)


def test_monitoring_does_not_change_loss_or_gradients(tmp_path):
    _, ref_losses, ref_grads = train(steps=3, seed=3)
    sec = section(xy_distribution=True, mv_distribution=True, ur_distribution=True, mg_direction=True,
                  param_distribution=True, ops=ALL_OPS + ["id"])
    _, (_, losses, grads) = monitored(tmp_path, sec, steps=3, seed=3)
    assert losses == ref_losses
    for a, b in zip(ref_grads, grads):
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_schedule_start_interval_and_collect_times(tmp_path):
    sec = section(start_step=1, step_interval=2, collect_times=2)
    metrics, _ = monitored(tmp_path, sec, steps=8)
    assert metrics.steps() == [1, 3]


def test_targets_select_modules_and_parameters(tmp_path):
    sec = section(xy_distribution=True, targets={"fc2": {"input": None}})
    metrics, _ = monitored(tmp_path, sec, steps=1)
    assert {s.name for s in metrics.series(tag="actv")} == {"fc2.input", "fc2.output"}
    assert {s.name for s in metrics.series(tag="grad_reduced")} == {"fc2.weight", "fc2.bias"}


def test_csv_and_tensorboard_exports(tmp_path):
    pytest.importorskip("tensorboard")
    metrics, (_, losses, _) = monitored(tmp_path, section(ops=["norm", "max"]), formats=("hdf5", "csv", "tensorboard"),
                                        steps=2)
    with open(tmp_path / "rank0" / "monitor_csv" / "grad_reduced_1-1.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["vpp_stage", "name", "step", "max", "norm"]
    assert rows[1][:3] == ["0", "fc1.weight", "1"]
    assert float(rows[1][4]) == pytest.approx(metrics.read("grad_reduced/fc1.weight/norm").values[1], abs=1e-6)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "rank0" / "tensorboard"))
    acc.Reload()
    events = acc.Scalars("loss/rank0/train_value")
    assert [e.step for e in events] == [0, 1]
    assert events[1].value == pytest.approx(losses[1], rel=1e-6)


def test_micro_batch_gradients_structure_and_stacks(tmp_path):
    sec = section(wg_distribution=True, monitor_mbs_grad=True, print_struct=True, stack_info=True)
    writer = MetricsWriter(tmp_path / "rank0", rules=alert_rules(sec))
    session = MonitorSession(sec, writer).install()
    micro_grads = []
    try:
        torch.manual_seed(0)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            for _micro in range(2):  # gradient accumulation over two micro-batches
                model(torch.randn(3, 10)).pow(2).mean().backward()
                micro_grads.append(model.fc2.weight.grad.clone())
            optimizer.step()
    finally:
        session.remove()
        writer.close()
    metrics = open_metrics(tmp_path)
    first = metrics.read("grad_unreduced/fc2.weight/norm").values
    second = metrics.read("grad_unreduced/fc2.weight:1/norm").values
    # each micro-batch's own gradient, before accumulation: the second is the difference of the running sums
    assert first[1] == pytest.approx(micro_grads[2].norm().item(), rel=1e-6)
    assert second[1] == pytest.approx((micro_grads[3] - micro_grads[2]).norm().item(), rel=1e-5)
    assert metrics.read("grad_reduced/fc2.weight/norm").values[1] == pytest.approx(micro_grads[3].norm().item(),
                                                                                   rel=1e-6)
    struct = json.loads((tmp_path / "rank0" / "module_struct.json").read_text())
    assert struct["fc1"]["input"] == {"config": "tuple[1]", "0": "size=(3, 10), dtype=torch.float32"}
    assert struct["fc2"]["output"]["0"] == "size=(3, 4), dtype=torch.float32"
    stacks = json.loads((tmp_path / "rank0" / "stack_info.json").read_text())
    assert set(stacks) == {"fc1", "fc2"} and any("test_monitor_session.py" in line for line in stacks["fc1"])


def test_per_step_files_for_network_file_systems_read_the_same(tmp_path):
    writer = MetricsWriter(tmp_path / "rank0", store_options={"mode": "per_step"})
    session = MonitorSession(section(alert={"rules": []}), writer).install()
    try:
        _, losses, grads = train(steps=3)
    finally:
        session.remove()
        writer.close()
    assert not (tmp_path / "rank0" / "metrics.h5").exists()
    assert sorted(p.name for p in (tmp_path / "rank0").glob("metrics-s*.h5")) == [f"metrics-s{i}.h5" for i in range(3)]
    metrics = open_metrics(tmp_path / "rank0")
    assert metrics.steps() == [0, 1, 2]
    np.testing.assert_allclose(metrics.read("train/loss/value").values, losses, rtol=1e-6)
    updates = list(metrics.follow(poll_s=0.01, timeout_s=5))
    assert [u.step for u in updates] == [0, 1, 2]
    assert updates[2].values["grad_reduced/fc1.bias/norm"] == pytest.approx(grads[2]["fc1.bias"].norm().item(), rel=1e-6)
