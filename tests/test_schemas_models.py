"""Model rules beyond the docs/reference/msprobe-tasks.md §14 cases: levels per task, async/L2/debug rules, targets, demo knobs, output, analysis."""

import pytest

import schemas
from schemas import DEMO_PRESETS


def _load(config):
    warnings = []
    job = schemas.load_config(config, on_warning=lambda path, msg: warnings.append((path, msg)))
    return job, warnings


def _paths(config):
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(config, on_warning=lambda *a: None)
    return [issue.path for issue in err.value.errors], str(err.value)


# ------------------------------------------------------------------------------------------------- levels
@pytest.mark.parametrize("task,level,ok", [
    ("statistics", "L0", True), ("statistics", "mix", True), ("statistics", "debug", True),
    ("statistics", "L2", True),  # msprobe's MindSpore static-graph level: loads, the run decides (engines/task.py)
    ("tensor", "L2", True), ("tensor", "debug", True),
    ("overflow_check", "L0", True), ("overflow_check", "mix", True), ("overflow_check", "debug", False),
    ("overflow_check", "L2", True),
    ("free_benchmark", "L1", True), ("free_benchmark", "L0", False), ("free_benchmark", "debug", False),
])
def test_levels_per_task(task, level, ok):
    config = {"task": task, "level": level}
    if ok:
        assert _load(config)[0].level == level
    else:
        paths, text = _paths(config)
        assert paths == ["level"] and f"not available for task {task}" in text


def test_level_typo_suggests():
    paths, text = _paths({"task": "statistics", "level": "l0"})
    assert paths == ["level"] and "did you mean 'L0'" in text


def test_level_docs_name_the_supported_levels():
    assert "debug" not in schemas.json_schema("overflow_check")["properties"]["level"]["enum"]
    assert schemas.json_schema("tensor")["properties"]["level"]["enum"] == ["L0", "L1", "mix", "L2", "debug"]
    assert "L2" in schemas.json_schema("tensor")["properties"]["level"]["description"]


# ------------------------------------------------------------------------------------------------- async / L2 / debug
def test_async_tensor_needs_list_except_debug():
    paths, _ = _paths({"task": "tensor", "async_dump": True})
    assert paths == ["tensor.list"]
    assert _load({"task": "tensor", "async_dump": True, "tensor": {"list": ["relu"]}})[0].async_dump
    assert _load({"task": "tensor", "async_dump": True, "level": "debug"})[0].level == "debug"
    assert _load({"task": "statistics", "async_dump": True})[0].async_dump  # statistics needs no list


@pytest.mark.parametrize("mode", ["md5", "hash"])
def test_async_rejects_host_checksums(mode):
    paths, text = _paths({"task": "statistics", "async_dump": True, "statistics": {"summary_mode": mode}})
    assert paths == ["statistics.summary_mode"] and "async_dump" in text
    assert _load({"task": "statistics", "async_dump": True, "statistics": {"summary_mode": "xor"}})[0]


def test_l2_rules():
    # L2's list holds kernel names or op types (MindSpore static graph), any number of them; scope has no meaning
    assert _load({"task": "tensor", "level": "L2", "tensor": {"list": ["a", "b"]}})[0].level == "L2"
    paths, _ = _paths({"task": "tensor", "level": "L2", "tensor": {
        "list": ["Functional.linear.0.forward"],
        "scope": ["Functional.linear.0.forward", "Functional.relu.0.forward"]}})
    assert paths == ["tensor.scope"]


def test_debug_level_warns_about_ignored_filters():
    job, warnings = _load({"task": "statistics", "level": "debug",
                           "statistics": {"list": ["relu"], "tensor_list": ["fc"], "scope": ["a", "b"]}})
    assert job.level == "debug"
    assert [p for p, _ in warnings] == ["statistics.scope", "statistics.list", "statistics.tensor_list"]


def test_async_on_other_tasks_warns():
    for task in ("overflow_check", "free_benchmark"):
        _, warnings = _load({"task": task, "async_dump": True})
        assert [p for p, _ in warnings] == ["async_dump"]


def test_summary_modes_and_defaults():
    job, _ = _load({"task": "statistics"})
    assert (job.level, job.precision, job.async_dump, job.framework, job.dump_path) == \
        ("L1", "low", False, "auto", "./probe_dump")
    assert job.statistics.summary_mode == "statistics" and job.target is None
    for mode in ("statistics", "md5", "xor", "hash"):
        assert _load({"task": "tensor", "tensor": {"summary_mode": mode}})[0].tensor.summary_mode == mode
    desc = schemas.json_schema("statistics")["$defs"]["StatisticsSection"]["properties"]["summary_mode"]
    assert "CRC-32" in desc["description"] and "hash" in desc["description"]


def test_apis_filter():
    job, _ = _load({"task": "statistics", "statistics": {"apis": {"allow": ["view"], "deny": ["dropout"]}}})
    assert job.statistics.apis.allow == ["view"] and job.statistics.apis.deny == ["dropout"]
    paths, _ = _paths({"task": "statistics", "statistics": {"apis": {"allowed": []}}})
    assert paths == ["statistics.apis.allowed"]


def test_overflow_nums():
    assert _load({"task": "overflow_check"})[0].overflow_check.overflow_nums == 1
    assert _load({"task": "overflow_check", "overflow_check": {"overflow_nums": -1}})[0]
    for bad in (0, -2, "1", 1.0, True):
        paths, _ = _paths({"task": "overflow_check", "overflow_check": {"overflow_nums": bad}})
        assert paths == ["overflow_check.overflow_nums"], bad


def test_section_null_means_defaults():
    assert _load({"task": "statistics", "statistics": None})[0].statistics.data_mode == ["all"]


def test_comment_keys():
    assert _load({"task": "statistics", "_comment": "hi"})[0].comment == "hi"
    assert _load({"task": "statistics", "comment": "hi"})[0].comment == "hi"
    paths, _ = _paths({"task": "statistics", "comment": 3})
    assert paths == ["comment"]
    job, warnings = _load({"task": "statistics", "comment": "a", "_comment": "b"})
    assert job.comment == "a" and [p for p, _ in warnings] == ["_comment"]


# ------------------------------------------------------------------------------------------------- target
def test_target_forms():
    assert _load({"task": "statistics", "target": "demo"})[0].target.demo == schemas.DemoKnobs()
    job, _ = _load({"task": "statistics", "target": {"script": "train.py", "args": ["--lr", "1"],
                                                     "cwd": "/tmp", "env": {"A": "1"}}})
    assert job.target.kind == "script" and job.target.args == ["--lr", "1"]
    job, _ = _load({"task": "statistics", "target": {"callable": "pkg.mod:main", "kwargs": {"n": 1}}})
    assert job.target.kind == "callable"


@pytest.mark.parametrize("target,path", [
    ({}, "target"),
    ({"demo": {}, "script": "a.py"}, "target"),
    ({"demo": {}, "args": ["x"]}, "target.args"),
    ({"script": "a.py", "kwargs": {"a": 1}}, "target.kwargs"),
    ({"callable": "pkg.mod.main"}, "target.callable"),
    ({"callable": "pkg mod:main"}, "target.callable"),
    ({"script": ""}, "target.script"),
    ({"script": "a.py", "args": "--x"}, "target.args"),
    ({"script": "a.py", "env": {"A": 1}}, "target.env.A"),
    ("script", "target"),
    (["demo"], "target"),
])
def test_target_rejected(target, path):
    paths, _ = _paths({"task": "statistics", "target": target})
    assert path in paths


def test_demo_knobs():
    demo = schemas.DemoKnobs(preset="tiny", d_model=128)
    assert demo.sizes() == {**DEMO_PRESETS["tiny"], "d_model": 128}
    assert schemas.DemoKnobs().sizes() == DEMO_PRESETS["default"]
    assert DEMO_PRESETS["default"] == {"n_layer": 4, "d_model": 256, "n_head": 4, "d_mlp": 1024, "vocab": 1000,
                                       "seq": 64, "batch": 8}


@pytest.mark.parametrize("demo,path", [
    ({"steps": 0}, "target.demo.steps"),
    ({"steps": 2.0}, "target.demo.steps"),
    ({"preset": "huge"}, "target.demo.preset"),
    ({"dtype": "float16"}, "target.demo.dtype"),
    ({"lr": 0}, "target.demo.lr"),
    ({"d_model": 100, "n_head": 3}, "target.demo.d_model"),
    ({"n_head": 3}, "target.demo.n_head"),
    ({"faults": {"wrong_eps": {"layer": 4}}}, "target.demo.faults.wrong_eps.layer"),
    ({"n_layer": 1, "faults": {"lowp_softmax": {"layer": 1}}}, "target.demo.faults.lowp_softmax.layer"),
    ({"steps": 3, "faults": {"fp16_overflow": {"layer": 0, "from_step": 3}}},
     "target.demo.faults.fp16_overflow.from_step"),
    ({"steps": 3, "faults": {"grad_explosion": {"layer": 0, "step": 5}}}, "target.demo.faults.grad_explosion.step"),
    ({"faults": {"grad_explosion": {"layer": 0}}}, "target.demo.faults.grad_explosion.step"),
    ({"faults": {"grad_explosion": {"layer": 0, "step": 1, "scale": 0}}},
     "target.demo.faults.grad_explosion.scale"),
    ({"faults": {"wrong_eps": {"layer": -1}}}, "target.demo.faults.wrong_eps.layer"),
])
def test_demo_knobs_rejected(demo, path):
    paths, _ = _paths({"task": "statistics", "target": {"demo": demo}})
    assert path in paths


def test_demo_faults_accepted():
    job, _ = _load({"task": "statistics", "target": {"demo": {"preset": "tiny", "steps": 4, "faults": {
        "fp16_overflow": {"layer": 1, "from_step": 2}, "lowp_softmax": {"layer": 0},
        "wrong_eps": {"layer": 1}, "grad_explosion": {"step": 3, "layer": 0}}}}})
    faults = job.target.demo.faults
    assert faults.active() == ["fp16_overflow", "lowp_softmax", "wrong_eps", "grad_explosion"]
    assert faults.lowp_softmax.from_step == 0 and faults.grad_explosion.scale == 1e4


# ------------------------------------------------------------------------------------------------- output
@pytest.mark.parametrize("text,size", [
    ("20GB", 20 * 10 ** 9), ("512MiB", 512 * 2 ** 20), ("1.5 GB", 1_500_000_000), ("2TiB", 2 * 2 ** 40),
    ("100", 100), ("10kb", 10_000), (4096, 4096), (None, None),
])
def test_disk_budget_sizes(text, size):
    assert _load({"task": "tensor", "output": {"disk_budget": text}})[0].output.disk_budget == size


@pytest.mark.parametrize("bad", ["lots", "20 GBs", "-5GB", 0, -1, True, 1.5, "0MB"])
def test_disk_budget_rejected(bad):
    paths, _ = _paths({"task": "tensor", "output": {"disk_budget": bad}})
    assert paths == ["output.disk_budget"]


def test_output_compression():
    job, _ = _load({"task": "tensor", "output": {"compression": "gzip", "compression_level": 9,
                                                 "store_mode": "per_step"}})
    assert (job.output.compression, job.output.compression_level, job.output.store_mode) == ("gzip", 9, "per_step")
    for bad in ({"compression": "zstd"}, {"compression": "gzip", "compression_level": 10},
                {"compression": "lzf", "compression_level": 3}, {"store_mode": "nfs"}):
        paths, _ = _paths({"task": "tensor", "output": bad})
        assert len(paths) == 1 and paths[0].startswith("output."), bad


# ------------------------------------------------------------------------------------------------- analysis
def _compare(**section):
    return {"task": "compare", "compare": {"target_path": "a", "golden_path": "b", **section}}


def test_compare_defaults():
    section = _load(_compare())[0].compare
    assert (section.mode, section.fuzzy_match, section.first_divergence, section.highlight) == \
        ("auto", False, True, "none")
    assert section.formats == ["hdf5", "csv"] and section.rel_eps is None and section.small_value == 0.0
    assert (section.thresholds.cosine.warning, section.thresholds.cosine.error) == (0.99, 0.9)
    assert (section.thresholds.max_abs_err.warning, section.thresholds.max_abs_err.error) == (1e-3, 1.0)
    assert (section.thresholds.stats_rel_err.warning, section.thresholds.stats_rel_err.error) == (0.1, 0.5)
    assert section.output_path is None


def test_compare_options():
    section = _load(_compare(api_mapping=True, cell_mapping="cells.yaml", formats=["xlsx"], highlight="classic",
                             rel_eps=1e-7, small_value=1e-3, mode="md5"))[0].compare
    assert section.api_mapping is True and section.cell_mapping == "cells.yaml"
    assert section.formats == ["hdf5", "xlsx"]
    assert _load(_compare(api_mapping=False))[0].compare.api_mapping is None


@pytest.mark.parametrize("section,path", [
    ({"target_path": "a"}, "compare.golden_path"),
    ({"golden_path": "b"}, "compare.target_path"),
    ({"target_path": "", "golden_path": "b"}, "compare.target_path"),
])
def test_compare_paths_required(section, path):
    paths, _ = _paths({"task": "compare", "compare": section})
    assert path in paths


@pytest.mark.parametrize("extra,path", [
    ({"mode": "real"}, "compare.mode"),
    ({"api_mapping": 1}, "compare.api_mapping"),
    ({"formats": ["pdf"]}, "compare.formats[0]"),
    ({"highlight": "classic"}, "compare.highlight"),
    ({"rel_eps": 0}, "compare.rel_eps"),
    ({"small_value": -1}, "compare.small_value"),
    ({"thresholds": {"cosine": {"warning": 0.9, "error": 0.99}}}, "compare.thresholds.cosine.error"),
    ({"thresholds": {"max_abs_err": {"warning": 1, "error": 0.1}}}, "compare.thresholds.max_abs_err.error"),
    ({"thresholds": {"cosin": {}}}, "compare.thresholds.cosin"),
    ({"fuzzy_match": "true"}, "compare.fuzzy_match"),
])
def test_compare_rejected(extra, path):
    paths, _ = _paths(_compare(**extra))
    assert path in paths


def test_grad_compare():
    job, _ = _load({"task": "grad_compare", "grad_compare": {"target_path": "a", "golden_path": "b"}})
    section = job.grad_compare
    assert (section.similarity_threshold, section.drop_threshold, section.layer_tolerance, section.plots) == \
        (0.97, 0.03, 0.1, True)
    for bad, path in (({"similarity_threshold": 1.5}, "grad_compare.similarity_threshold"),
                      ({"drop_threshold": 1}, "grad_compare.drop_threshold"),
                      ({"layer_tolerance": -1}, "grad_compare.layer_tolerance"),
                      ({"plots": "no"}, "grad_compare.plots")):
        paths, _ = _paths({"task": "grad_compare", "grad_compare": {"target_path": "a", "golden_path": "b", **bad}})
        assert path in paths


def test_analysis_jobs_take_no_target():
    paths, _ = _paths({"task": "compare", "target": "demo", "compare": {"target_path": "a", "golden_path": "b"}})
    assert paths == ["target"]


def test_monitor_nothing_enabled_warns():
    _, warnings = _load({"task": "monitor"})
    assert [p for p, _ in warnings] == ["monitor"]
