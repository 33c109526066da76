"""grad_probe and monitor on MindSpore: the optimizer-call hook records the demo's gradients as computed here,
the MindSpore and PyTorch demos' gradient signs agree, the monitor finds the injected gradient explosion at its
step in its block, and neither changes a number of the training."""

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.mindspore
ms = pytest.importorskip("mindspore", reason="MindSpore is not installed (pip install mindspore==2.10.0)")

from engines.events import ListSink  # noqa: E402
from engines.grad_probe.reader import GradReader  # noqa: E402
from engines.monitor.reader import open_metrics  # noqa: E402
from engines.runner import run_job  # noqa: E402
from schemas import load_config  # noqa: E402

KNOBS = {"preset": "tiny", "steps": 3}


def direct_grads(knobs):
    """Every parameter's gradient at every step, read at the optimizer call of a plain demo run."""
    from engines.adapters.mindspore import demo

    grads = []
    state = {}

    def on_build(model, optimizer):
        original = type(optimizer).construct
        state["names"] = [p.name for p in optimizer.parameters]

        def construct(self, gradients):
            grads.append({n: g.asnumpy().copy() for n, g in zip(state["names"], gradients)})
            return original(self, gradients)

        optimizer.construct = construct.__get__(optimizer)

    result = demo.train(dict(knobs), on_build=on_build)
    return grads, result.losses


def _run(tmp_path, config):
    outcome = run_job(load_config(config), events=ListSink(), fail_on_findings=True)
    return outcome


@pytest.fixture(scope="module")
def grad_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ms_grad")
    config = {"task": "grad_probe", "dump_path": str(tmp / "grad_ms"), "framework": "mindspore",
              "target": {"demo": KNOBS}, "grad_probe": {"grad_level": "L2", "export_csv": True}}
    outcome = _run(tmp, config)
    assert outcome.exit_code == 0, outcome.summary.get("error")
    return tmp, Path(outcome.run_dir)


def test_grad_probe_records_the_gradients_of_every_optimizer_call(grad_run):
    _, run_dir = grad_run
    direct, _ = direct_grads(KNOBS)
    reader = GradReader(run_dir / "rank0")
    assert reader.steps() == [0, 1, 2]
    for step, grads in enumerate(direct):
        data = reader.read_step(step)
        assert data.names == list(grads)
        for i, name in enumerate(data.names):
            g = grads[name]
            assert np.array_equal(data.direction(i).reshape(-1), (g > 0).reshape(-1))
            assert data.max[i] == g.max() and data.min[i] == g.min()
            assert data.norm[i] == pytest.approx(float(np.linalg.norm(g.astype(np.float64))), rel=1e-9)
    header = (run_dir / "rank0" / "grad_summary_0.csv").read_text().splitlines()[0]
    assert header == 'param_name,"(-inf, -1]","(-1, 0]","(0, 1]","(1, inf)",=0,max,min,norm,shape'
    assert json.loads((run_dir / "run.json").read_text())["framework"] == "mindspore"


def test_the_two_frameworks_gradient_signs_agree(grad_run):
    pytest.importorskip("torch")
    tmp, ms_run = grad_run
    pt = _run(tmp, {"task": "grad_probe", "dump_path": str(tmp / "grad_pt"), "framework": "pytorch",
                    "target": {"demo": KNOBS}, "grad_probe": {"grad_level": "L1"}})
    assert pt.exit_code == 0
    outcome = _run(tmp, {"task": "grad_compare", "dump_path": str(tmp / "cmp"), "grad_compare": {
        "target_path": str(ms_run), "golden_path": str(pt.run_dir), "plots": False}})
    rows = [line.split(",") for line in (Path(outcome.run_dir) / "rank0" / "similarities.csv").read_text().split()]
    summary = [float(x) for x in rows[-1][1:]]
    assert rows[-1][0] == "summary" and len(summary) == 3
    assert min(summary) > 0.99  # float32 noise flips only near-zero gradient signs


def test_monitor_finds_the_gradient_explosion_and_changes_no_number(tmp_path):
    knobs = dict(KNOBS, steps=4, faults={"grad_explosion": {"step": 3, "layer": 1, "scale": 1e4}})
    config = {"task": "monitor", "dump_path": str(tmp_path / "mon"), "framework": "mindspore",
              "target": {"demo": knobs}, "monitor": {
                  "wg_distribution": True, "xy_distribution": True, "ops": ["norm", "max", "nans"],
                  "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0}}]}}}
    outcome = _run(tmp_path, config)
    assert outcome.exit_code == 3, outcome.summary
    assert outcome.summary["first_alert"].startswith("step 3: blocks.1.")
    metrics = open_metrics(outcome.run_dir)
    assert metrics.steps() == [0, 1, 2, 3]
    alerts = metrics.alerts()
    assert {a["step"] for a in alerts} == {3}
    grads = [a for a in alerts if a["tag"] == "grad_reduced"]
    assert grads and all(a["module"].startswith("blocks.1.") for a in grads)
    direct, losses = direct_grads(knobs)
    assert list(metrics.read("train/loss/value").values) == pytest.approx(losses, rel=0, abs=0)  # unchanged
    norm = metrics.read("grad_reduced/head.weight/norm")
    assert list(norm.steps) == [0, 1, 2, 3]
    expected = [float(np.linalg.norm(g["head.weight"].astype(np.float64))) for g in direct]
    assert list(norm.values) == pytest.approx(expected, rel=1e-9)
    assert metrics.read("actv/blocks.0.attn.qkv.output/norm").values[0] > 0
    assert metrics.read("actv_grad/blocks.1.attn.qkv.output/norm").values[3] > 1e3 * \
        metrics.read("actv_grad/blocks.1.attn.qkv.output/norm").values[2]


def test_in_script_monitor_on_a_mindspore_model(tmp_path):
    from mindspore import Tensor

    from engines.adapters.mindspore.demo import build_model, loss_function, make_optimizer
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs
    from probe_tui import start_monitor

    knobs = resolve_knobs(KNOBS)
    model = build_model(knobs)
    optimizer = make_optimizer(model, knobs)
    grad_fn = ms.value_and_grad(loss_function(model, knobs.vocab, False), None, optimizer.parameters)
    config = {"task": "monitor", "dump_path": str(tmp_path / "inscript"),
              "monitor": {"wg_distribution": True, "mv_distribution": True, "ur_distribution": True}}
    mon = start_monitor(model, optimizer, config)
    losses = []
    for x, y in batches(knobs):
        loss, grads = grad_fn(Tensor(x), Tensor(y))
        mon.record_loss(loss)
        optimizer(grads)
        losses.append(float(loss.asnumpy()))
    mon.stop()
    metrics = open_metrics(mon.run_dir)
    assert metrics.steps() == [0, 1, 2]
    assert list(metrics.read("train/loss/value").values) == pytest.approx(losses)
    m = optimizer.exp_avg[-1].asnumpy().astype(np.float64)  # head.bias after the last step
    assert metrics.read("exp_avg/head.bias/norm").values[-1] == pytest.approx(float(np.linalg.norm(m)), rel=1e-6)
    assert 0 < metrics.read("update_ratio/head.weight/value").values[-1] < 1
    assert json.loads((mon.run_dir / "run.json").read_text())["framework"] == "mindspore"
