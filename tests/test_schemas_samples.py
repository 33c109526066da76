"""Every sample config loads, round-trips, and is valid under the committed JSON Schemas; the schemas do not drift."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

import schemas
from schemas.json_schemas import DEFAULT_DIR, schema_text, union_json_schema

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_configs").glob("*.json"))
SAMPLE_IDS = [p.name for p in SAMPLES]

REQUIRED_SAMPLES = {
    "statistics.json", "tensor.json", "overflow_check.json", "free_benchmark.json", "grad_probe.json",
    "monitor.json", "compare.json", "grad_compare.json", "statistics_L0.json", "statistics_mix.json",
    "mindspore_statistics.json", "statistics_bf16.json", "grad_probe_bf16.json",
}


def _load_quiet(source):
    warnings = []
    job = schemas.load_config(source, on_warning=lambda path, msg: warnings.append((path, msg)))
    return job, warnings


def test_every_required_sample_exists_and_every_task_has_one():
    names = {p.name for p in SAMPLES}
    assert REQUIRED_SAMPLES <= names
    tasks = {json.loads(p.read_text())["task"] for p in SAMPLES}
    assert tasks == set(schemas.TASKS)


@pytest.mark.parametrize("path", SAMPLES, ids=SAMPLE_IDS)
def test_sample_loads_without_warnings(path):
    job, warnings = _load_quiet(path)
    assert warnings == []
    raw = json.loads(path.read_text())
    assert job.task == raw["task"]
    assert isinstance(job, schemas.TASKS[raw["task"]])
    assert job.dump_path.startswith("./probe_dump")


@pytest.mark.parametrize("path", SAMPLES, ids=SAMPLE_IDS)
def test_collection_samples_run_the_small_demo(path):
    job, _ = _load_quiet(path)
    if job.task in schemas.ANALYSIS_TASKS:
        assert "earlier runs" in job.comment
        return
    demo = job.target.demo
    assert demo is not None and 3 <= demo.steps <= 5
    assert demo.preset == "tiny"


def test_compare_samples_point_at_the_runs_the_other_samples_write():
    dumps = {p.name: _load_quiet(p)[0].dump_path for p in SAMPLES}
    compare = _load_quiet(ROOT / "sample_configs" / "compare.json")[0].compare
    assert compare.target_path == dumps["statistics_lowp.json"] + "/latest"
    assert compare.golden_path == dumps["statistics.json"] + "/latest"
    grad = _load_quiet(ROOT / "sample_configs" / "grad_compare.json")[0].grad_compare
    assert grad.target_path == dumps["grad_probe_bf16.json"] + "/latest"
    assert grad.golden_path == dumps["grad_probe.json"] + "/latest"
    fp32 = _load_quiet(ROOT / "sample_configs" / "statistics.json")[0]
    bf16 = _load_quiet(ROOT / "sample_configs" / "statistics_bf16.json")[0]
    lowp = _load_quiet(ROOT / "sample_configs" / "statistics_lowp.json")[0]
    assert (fp32.target.demo.dtype, bf16.target.demo.dtype, lowp.target.demo.dtype) == ("fp32", "bf16", "fp32")
    assert fp32.target.demo.faults.lowp_softmax is None and lowp.target.demo.faults.lowp_softmax.layer == 1


@pytest.mark.parametrize("path", SAMPLES, ids=SAMPLE_IDS)
def test_round_trip(path):
    job, _ = _load_quiet(path)
    dumped = schemas.dump_config(job)
    assert json.loads(json.dumps(dumped)) == dumped  # JSON-ready
    again, warnings = _load_quiet(dumped)
    assert again == job
    assert warnings == []
    assert schemas.dump_config(again) == dumped


@pytest.mark.parametrize("path", SAMPLES, ids=SAMPLE_IDS)
def test_json_schema_validates_sample(path):
    raw = json.loads(path.read_text())
    schema = json.loads((DEFAULT_DIR / f"{raw['task']}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(raw, schema, cls=jsonschema.Draft202012Validator)
    job, _ = _load_quiet(path)  # the normalised form is valid too
    jsonschema.validate(schemas.dump_config(job), schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize("path", SAMPLES, ids=SAMPLE_IDS)
def test_union_schema_validates_sample(path):
    schema = json.loads((DEFAULT_DIR / "job.schema.json").read_text())
    jsonschema.validate(json.loads(path.read_text()), schema, cls=jsonschema.Draft202012Validator)


def test_json_schema_rejects_what_the_loader_rejects():
    raw = json.loads((ROOT / "sample_configs" / "statistics.json").read_text())
    schema = schemas.json_schema("statistics")
    for broken in ({"levle": "L1"}, {"level": "L3"}, {"rank": [True]}, {"rank": ["6-4x"]},
                   {"statistics": {"data_mode": ["inptu"]}}, {"async_dump": "true"},
                   {"output": {"disk_budget": "lots"}}, {"target": "script"}):
        bad = {**copy.deepcopy(raw), **broken}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema, cls=jsonschema.Draft202012Validator)
        with pytest.raises(schemas.ConfigError):
            schemas.load_config(bad, on_warning=lambda *a: None)


def test_committed_json_schemas_match_the_models(tmp_path):
    written = schemas.export_json_schemas(tmp_path)
    names = sorted(p.name for p in written)
    assert names == sorted(p.name for p in DEFAULT_DIR.glob("*.schema.json")), \
        "schemas/json/ is out of date: run `python -m schemas.export`"
    for path in written:
        committed = (DEFAULT_DIR / path.name).read_text()
        assert committed == path.read_text(), f"{path.name} drifted: run `python -m schemas.export`"
    assert (DEFAULT_DIR / "job.schema.json").read_text() == schema_text(union_json_schema())


def test_every_field_has_a_description():
    def check(schema, where):
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{where}.{name} has no description"
    for task in schemas.TASKS:
        schema = schemas.json_schema(task)
        check(schema, task)
        for name, sub in schema.get("$defs", {}).items():
            check(sub, f"{task}:{name}")


def test_advanced_fields_are_marked():
    schema = schemas.json_schema("statistics")
    assert schema["properties"]["async_dump"]["advanced"] is True
    assert "advanced" not in schema["properties"]["level"]
    demo = schema["$defs"]["DemoKnobs"]["properties"]
    assert demo["n_layer"]["advanced"] is True and "advanced" not in demo["steps"]


@pytest.mark.parametrize("task", sorted(schemas.TASKS))
def test_starter_config_is_valid(task):
    config = schemas.starter_config(task)
    job, warnings = _load_quiet(copy.deepcopy(config))
    assert job.task == task
    assert warnings == []
    jsonschema.validate(config, schemas.json_schema(task), cls=jsonschema.Draft202012Validator)
    if task in schemas.COLLECTION_TASKS:
        assert job.target.demo is not None and job.target.demo.steps <= 5


def test_starter_config_unknown_task():
    with pytest.raises(schemas.ConfigError) as err:
        schemas.starter_config("statistic")
    assert "did you mean 'statistics'" in str(err.value)


def test_task_registry():
    assert set(schemas.TASKS) == set(schemas.COLLECTION_TASKS) | set(schemas.ANALYSIS_TASKS)
    assert schemas.TASKS["overflow_check"] is schemas.OverflowCheckJob
    from schemas.jobs import JOB_ADAPTER

    job = JOB_ADAPTER.validate_python({"task": "tensor", "tensor": {"list": ["relu"]}})
    assert isinstance(job, schemas.TensorJob) and job.tensor.list == ["relu"]
