"""probe-tui diagnose end to end on the tiny demo: the injected low-precision softmax named with its evidence
(two stages), a whole model in bf16 autocast against fp32 with no single culprit, statistics only, two existing
dumps, bad input."""

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

from probe_tui.cli import main  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

DEMO = {"preset": "tiny", "steps": 1}


def _config(path: Path, **demo) -> str:
    path.write_text(json.dumps({"task": "statistics", "dump_path": str(path.parent / "unused"),
                                "target": {"demo": dict(DEMO, **demo)}, "level": "mix"}))
    return str(path)


def _verdict(out: Path) -> dict:
    return json.loads((out / "verdict.json").read_text())


@pytest.fixture(scope="module")
def lowp(tmp_path_factory, one_torch_thread_for_module):
    """One two-stage diagnose of the lowp_softmax demo against the healthy fp32 demo, from two config files."""
    root = tmp_path_factory.mktemp("diag")
    target = _config(root / "lowp.json", faults={"lowp_softmax": {"layer": 1}})
    golden = _config(root / "fp32.json")
    out = root / "out"
    code = main(["diagnose", target, golden, "-o", str(out), "--fail-on-findings"])
    return root, out, code


@pytest.mark.slow
def test_two_stages_name_the_low_precision_softmax_with_its_evidence(lowp, capsys):
    root, out, code = lowp
    assert code == 3  # a culprit found, --fail-on-findings
    v = _verdict(out)
    assert v["verdict"] == "culprit"
    ev = v["culprit"]
    assert "naive_softmax" in ev["op"]
    assert v["decided_by"] == "stage 2 (tensors)" and v["stage2_outcome"] in ("confirmed", "decided")
    assert v["stage2"]["ran"] and any("naive_softmax" in r for r in v["stage2"]["records"])
    # inputs match the golden, the output does not, the error it adds; where, which step and rank
    assert ev["inputs"] and ev["inputs_match"] and all(i["err"] == 0 for i in ev["inputs"])
    assert ev["output_differs"] and ev["out_err"] > 1e-4 and ev["error_added"] == pytest.approx(ev["out_err"])
    assert ev["module"] == "blocks.1.attn" and (ev["step"], ev["rank"]) == (0, 0)
    assert ev["where"].startswith("demo_model.py:") and any("lowp_softmax" in s for s in ev["stack"])
    # stage 2 wrote a small fraction of a full tensor dump
    disk = v["disk"]
    assert 0 < disk["stage2_disk_bytes"] and disk["fraction_of_full_dump"] <= 0.05
    assert (out / "stage1" / "compare" / "compare.h5").is_file()
    assert (out / "stage2" / "compare" / "compare.h5").is_file()


@pytest.mark.slow
def test_statistics_only_from_two_existing_runs(lowp, tmp_path, capsys):
    root, out, _ = lowp
    runs = [str(next((out / "stage1" / side).glob("2*"))) for side in ("target", "golden")]
    code = main(["diagnose", runs[0], runs[1], "-o", str(tmp_path / "s"), "--stats-only"])
    assert code == 0
    v = _verdict(tmp_path / "s")
    assert v["decided_by"] == "stage 1 (statistics)" and not v["stage2"]["ran"]
    assert "stats_only" in v["stage2"]["why_not"]
    assert "naive_softmax" in v["culprit"]["op"]
    shown = capsys.readouterr().out
    assert "Culprit: Demo.naive_softmax.0.forward" in shown and "Decided by stage 1 (statistics)" in shown


@pytest.mark.slow
def test_two_dumps_say_why_stage_2_could_not_run(lowp, tmp_path):
    root, out, _ = lowp
    # rank folders: dumps with no run.json, so no target to re-run
    dumps = [str(next((out / "stage1" / side).glob("2*")) / "rank0") for side in ("target", "golden")]
    assert main(["diagnose", dumps[0], dumps[1], "-o", str(tmp_path / "d")]) == 0
    v = _verdict(tmp_path / "d")
    assert not v["stage2"]["ran"] and "no target to re-run" in v["stage2"]["why_not"]
    assert "is a dump" in v["stage2"]["why_not"]
    assert v["decided_by"] == "stage 1 (statistics)" and "naive_softmax" in v["culprit"]["op"]


@pytest.mark.slow
def test_whole_model_in_bf16_has_no_single_culprit(tmp_path):
    out = tmp_path / "out"
    config = {"task": "diagnose", "dump_path": str(tmp_path), "diagnose": {
        "target": {"target": {"demo": dict(DEMO, dtype="bf16")}}, "golden": {"target": {"demo": DEMO}},
        "output_path": str(out)}}
    path = tmp_path / "diagnose.json"
    path.write_text(json.dumps(config))
    assert main(["--run", str(path), "--fail-on-findings"]) == 0
    v = _verdict(out)
    assert v["verdict"] == "no single culprit" and v["culprit"] is None
    assert v["stage2"]["ran"] and v["stage2_outcome"] == "inconclusive"
    shares = v["module_shares"]
    assert {s["module"] for s in shares} >= {"blocks.0", "blocks.1"}
    assert sum(s["share"] for s in shares) == pytest.approx(1.0)
    assert max(s["share"] for s in shares) < 0.8  # spread over the model, not one place


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["diagnose", str(tmp_path / "missing"), str(tmp_path), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "probe-tui: error: diagnose: diagnose.target.path: {}: no such file or folder".format(
        tmp_path / "missing")
    assert not out.exists()
    assert main(["diagnose", "demo", "demo", "--suspects", "x"]) == 2
    assert "diagnose --suspects" in capsys.readouterr().err


@pytest.mark.slow
def test_a_target_that_fails_exits_1_with_one_line(tmp_path, capsys):
    script = tmp_path / "broken.py"
    script.write_text("raise RuntimeError('boom in the training script')\n")
    assert main(["diagnose", str(script), "demo", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "stage 1 target: the run failed (exit code 1: RuntimeError: boom in the training script)" in err
    assert not (tmp_path / "out" / "verdict.json").exists()
