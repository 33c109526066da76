"""Headless jobs through the real command line: two demo runs, compare them, parse the dumps."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "probe_tui", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


def _config(path, task, dump_path, demo, **extra):
    path.write_text(json.dumps({"task": task, "dump_path": dump_path, "target": {"demo": demo}, **extra}))
    return path


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("jobs")
    demo = {"preset": "tiny", "steps": 2}
    healthy = _config(root / "healthy.json", "tensor", "./runs/healthy", demo,
                      tensor={"list": ["softmax", "linear"]})
    faulty = _config(root / "faulty.json", "tensor", "./runs/faulty",
                     {**demo, "faults": {"lowp_softmax": {"layer": 1}}}, tensor={"list": ["softmax", "linear"]})
    for config in (healthy, faulty):
        proc = cli("--run", config, cwd=root)
        assert proc.returncode == 0, proc.stderr
        assert "finished" in proc.stderr
    for name in ("healthy", "faulty"):
        run = json.loads((root / "runs" / name / "latest" / "run.json").read_text())
        assert run["status"] == "finished" and run["steps"] == 2 and run["ranks"] == [0]
    return root


def test_compare_command_finds_the_fault(two_runs):
    proc = cli("compare", "runs/faulty/latest", "runs/healthy/latest", "--json", "-o", "cmp", cwd=two_runs)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    summary = payload["summary"]
    assert summary["errors"] > 0
    assert Path(two_runs, payload["run_dir"]).is_dir()
    assert "Top suspects" in proc.stderr
    proc = cli("compare", "runs/faulty/latest", "runs/healthy/latest", "--fail-on-findings", "-o", "cmp2",
               cwd=two_runs)
    assert proc.returncode == 3


def test_compare_bad_path_is_bad_input(two_runs):
    proc = cli("compare", "runs/nope", "runs/healthy/latest", cwd=two_runs)
    assert proc.returncode == 2
    assert "runs/nope" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_parse_lists_filters_and_reads_tensors(two_runs):
    proc = cli("parse", "runs/healthy/latest", "--name", "softmax", "--json", cwd=two_runs)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    names = [row["name"] for row in summary["listed"]]
    assert names and all("softmax" in name for name in names)
    row = next(r["name"] for r in summary["listed"] if r["has_data"] and r["name"].endswith("output.0"))
    proc = cli("parse", "runs/healthy/latest", "--row", row, "--step", 0, "--slice", "0, 0, 0", "--json",
               cwd=two_runs)
    assert proc.returncode == 0, proc.stderr
    values = json.loads(proc.stdout)["values"]
    assert abs(sum(values) - 1.0) < 1e-5  # one softmax row sums to one
    proc = cli("parse", "runs/healthy/latest", "--row", row, "--step", 0, "--hist", cwd=two_runs)
    assert proc.returncode == 0 and "nan 0" in proc.stdout


def test_parse_unknown_row_is_bad_input(two_runs):
    proc = cli("parse", "runs/healthy/latest", "--row", "Nope.0.forward.output.0", cwd=two_runs)
    assert proc.returncode == 2 and "Nope.0.forward.output.0" in proc.stderr


def test_overflow_check_then_analyze_overflow(tmp_path):
    config = tmp_path / "overflow.json"
    config.write_text(json.dumps({
        "task": "overflow_check", "dump_path": "./of", "level": "L1",
        "target": {"demo": {"preset": "tiny", "steps": 3, "dtype": "fp16",
                            "faults": {"fp16_overflow": {"layer": 1, "from_step": 1}}}},
        "overflow_check": {"overflow_nums": 1}}))
    proc = cli("--run", config, "--json", "--fail-on-findings", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    summary = json.loads(proc.stdout)["summary"]
    assert "Torch.exp.0.forward produced +inf from finite inputs" in summary["verdict"]
    assert "failed" not in proc.stderr  # no hook of ours broke on the way
    proc = cli("analyze-overflow", "of/latest", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)["summary"]
    assert summary["precision"] == 1 and "Torch.exp.0.forward" in summary["verdict"]
