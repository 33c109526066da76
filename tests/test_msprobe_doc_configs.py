"""Every config file from msprobe's docs (1.0.x to 26.x) loads: keys are used, mapped or ignored with one warning,
never an error (docs/decisions/0005-foreign-keys.md). Level L2 loads with a warning and a run refuses it in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import schemas

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "msprobe_configs"
L2 = "level"

# file -> (task, the paths that warn, in document order of the checks)
EXPECTED = {
    "v1_pt_statistics.json": ("statistics", ["is_deterministic", "enable_dataloader"]),
    "v1_pt_tensor.json": ("tensor", ["is_deterministic", "enable_dataloader", "tensor.file_format"]),
    "v1_pt_tensor_l2.json": ("tensor", ["is_deterministic", "enable_dataloader", "acl_config",
                                        "tensor.backward_input", "tensor.file_format", L2]),
    "v1_pt_overflow_check.json": ("overflow_check", ["is_deterministic", "enable_dataloader"]),
    "v1_pt_free_benchmark.json": ("free_benchmark", ["is_deterministic", "enable_dataloader"]),
    "v1_pt_default_all_sections.json": ("statistics", ["is_deterministic", "enable_dataloader", "acl_config",
                                                       "run_ut"]),
    "v1_ms_statistics.json": ("statistics", []),
    "v1_ms_statistics_l2.json": ("statistics", [L2]),
    "v1_ms_tensor_l2.json": ("tensor", ["tensor.file_format", L2]),
    "v1_ms_overflow_check_l2.json": ("overflow_check", ["overflow_check.check_mode", L2]),
    "v8_ms_statistics_l2_device.json": ("statistics", ["statistics.device", "statistics.precision", L2]),
    "v8_pt_tensor_l2.json": ("tensor", [L2]),
    "v8_pt_tensor_online_run_ut.json": ("tensor", ["is_deterministic", "tensor.file_format", "tensor.online_run_ut",
                                                   "tensor.online_run_ut_recompute", "tensor.nfs_path", "tensor.host",
                                                   "tensor.port", "tensor.tls_path"]),
    "v8_pt_statistics_tensor_list.json": ("statistics", []),
    "v8_grad_probe.json": ("grad_probe", []),
    "v26_pt_statistics.json": ("statistics", ["extra_info", "risk_level", "dump_enable", "custom_op_namespaces",
                                              "statistics.slice"]),
    "v1_monitor.json": ("monitor", ["monitor.cc_distribution", "monitor.alert.inform"]),
    "v8_monitor_format.json": ("monitor", ["monitor.dynamic_on", "monitor.append_output"]),
    "v8_monitor_api_format.json": ("monitor", ["monitor.format"]),
}


def _load(source):
    warnings = []
    job = schemas.load_config(source, on_warning=lambda path, msg: warnings.append((path, msg)))
    return job, warnings


def test_every_fixture_is_listed():
    assert sorted(p.name for p in FIXTURES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_msprobe_doc_config_loads(name):
    task, warn_paths = EXPECTED[name]
    job, warnings = _load(FIXTURES / name)
    assert job.task == task
    assert sorted(path for path, _ in warnings) == sorted(warn_paths)
    assert all(message for _, message in warnings)
    again, _ = _load(schemas.dump_config(job))
    assert again == job


def test_l2_warning_names_what_to_use_instead():
    _, warnings = _load(FIXTURES / "v8_pt_tensor_l2.json")
    message = dict(warnings)[L2]
    assert "L1" in message and "mix" in message and "(MindSpore graph-mode kernels) runs for statistics, tensor and overflow_check" in message


def test_typos_next_to_msprobe_keys_are_still_errors():
    config = json.loads((FIXTURES / "v1_pt_tensor_l2.json").read_text())
    config["is_determinstic"] = False
    config["tensor"]["backward_inputs"] = []
    with pytest.raises(schemas.ConfigError) as err:
        _load(config)
    paths = [issue.path for issue in err.value.errors]
    assert sorted(paths) == ["is_determinstic", "tensor.backward_inputs"]
    assert "did you mean 'is_deterministic'" in str(err.value)


@pytest.mark.parametrize("framework,task,words", [
    ("pytorch", "tensor", "use level L1"),
])
def test_l2_run_stops_with_one_line_and_exit_2(tmp_path, framework, task, words):
    config = json.loads((FIXTURES / "v8_pt_tensor_l2.json").read_text())
    config.update({"dump_path": str(tmp_path / "dump"), "framework": framework, "task": task,
                   "target": {"demo": {"preset": "tiny", "steps": 1}}})
    path = tmp_path / "l2.json"
    path.write_text(json.dumps(config))
    done = subprocess.run([sys.executable, "-m", "probe_tui", "run", str(path)], capture_output=True, text=True,
                          timeout=120)
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert done.returncode == 2, done.stderr
    assert len(errors) == 1 and "level: L2" in errors[0] and words in errors[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "dump").exists()


def test_l2_in_script_says_the_same_in_one_line(tmp_path):
    from probe_tui.debugger import PrecisionDebugger

    config = json.loads((FIXTURES / "v8_pt_tensor_l2.json").read_text())
    config["dump_path"] = str(tmp_path / "dump")
    path = tmp_path / "l2.json"
    path.write_text(json.dumps(config))
    with pytest.warns(Warning), pytest.raises(ValueError) as err:
        PrecisionDebugger(config_path=str(path))
    text = str(err.value)
    assert "\n" not in text and text.startswith("level: L2") and "not offered" in text and "use level L1" in text
    assert not (tmp_path / "dump").exists()


def test_l2_in_script_on_mindspore_says_where_it_runs(tmp_path):
    # MindSpore's L2 tasks (statistics, tensor, overflow_check) run under `probe-tui run` only: the kernel dump is
    # set up before the script compiles its first graph (tests/test_mindspore_graph_overflow.py runs one)
    from probe_tui.debugger import PrecisionDebugger

    path = tmp_path / "l2.json"
    path.write_text(json.dumps({"task": "overflow_check", "level": "L2", "framework": "mindspore",
                                "dump_path": str(tmp_path / "dump")}))
    with pytest.warns(Warning), pytest.raises(ValueError) as err:
        PrecisionDebugger(config_path=str(path))
    text = str(err.value)
    assert "\n" not in text and text.startswith("level: L2") and "under `probe-tui run` only" in text
    assert not (tmp_path / "dump").exists()
