"""The monitor end to end on the demo: `probe-tui --run`'s code path, a gradient explosion found at its step in
its block, a second process following the store while training runs, config edits applied at the next step,
the in-script entry, and training left bit-identical."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.events import ListSink  # noqa: E402
from engines.monitor.reader import open_metrics  # noqa: E402
from engines.runner import run_job  # noqa: E402
from schemas import load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KNOBS = {"preset": "tiny", "steps": 5}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def monitor_config(tmp_path, target, **section):
    body = {"wg_distribution": True, "ops": ["norm", "max", "nans"],
            "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 1.0, "direction": "both"}},
                                {"rule_name": "AnomalyNan", "args": {}}]}}
    body.update(section)
    return {"task": "monitor", "dump_path": str(tmp_path / "dump"), "target": target, "monitor": body}


def test_gradient_explosion_alerts_at_its_step_naming_the_block(tmp_path):
    knobs = dict(KNOBS, faults={"grad_explosion": {"step": 3, "layer": 1, "scale": 1e4}})
    job = load_config(monitor_config(tmp_path, {"demo": knobs}, xy_distribution=True, format=["hdf5", "csv"]))
    events = ListSink()
    outcome = run_job(job, events=events, fail_on_findings=True)
    assert outcome.exit_code == 3 and outcome.status == "finished"
    assert outcome.summary["first_alert"].startswith("step 3: blocks.1.")
    metrics = open_metrics(outcome.run_dir)
    assert metrics.steps() == [0, 1, 2, 3, 4] and metrics.status == "finished"
    alerts = metrics.alerts()
    assert alerts and {a["step"] for a in alerts} == {3}
    grads = [a for a in alerts if a["tag"] == "grad_reduced"]
    assert grads and all(a["module"].startswith("blocks.1.") for a in grads)
    assert {a["kind"] for a in grads} == {"up"}
    # the loss the demo reports is stored with its step
    losses = metrics.read("train/loss/value")
    assert list(losses.steps) == [0, 1, 2, 3, 4]
    assert [e["loss"] for e in events.of("step")] == pytest.approx(list(losses.values))
    messages = [e["text"] for e in events.of("message") if e["level"] == "warning"]
    assert any(m.startswith("alert at step 3:") for m in messages)
    rank_dir = Path(outcome.run_dir) / "rank0"
    assert (rank_dir / "anomalies.jsonl").exists() and (rank_dir / "monitor_csv" / "grad_reduced_3-3.csv").exists()


def test_monitoring_the_demo_leaves_training_bit_identical(tmp_path):
    from engines.adapters.torch.demo import train
    from engines.adapters.torch.monitor import MonitorSession
    from engines.monitor.writer import MetricsWriter

    def run(monitor: bool):
        state = {}
        session = writer = None
        if monitor:
            sec = load_config(monitor_config(tmp_path, None, xy_distribution=True, mv_distribution=True,
                                             ur_distribution=True, mg_direction=True, param_distribution=True,
                                             ops=["norm", "min", "max", "mean", "zeros", "nans", "id"])).monitor
            writer = MetricsWriter(tmp_path / "rank0")
            session = MonitorSession(sec, writer).install()
        try:
            result = train(dict(KNOBS, steps=3), on_build=lambda m, o: state.update(model=m))
        finally:
            if session is not None:
                session.remove()
                writer.close()
        return result.losses, {k: v.clone() for k, v in state["model"].state_dict().items()}

    losses_off, params_off = run(False)
    losses_on, params_on = run(True)
    assert losses_on == losses_off
    assert all(torch.equal(params_on[k], params_off[k]) for k in params_off)
    assert len(open_metrics(tmp_path / "rank0").series()) > 100


FOLLOWER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from engines.monitor.reader import open_metrics, MetricsError
    dump, acks = Path(sys.argv[1]), Path(sys.argv[2])
    deadline = time.time() + 60
    while True:
        try:
            metrics = open_metrics(dump)
            break
        except MetricsError:
            if time.time() > deadline:
                sys.exit("no store appeared")
            time.sleep(0.05)
    for update in metrics.follow(poll_s=0.05, timeout_s=60):
        print("step", update.step, len(update.values), metrics.status, flush=True)
        (acks / f"ack{update.step}").touch()
    print("torch loaded:", "torch" in sys.modules, flush=True)
""")

WAITING_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from engines.adapters.torch.demo import train
    acks = Path(sys.argv[1])

    def wait_for_reader(step, loss):
        deadline = time.time() + 60
        while not (acks / f"ack{step}").exists():
            if time.time() > deadline:
                raise SystemExit(f"the reader never saw step {step} while training waited")
            time.sleep(0.02)

    train({"preset": "tiny", "steps": 4}, on_step=wait_for_reader)
""")


def test_a_second_process_sees_rows_while_training_runs(tmp_path):
    acks = tmp_path / "acks"
    acks.mkdir()
    script = tmp_path / "train_waiting.py"
    script.write_text(WAITING_SCRIPT)
    follower = subprocess.Popen([sys.executable, "-c", FOLLOWER, str(tmp_path / "dump"), str(acks)], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = load_config(monitor_config(tmp_path, {"script": str(script), "args": [str(acks)]}))
        outcome = run_job(job, events=ListSink())
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert outcome.exit_code == 0, outcome.summary.get("error")
    lines = out.splitlines()
    # every step was seen by the other process while the writer was still running (training waited for it)
    assert [line.split()[1] for line in lines[:4]] == ["0", "1", "2", "3"], err
    assert all(line.endswith("running") for line in lines[:4])
    assert lines[-1] == "torch loaded: False"


EDITING_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from engines.adapters.torch.demo import train
    config = Path(sys.argv[1])

    def edit(step, loss):
        # on_step runs after optimizer.step(): the monitor polls at each step end, so an edit made here is
        # seen at the end of the next step and applies from the step after it
        if step == 1:   # a valid edit: activations from step 3 on
            data = json.loads(config.read_text())
            data["monitor"]["xy_distribution"] = True
            data["monitor"]["targets"] = {"blocks.0.mlp": {}}
            config.write_text(json.dumps(data))
        if step == 2:   # a broken edit: reported once, ignored
            config.write_text(config.read_text() + "{oops")

    train({"preset": "tiny", "steps": 5}, on_step=edit)
""")


def test_editing_the_config_applies_at_the_next_step_and_a_bad_edit_is_ignored(tmp_path):
    script = tmp_path / "train_editing.py"
    script.write_text(EDITING_SCRIPT)
    config = tmp_path / "monitor.json"
    config.write_text(json.dumps(monitor_config(tmp_path, {"script": str(script), "args": [str(config)]})))
    events = ListSink()
    outcome = run_job(load_config(str(config)), events=events)
    assert outcome.exit_code == 0, outcome.summary.get("error")
    assert outcome.summary["config_reloads"] == 1
    metrics = open_metrics(outcome.run_dir)
    actv = metrics.series(tag="actv")
    assert {s.name for s in actv} == {"blocks.0.mlp.input", "blocks.0.mlp.output"}
    assert list(metrics.read(actv[0]).steps) == [3, 4]
    warnings = [e["text"] for e in events.of("message") if "not valid" in e["text"]]
    assert len(warnings) == 1 and str(config) in warnings[0]
    assert config.read_text().endswith("{oops")  # the user's file is never rewritten


def test_in_script_entry_on_the_demo(tmp_path):
    from engines.adapters.torch.demo import train
    from probe_tui import start_monitor

    config = monitor_config(tmp_path, None, xy_distribution=True, targets={"blocks.1": {}})
    monitors = []
    result = train(dict(KNOBS, steps=3), on_build=lambda m, o: monitors.append(start_monitor(m, o, config)))
    mon = monitors[0]
    mon.stop()
    run = json.loads((mon.run_dir / "run.json").read_text())
    assert run["status"] == "finished" and run["task"] == "monitor"
    with mon.reader() as metrics:
        assert metrics.steps() == [0, 1, 2]
        assert {s.name for s in metrics.series(tag="actv")} == {"blocks.1.input", "blocks.1.output"}
        norms = metrics.read("grad_reduced/blocks.1.mlp.fc1.weight/norm").values
    assert norms.shape == (3,) and np.all(norms > 0)
    assert len(result.losses) == 3


def test_a_failing_script_keeps_its_completed_steps(tmp_path):
    script = tmp_path / "train_failing.py"
    script.write_text(textwrap.dedent("""
        from engines.adapters.torch.demo import train

        def fail(step, loss):
            if step == 1:
                raise RuntimeError("out of memory (simulated)")

        train({"preset": "tiny", "steps": 5}, on_step=fail)
    """))
    outcome = run_job(load_config(monitor_config(tmp_path, {"script": str(script)})), events=ListSink())
    assert outcome.exit_code == 1 and "out of memory (simulated)" in outcome.summary["error"]
    metrics = open_metrics(outcome.run_dir)
    assert metrics.steps() == [0, 1] and metrics.status == "failed"
