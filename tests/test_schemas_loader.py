"""load_config's sources and error reporting: files, JSON strings, dicts; one line per issue, naming the file."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import schemas
from schemas.errors import ConfigIssue

ROOT = Path(__file__).resolve().parent.parent


def test_sources_path_str_json_string_and_dict(tmp_path):
    config = {"task": "tensor", "tensor": {"list": ["relu"]}, "target": "demo"}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    from_path = schemas.load_config(path)
    assert schemas.load_config(str(path)) == from_path
    assert schemas.load_config(json.dumps(config)) == from_path
    assert schemas.load_config(config) == from_path
    assert config["target"] == "demo", "the caller's dict is not modified"


def test_missing_file_names_the_file(tmp_path):
    missing = tmp_path / "nope.json"
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(missing)
    assert err.value.errors == [ConfigIssue(str(missing), "no such file")]
    assert str(err.value) == f"{missing}: no such file"


def test_directory_is_not_a_config(tmp_path):
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(tmp_path)
    assert err.value.errors[0].path == str(tmp_path)


def test_unreadable_bytes(tmp_path):
    path = tmp_path / "bin.json"
    path.write_bytes(b"\xff\xfe\x00{")
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path)
    assert err.value.errors[0].path == str(path)


def test_invalid_json_gives_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "task": "statistics",\n  "level": "L1"\n  "step": []\n}\n')
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path)
    (issue,) = err.value.errors
    assert issue.path == str(path)
    assert "line 4, column 3" in issue.message


def test_invalid_json_string():
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config('{"task": "statistics",}')
    assert err.value.errors[0].path == "<config string>"
    assert "line 1" in err.value.errors[0].message


def test_top_level_must_be_an_object(tmp_path):
    path = tmp_path / "list.json"
    path.write_text("[1, 2]")
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path)
    assert "JSON object" in err.value.errors[0].message


def test_wrong_source_type():
    with pytest.raises(schemas.ConfigError):
        schemas.load_config(42)


def test_issue_is_a_record_that_unpacks():
    issue = ConfigIssue("rank[2]", "bad", "hint")
    path, message, hint = issue
    assert (path, message, hint) == ("rank[2]", "bad", "hint")
    assert issue.__dict__ == issue.as_dict() == {"path": "rank[2]", "message": "bad", "hint": "hint"}
    assert json.loads(json.dumps(issue.__dict__))["path"] == "rank[2]"


def test_config_error_pickles():
    import pickle

    err = schemas.ConfigError([ConfigIssue("a", "x", "h")])
    again = pickle.loads(pickle.dumps(err))
    assert again.errors == err.errors and str(again) == "a: x (h)"


def test_issue_formatting():
    assert str(ConfigIssue("a.b[1]", "bad", "try x")) == "a.b[1]: bad (try x)"
    assert str(ConfigIssue("a", "bad")) == "a: bad"
    err = schemas.ConfigError([ConfigIssue("a", "x"), ConfigIssue("b", "y", "z")])
    assert str(err) == "a: x\nb: y (z)"
    assert isinstance(err, Exception)


def test_every_message_names_its_path_and_is_one_line():
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "statistics", "level": "L9", "async_dump": 1, "precision": "max",
                             "framework": "jax", "seed": -1, "dump_path": "",
                             "statistics": {"summary_mode": "sha256", "list": [""]}})
    paths = [i.path for i in err.value.errors]
    assert paths == ["level", "async_dump", "precision", "framework", "seed", "dump_path",
                     "statistics.list", "statistics.summary_mode"]  # in the order of the file
    for line in str(err.value).splitlines():
        assert line.split(":")[0] in paths


def test_schemas_imports_no_framework_or_app():
    code = ("import sys, schemas; schemas.load_config({'task': 'statistics'}); "
            "bad = [m for m in ('torch', 'mindspore', 'torch_npu', 'textual', 'h5py', 'numpy', 'engines', "
            "'probe_tui') if m in sys.modules]; print(bad); assert not bad")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_export_command_writes_schemas(tmp_path):
    result = subprocess.run([sys.executable, "-m", "schemas.export", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "RuntimeWarning" not in result.stderr
    names = sorted(p.name for p in tmp_path.glob("*.schema.json"))
    assert names == sorted([f"{t}.schema.json" for t in schemas.TASKS] + ["job.schema.json"])


def test_loading_one_task_builds_only_its_models():
    """Issue 21: a debugged training process validates one task's config; the other tasks' validators (every job
    model, and the union's TypeAdapter) are not built (resident memory), yet still build on first use."""
    code = (
        "import schemas\n"
        "from schemas.monitor import MonitorJob\n"
        "from schemas.analysis import CompareJob\n"
        "from schemas.dump_jobs import StatisticsJob\n"
        "job = schemas.load_config({'task': 'statistics', 'dump_path': '/tmp/x', 'level': 'L1'},"
        " on_warning=lambda *a: None)\n"
        "schemas.dump_config(job)\n"
        "print(StatisticsJob.__pydantic_complete__, MonitorJob.__pydantic_complete__,"
        " CompareJob.__pydantic_complete__)\n"
        "from schemas.jobs import JOB_ADAPTER\n"
        "print(JOB_ADAPTER.validate_python({'task': 'monitor'}).task, MonitorJob.model_validate({}).task)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT),
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["True False False", "monitor monitor"]
