"""The probe-tui command line: help, validate, schema, init, and the headless run of a job on the demo."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_schemas_bad_cases import C1_BAD, C3_BAD, C4_BAD, C8_BAD, F1_BAD, G1_BAD, M1_BAD

import schemas
from probe_tui.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "sample_configs").glob("*.json"))


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("command", [[], ["validate"], ["schema"], ["init"], ["compare"], ["open"]])
def test_help_everywhere(command, capsys):
    with pytest.raises(SystemExit) as info:
        main(command + ["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: probe-tui")
    if not command:
        for word in ("--run", "validate", "schema", "init", "compare", "exit codes"):
            assert word in out


@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_validate_accepts_every_sample(sample, capsys):
    code, out, err = run_cli(["validate", sample], capsys)
    assert code == 0, err
    normalised = json.loads(out)
    assert schemas.load_config(normalised) == schemas.load_config(sample)
    assert "valid" in err


def _bad_cases():
    for key, value, path, _ in C1_BAD:
        yield f"C1:{key}={value!r}", {"task": "statistics", key: value}, path
    for value, path, _ in C3_BAD:
        yield f"C3:{value!r}", {"task": "statistics", "statistics": {"data_mode": value}}, path
    for level, scope, path, _ in C4_BAD:
        yield f"C4:{level}:{scope!r}", {"task": "statistics", "level": level, "statistics": {"scope": scope}}, path
    for table, name in ((C8_BAD, "C8"), (F1_BAD, "F1"), (G1_BAD, "G1"), (M1_BAD, "M1")):
        for config, path, fragment in table:
            yield f"{name}:{path}:{fragment}", config, path


BAD = list(_bad_cases())


@pytest.mark.parametrize("config,path", [(c, p) for _, c, p in BAD], ids=[i for i, _, _ in BAD])
def test_validate_rejects_reference_bad_cases(config, path, tmp_path, capsys):
    file = tmp_path / "bad.json"
    file.write_text(json.dumps(config))
    code, out, err = run_cli(["validate", file], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert any(line.startswith(f"probe-tui: error: {file}: {path}: ") for line in lines), err


def test_validate_json_reports_every_error(tmp_path, capsys):
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"task": "statistics", "levle": "L1", "rank": ["6-4"]}))
    code, out, _ = run_cli(["validate", "--json", file], capsys)
    assert code == 2
    payload = json.loads(out)
    assert payload["ok"] is False
    assert {e["path"] for e in payload["errors"]} == {"levle", "rank[0]"}


def test_validate_missing_and_broken_files(tmp_path, capsys):
    code, _, err = run_cli(["validate", tmp_path / "nope.json"], capsys)
    assert code == 2 and err.count("nope.json") == 1
    broken = tmp_path / "broken.json"
    broken.write_text('{"task": "statistics",\n "rank": [1,,]}')
    code, _, err = run_cli(["validate", broken], capsys)
    assert code == 2 and "line 2" in err and len(err.strip().splitlines()) == 1


def test_schema_lists_tasks_and_prints_one(capsys):
    code, out, _ = run_cli(["schema"], capsys)
    assert code == 0
    assert [line.split()[0] for line in out.strip().splitlines()] == list(schemas.TASKS)
    code, out, _ = run_cli(["schema", "statistics"], capsys)
    assert code == 0 and json.loads(out) == schemas.json_schema("statistics")
    code, _, err = run_cli(["schema", "statistcs"], capsys)
    assert code == 2 and "statistcs" in err


@pytest.mark.parametrize("task", list(schemas.TASKS))
def test_init_writes_a_valid_starter(task, tmp_path, capsys):
    out_file = tmp_path / f"{task}.json"
    code, _, err = run_cli(["init", task, "-o", out_file], capsys)
    assert code == 0, err
    assert schemas.load_config(out_file).task == task
    code, _, err = run_cli(["init", task, "-o", out_file], capsys)
    assert code == 2 and "exists" in err
    assert run_cli(["init", task, "-o", out_file, "--force"], capsys)[0] == 0


def test_run_bad_config_exits_2_and_writes_nothing(tmp_path, capsys):
    file = tmp_path / "bad.json"
    file.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"), "target": "demo",
                                "statistics": {"data_mode": ["all", "forward"]}}))
    code, _, err = run_cli(["--run", file], capsys)
    assert code == 2 and "statistics.data_mode" in err
    assert not (tmp_path / "d").exists()


def test_run_without_target_is_bad_input(tmp_path, capsys):
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d")}))
    code, _, err = run_cli(["--run", file], capsys)
    assert code == 2 and "target" in err
    assert not (tmp_path / "d").exists()


def test_headless_run_of_a_failing_script_exits_1(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise RuntimeError('boom in training')\n")
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "d"),
                                  "target": {"script": str(script)}}))
    proc = subprocess.run([sys.executable, "-m", "probe_tui", "--run", str(config), "--events", "-"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert events[0]["event"] == "run_started"
    assert events[-1]["event"] == "run_finished" and events[-1]["exit_code"] == 1
    assert "boom in training" in proc.stderr
    run = json.loads((Path(events[-1]["run_dir"]) / "run.json").read_text())
    assert run["status"] == "failed"


def test_app_refuses_without_a_terminal():
    proc = subprocess.run([sys.executable, "-m", "probe_tui"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "needs a terminal" in proc.stderr


def test_a_fault_of_the_tool_marks_the_run_failed_and_is_not_hidden(tmp_path, monkeypatch):
    from engines import registry
    from engines.runner import run_job

    def broken_engine(job, run, events):
        raise RuntimeError("bug in an engine")

    monkeypatch.setattr(registry, "collection_engine", lambda task: broken_engine)
    job = schemas.load_config({"task": "statistics", "dump_path": str(tmp_path / "d"), "target": "demo"})
    with pytest.raises(RuntimeError, match="bug in an engine"):
        run_job(job)
    run = json.loads(next((tmp_path / "d").glob("*/run.json")).read_text())
    assert run["status"] == "failed" and "bug in an engine" in run["summary"]["error"]
