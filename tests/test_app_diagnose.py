"""The app's diagnose: d on a run marks the reference, d on another diagnoses it and lands on the verdict."""

import json
import sys
from pathlib import Path

from probe_tui.app.app import ProbeApp
from probe_tui.app.screens.diagnose import DiagnoseScreen
from probe_tui.app.screens.home import HomeScreen
from tests.app_pilot import pilot_test, rendered_text, viewing, wait_until

# A stand-in for `probe-tui --run CONFIG --events -` (argv: a verdict to copy, the config): reads the diagnose
# config and writes the verdict
# a real diagnose writes, then reports the run's end as the runner does.
FAKE_DIAGNOSE = r'''
import json, sys
from pathlib import Path
config = json.loads(Path(sys.argv[2]).read_text())
out = Path(config["dump_path"]) / "20260101-000000-abcdef"
out.mkdir(parents=True)
verdict = json.loads(Path(sys.argv[1]).read_text())
verdict["target"] = config["diagnose"]["target"]["path"]
verdict["golden"] = config["diagnose"]["golden"]["path"]
(out / "verdict.json").write_text(json.dumps(verdict))
(out / "run.json").write_text(json.dumps({"run_id": out.name, "task": "diagnose", "status": "finished"}))
print(json.dumps({"event": "run_started", "run_dir": str(out), "task": "diagnose", "total_steps": None}), flush=True)
print(json.dumps({"event": "run_finished", "status": "finished", "exit_code": 0, "run_dir": str(out),
                  "summary": {}}), flush=True)
'''

VERDICT = {
    "verdict": "culprit", "decided_by": "stage 2 (tensors)", "stage2_outcome": "confirmed",
    "reason": "score 2.29e+03 (output error 0.00219, input error 0, dtypes explain 9.54e-07); 8.28x the runner-up",
    "culprit": {"op": "Demo.naive_softmax.0.forward", "module": "blocks.1.attn", "step": 0, "rank": 0,
                "where": "demo_model.py:93", "inputs_match": True, "output_differs": True, "error_added": 2.19e-3,
                "out_err": 2.19e-3, "in_err": 0.0, "explained_err": 9.5e-7, "score": 2290.0,
                "inputs": [{"name": "Tensor.masked_fill.1.forward.output.0", "err": 0.0, "matches": True}],
                "outputs": [{"name": "Functional.dropout.3.forward.input.0", "err": 2.19e-3}],
                "stack": ["demo_model.py:93 in lowp_softmax: out = _NAIVE_SOFTMAX(x)"], "members": []},
    "stage1": {"judgement": {"conclusive": True, "top": {"op": "Demo.naive_softmax.0.forward"}}},
    "stage2": {"ran": True, "judgement": {"conclusive": True, "top": {"op": "Demo.naive_softmax.0.forward"}},
               "records": ["a", "b"], "step": 0, "compare": None},
    "module_shares": [], "disk": {"stage2_disk_bytes": 1000, "fraction_of_full_dump": 0.02},
}


def _run(root: Path, name: str) -> Path:
    run = root / "probe_dump" / name / "20250101-000000-{}".format(name[:6].ljust(6, "0"))
    (run / "rank0").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "task": "statistics", "status": "finished",
                                              "config": {"task": "statistics"}}))
    return run


@pilot_test
async def test_the_verdict_screen_shows_the_culprit_and_its_evidence(tmp_path):
    out = tmp_path / "diag"
    out.mkdir()
    (out / "verdict.json").write_text(json.dumps(dict(VERDICT, target="a", golden="b")))
    async with viewing(out, DiagnoseScreen, tmp_path) as (pilot, screen):
        await wait_until(pilot, lambda: screen.verdict)
        text = rendered_text(screen.verdict_renderable, 120)
        assert "Culprit: Demo.naive_softmax.0.forward" in text
        assert "module blocks.1.attn" in text and "tensors confirmed" in text
        evidence = rendered_text(screen.evidence_renderable, 120)
        assert "Tensor.masked_fill.1.forward.output.0" in evidence and "lowp_softmax" in evidence


@pilot_test
async def test_d_twice_on_home_diagnoses_two_runs_and_lands_on_the_verdict(tmp_path):
    golden, target = _run(tmp_path, "fp32"), _run(tmp_path, "lowp")
    fake = tmp_path / "fake_diagnose.py"
    fake.write_text(FAKE_DIAGNOSE)
    verdict = tmp_path / "verdict_source.json"
    verdict.write_text(json.dumps(VERDICT))
    app = ProbeApp(tmp_path, root_label="~/exp", run_command=[sys.executable, str(fake), str(verdict)])
    async with app.run_test(size=(120, 40)) as pilot:
        home = await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.runs
                                and app.screen)
        table = home.query_one("#runs")
        table.focus()

        def select(run: Path) -> None:
            keys = [str(k.value) for k in table.rows]
            table.move_cursor(row=next(i for i, k in enumerate(keys) if Path(k).name == run.name))

        select(golden)
        await pilot.press("g")
        select(target)
        await pilot.press("g")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, DiagnoseScreen) and app.screen.verdict
                                  and app.screen, timeout=60, what="the verdict")
        assert screen.verdict["target"].endswith(target.name)
        assert screen.verdict["golden"].endswith(golden.name)
        configs = list((tmp_path / "probe_dump" / "diagnose").glob("diagnose-*.json"))
        assert len(configs) == 1
