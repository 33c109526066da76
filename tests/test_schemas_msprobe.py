"""msprobe's own config files load as they are: config.json, the separate monitor JSON, the classic compare.json.

Keys msprobe knows and we do not implement load with exactly one warning each (docs/decisions/0005-foreign-keys.md).
"""

import json
from pathlib import Path

import pytest

import schemas
from schemas.foreign import FOREIGN_KEYS, FOREIGN_SECTIONS

DATA = Path(__file__).resolve().parent / "data" / "configs" / "msprobe"

# file -> (task, the paths that warn, in order)
EXPECTED = {
    "seed_free_benchmark_mindspore.json": ("free_benchmark", []),
    "seed_grad_probe.json": ("grad_probe", []),
    "reference_wheel_default.json": ("statistics", ["extra_info"]),  # acc_check: a probe-tui task's section
    "repo_default_config.json": ("statistics", ["enable_dataloader", "run_ut"]),
    "monitor_weight_grad.json": ("monitor", []),
    "monitor_activation.json": ("monitor", []),
    "monitor_optimizer.json": ("monitor", []),
    "monitor_param.json": ("monitor", []),
    "monitor_stack_info.json": ("monitor", []),
    "monitor_print_struct.json": ("monitor", []),
    "monitor_targets.json": ("monitor", []),
    "monitor_full.json": ("monitor", ["monitor.cc_distribution"]),
    "monitor_l2_features.json": ("monitor", ["monitor.l2_targets", "monitor.recording_l2_features",
                                             "monitor.sa_order", "monitor"]),
    "ms_static_l2_statistics.json": ("statistics", ["level"]),
    "ms_static_l2_tensor.json": ("tensor", ["tensor.file_format", "level"]),
    "ms_static_l2_overflow_check.json": ("overflow_check", ["overflow_check.check_mode", "level"]),
    "compare_classic.json": ("compare", ["compare.stack_path", "compare.is_print_compare_log"]),
    "compare_multi_card.json": ("compare", ["compare.is_print_compare_log"]),
}


def _load(source):
    warnings = []
    job = schemas.load_config(source, on_warning=lambda path, msg: warnings.append((path, msg)))
    return job, warnings


def test_every_example_file_is_listed():
    assert sorted(p.name for p in DATA.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_msprobe_example_loads_with_expected_warnings(name):
    task, warn_paths = EXPECTED[name]
    job, warnings = _load(DATA / name)
    assert job.task == task
    assert [path for path, _ in warnings] == warn_paths
    for _, message in warnings:
        assert message
    again, _ = _load(schemas.dump_config(job))
    assert again == job


def test_repo_default_config_values():
    job, _ = _load(DATA / "repo_default_config.json")
    assert job.dump_path == "./dump_path" and job.level == "L1" and job.rank == [] and job.step == []
    assert job.statistics.summary_mode == "statistics"


def test_monitor_file_becomes_the_monitor_section():
    job, _ = _load(DATA / "monitor_weight_grad.json")
    assert isinstance(job, schemas.MonitorJob)
    section = job.monitor
    assert section.wg_distribution is True and section.ndigits == 16
    assert section.ops == ["min", "max", "mean", "norm", "shape", "dtype"]
    assert section.format == ["hdf5", "csv"]


def test_monitor_full_example_keeps_selectors_and_rules():
    job, _ = _load(DATA / "monitor_full.json")
    target = job.monitor.targets["language_model.encoder.layers.0"]
    assert (target.input, target.output, target.input_grad, target.output_grad) == \
        ("tuple[2]:0", "tensor", "tuple[2]:0", "tuple[1]:0")
    assert job.monitor.module_ranks == [1, 2, 3, 4]
    assert job.monitor.mg_direction is True
    rule = job.monitor.alert.rules[0]
    assert rule.rule_name == "AnomalyTurbulence" and rule.args.threshold == 0.5 and rule.args.direction == "up"
    assert job.monitor.eps == 1e-8


def test_monitor_file_keeps_our_top_level_keys():
    job, _ = _load({"wg_distribution": True, "dump_path": "./mon", "target": "demo", "framework": "pytorch"})
    assert job.dump_path == "./mon" and job.target.demo is not None and job.framework == "pytorch"


def test_classic_compare_json_maps_paths():
    job, warnings = _load(DATA / "compare_classic.json")
    assert job.compare.target_path == "./npu_dump/dump.json"
    assert job.compare.golden_path == "./bench_dump/dump.json"
    assert "stack" in warnings[0][1]


def test_no_task_defaults_to_statistics_with_a_warning():
    job, warnings = _load({"dump_path": "./x", "level": "L0"})
    assert job.task == "statistics" and job.level == "L0"
    assert warnings == [("task", "no task given: msprobe's default, statistics, is used")]


def test_foreign_keys_warn_once_each_and_are_dropped():
    config = {
        "task": "tensor", "extra_info": False, "risk_level": "ALL", "dump_enable": True,
        "custom_op_namespaces": ["_C_ascend"], "load": {"path": "x"}, "enable_dataloader": False,
        "tensor": {"list": ["relu"], "slice": [{"dim": 0, "begin": 0, "end": 2}], "request_id": "r1",
                   "file_format": "npy", "bench_path": "./bench", "online_run_ut": False},
        "structure": {}, "nan_check": {}, "diff_check": {}, "exception_dump": {}, "run_ut": {"white_list": []},
    }
    job, warnings = _load(config)
    paths = [p for p, _ in warnings]
    assert sorted(paths) == sorted(set(paths)), "one warning per key"
    assert set(paths) == {"extra_info", "risk_level", "dump_enable", "custom_op_namespaces", "load",
                          "enable_dataloader", "tensor.slice", "tensor.request_id", "tensor.file_format",
                          "tensor.bench_path", "tensor.online_run_ut", "structure", "nan_check", "diff_check",
                          "exception_dump", "run_ut"}
    assert job.tensor.list == ["relu"]
    assert "slice" not in schemas.dump_config(job)["tensor"]


def test_statistics_mindspore_static_keys_warn():
    job, warnings = _load({"task": "statistics", "statistics": {"device": "host", "precision": "high",
                                                                "summary_mode": ["max", "min", "md5"]}})
    assert {p for p, _ in warnings} == {"statistics.device", "statistics.precision"}
    assert job.statistics.summary_mode == "md5"
    assert any("top-level 'precision'" in m for _, m in warnings)


def test_level_on_grad_probe_and_monitor_warns():
    _, warnings = _load({"task": "grad_probe", "level": "L1", "async_dump": False})
    assert [p for p, _ in warnings] == ["level", "async_dump"]
    _, warnings = _load({"task": "monitor", "level": "L1", "monitor": {"xy_distribution": True}})
    assert [p for p, _ in warnings] == ["level"]


def test_other_task_sections_are_silent_but_must_be_objects():
    _, warnings = _load({"task": "statistics", "tensor": {"anything": 1}, "overflow_check": {},
                         "free_benchmark": {}, "grad_probe": {}, "monitor": {}, "compare": {}})
    assert warnings == []
    with pytest.raises(schemas.ConfigError) as err:
        _load({"task": "statistics", "grad_probe": "L1", "run_ut": []})
    assert {i.path for i in err.value.errors} == {"grad_probe", "run_ut"}


def test_foreign_value_checks_still_reject_broken_values():
    with pytest.raises(schemas.ConfigError) as err:
        _load({"task": "statistics", "extra_info": "yes"})
    assert err.value.errors[0].path == "extra_info"


def test_msprobe_only_tasks_are_explained():
    for task in ("multi_run_ut", "structure", "nan_check", "diff_check"):
        with pytest.raises(schemas.ConfigError) as err:
            _load({"task": task})
        issue = err.value.errors[0]
        assert issue.path == "task" and issue.hint


def test_monitor_format_api_warns():
    job, warnings = _load({"targets": {}, "wg_distribution": True, "format": "api"})
    assert job.monitor.format == ["hdf5"]
    assert warnings[0][0] == "monitor.format"


def test_foreign_registry_is_the_single_list():
    assert {"extra_info", "risk_level", "enable_dataloader", "dump_enable", "custom_op_namespaces", "load",
            "is_regex_valid"} <= set(FOREIGN_KEYS["job"])
    assert {"slice", "request_id", "file_format", "device"} <= set(FOREIGN_KEYS["dump_section"])
    assert {"cc_distribution", "l2_targets", "recording_l2_features", "sa_order", "append_output",
            "dynamic_on"} <= set(FOREIGN_KEYS["monitor"])
    assert {"run_ut", "structure", "nan_check", "diff_check", "exception_dump"} <= set(FOREIGN_SECTIONS)
    assert "acc_check" not in FOREIGN_SECTIONS  # a probe-tui task now (its run_ut options: FOREIGN_KEYS["acc_check"])
    assert "check_mode" in FOREIGN_KEYS["overflow_check"]
    # No foreign key shadows a real field of a model that allows that scope.
    for model in [*schemas.TASKS.values(), schemas.StatisticsSection, schemas.TensorSection,
                  schemas.MonitorSection, schemas.CompareSection, schemas.OverflowCheckSection,
                  schemas.AccCheckSection]:
        for scope in model.foreign_scope:
            clash = set(FOREIGN_KEYS[scope]) & set(model.model_fields)
            assert not clash, (model.__name__, clash)


def test_duplicate_json_keys_warn(tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"task": "statistics", "level": "L0", "level": "L1"}')
    job, warnings = _load(path)
    assert job.level == "L1"
    assert warnings and warnings[0][0] == "level" and "more than once" in warnings[0][1]


def test_default_warnings_go_to_warnings_module():
    with pytest.warns(schemas.ConfigWarning, match="extra_info"):
        schemas.load_config({"task": "statistics", "extra_info": True})


def test_example_files_are_untouched_msprobe_json():
    # They are msprobe's files as shipped: none carries a key of ours.
    ours = {"target", "framework", "output", "comment"}
    for path in DATA.glob("*.json"):
        assert not ours & set(json.loads(path.read_text())), path.name


def test_run_ut_config_loads_as_an_acc_check_job():
    job, warnings = _load({"task": "run_ut", "dump_path": "./out",
                           "run_ut": {"white_list": ["softmax"], "black_list": ["add"], "error_data_path": "./e",
                                      "path": "./dump"}})
    assert job.task == "acc_check"
    assert (job.acc_check.api_list, job.acc_check.black_list, job.acc_check.path) == (["softmax"], ["add"], "./dump")
    assert [w[0] for w in warnings] == ["acc_check.error_data_path"]
    with pytest.raises(schemas.ConfigError) as err:
        _load({"task": "acc_check", "acc_check": {"white_list": []}})
    assert {i.path for i in err.value.errors} == {"acc_check.path"}
