"""The exported JSON Schemas and the loader agree: a config the loader accepts is schema-valid, and a schema-valid
config the loader rejects breaks only a rule the schema's descriptions name as beyond JSON Schema.

`config_strategies.schema_configs` draws configs from the schema's shape with plain hypothesis strategies, leaving
out the cross-field rules so that they are hit often (both verdicts are then checked, in both directions).
hypothesis-jsonschema 0.23.1 cannot run with hypothesis 6.170 (its object strategy calls the removed
`many.more`), and it would only draw schema-valid configs.
"""

import functools
import json
import re

import jsonschema
import pytest
from config_strategies import schema_configs
from hypothesis import HealthCheck, given, settings

import schemas
from schemas.json_schemas import DEFAULT_DIR

# Rules the schema documents but cannot express (see the "Also checked by probe-tui" descriptions).
BEYOND_SCHEMA = [
    r"the left end \d+ is greater than the right end",  # rank/step "a-b" with a > b
    r"is not a positive size",  # "0.1B"
    r"must be an integer \(got -?\d+\.0\)",  # JSON Schema counts 3.0 as an integer
    r"must be strictly ascending",  # grad_probe bounds
    r"does not divide by n_head", r"layer \d+ does not exist", r"is never reached",  # demo arithmetic
    r"must not be (above|below) warning",  # compare thresholds ordering
    r"is outside a tuple of",  # monitor selector index
]
_BEYOND = re.compile("|".join(BEYOND_SCHEMA))


@functools.lru_cache(maxsize=None)
def _validator(task):
    schema = json.loads((DEFAULT_DIR / f"{task}.schema.json").read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _verdicts(task, config):
    try:
        schemas.load_config(config, on_warning=lambda *a: None)
        issues = []
    except schemas.ConfigError as err:
        issues = err.errors
    return issues, _validator(task).is_valid(config)


def _union_agrees(task, config):
    """job.schema.json (every task, selected by `task`) says what the task's own schema says."""
    assert _validator("job").is_valid(config) == _validator(task).is_valid(config)


def _check(task, config):
    issues, schema_ok = _verdicts(task, config)
    if not issues:
        assert schema_ok, f"the loader accepts what the schema refuses: {json.dumps(config)[:400]}: " \
                          f"{next(_validator(task).iter_errors(config)).message[:200]}"
    elif schema_ok:
        unexpressed = [str(i) for i in issues if not _BEYOND.search(i.message)]
        assert not unexpressed, f"schema-valid but refused: {json.dumps(config)[:400]}: {unexpressed}"


@pytest.mark.parametrize("task", list(schemas.TASKS))
def test_loader_and_schema_agree_on_drawn_configs(task):
    @settings(max_examples=120, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(schema_configs(task))
    def check(config):
        _check(task, config)
    check()


# Each failed before: the schema accepted it, the loader refused it.
REFUSED_BY_BOTH = [
    ("statistics", {"statistics": {"scope": ["Functional.a.0.forward"] * 3}}),
    ("statistics", {"statistics": {"scope": ["Functional.a.0.forward"]}}),
    ("statistics", {"level": "L1", "statistics": {"scope": ["Module.fc.Linear.forward.0"] * 2}}),
    ("statistics", {"level": "L0", "statistics": {"scope": ["Functional.a.0.forward"] * 2}}),
    ("statistics", {"statistics": {"data_mode": ["all", "forward"]}}),
    ("statistics", {"statistics": {"data_mode": []}}),
    ("statistics", {"statistics": {"data_mode": ["input", "input"]}}),
    ("statistics", {"statistics": {"list": [" "]}}),
    ("statistics", {"async_dump": True, "statistics": {"summary_mode": "md5"}}),
    ("statistics", {"async_dump": True, "statistics": {"summary_mode": ["max", "hash"]}}),
    ("statistics", {"target": {}}),
    ("statistics", {"target": {"demo": {}, "script": "t.py"}}),
    ("statistics", {"target": {"demo": {}, "args": ["-x"]}}),
    ("statistics", {"target": {"script": "t.py", "kwargs": {"a": 1}}}),
    ("statistics", {"target": {"callable": "not a callable"}}),
    ("statistics", {"output": {"compression_level": 3}}),
    ("statistics", {"step": ["١-٣"]}),
    ("statistics", {"rank": ["1000001"]}),
    ("statistics", {"output": {"disk_budget": "١٢GB"}}),
    ("tensor", {"level": "L2", "tensor": {"list": ["Functional.a.0.forward"], "scope": ["a", "b"]}}),
    ("tensor", {"async_dump": True}),
    ("tensor", {"async_dump": True, "level": "L2", "tensor": {"list": ["Functional.a.0.forward"]}}),
    ("overflow_check", {"overflow_check": {"overflow_nums": 0}}),
    ("free_benchmark", {"free_benchmark": {"scope": ["Torch.matmul.0.forward"], "list": ["relu"]}}),
    ("free_benchmark", {"free_benchmark": {"scope": ["matmul"]}}),
    ("free_benchmark", {"free_benchmark": {"fuzz_device": "cpu"}}),
    ("free_benchmark", {"free_benchmark": {"pert_mode": "to_cpu"}}),
    ("free_benchmark", {"free_benchmark": {"fuzz_stage": "backward"}}),
    ("free_benchmark", {"free_benchmark": {"handler_type": "fix", "if_preheat": True}}),
    ("free_benchmark", {"free_benchmark": {"handler_type": "fix", "pert_mode": "add_noise"}}),
    ("free_benchmark", {"free_benchmark": {"handler_type": "fix", "fuzz_stage": "backward", "list": ["a"]}}),
    ("grad_probe", {"grad_probe": {"param_list": [""]}}),
    ("grad_probe", {"grad_probe": {"bounds": [2 ** 64]}}),
    ("monitor", {"monitor": {"forward_only": True, "backward_only": True}}),
    ("monitor", {"monitor": {"targets": {" ": {}}}}),
    ("monitor", {"monitor": {"targets": {"a": {"input": "tuple[x]"}}}}),
    ("monitor", {"monitor": {"targets": {"a": {"input": "tuple[٣]"}}}}),
    ("monitor", {"monitor": {"alert": {"rules": [{"rule_name": "AnomalyTurbulence"}]}}}),
    ("monitor", {"monitor": {"alert": {"rules": [{"rule_name": "AnomalyTurbulence",
                                                  "args": {"threshold": 1, "include_inf": True}}]}}}),
    ("monitor", {"monitor": {"alert": {"rules": [{"rule_name": "AnomalyNan", "args": {"direction": "up"}}]}}}),
    ("compare", {"compare": {"target_path": "a", "golden_path": "b", "highlight": "classic"}}),
    ("compare", {"compare": {"target_path": "a", "golden_path": "b", "api_mapping": "  "}}),
    ("grad_probe", {"_comment": "c" * 10_001}),
]

# Each failed before: the loader accepted it, the schema refused it.
ACCEPTED_BY_BOTH = [
    ("statistics", {"statistics": None, "rank": None, "step": None}),
    ("statistics", {"_comment": "msprobe's key", "statistics": {"data_mode": "forward"}}),
    ("statistics", {"statistics": {"summary_mode": ["max", "min", "md5"]}}),
    ("statistics", {"async_dump": True, "statistics": {"summary_mode": ["max", "min"]}}),
    ("statistics", {"level": "debug", "statistics": {"scope": ["anything", "goes"]}}),
    ("statistics", {"level": "mix", "statistics": {"scope": ["Module.a.A.forward.0", "Functional.b.0.forward"]}}),
    ("tensor", {"level": "L2", "tensor": {"list": ["Functional.linear.0.forward"]}}),
    ("tensor", {"level": "L2"}),
    ("statistics", {"level": "L2", "statistics": {"list": ["a", "b"], "summary_mode": ["max", "min"]}}),
    ("tensor", {"level": "L2", "tensor": {"list": ["a", "b"]}}),
    ("statistics", {"level": "L2", "statistics": {"list": [], "data_mode": ["all"]}}),
    ("overflow_check", {"level": "L2"}),
    ("tensor", {"async_dump": True, "tensor": {"list": ["relu"]}}),
    ("free_benchmark", {"free_benchmark": {"fuzz_device": "cpu", "pert_mode": "to_cpu", "handler_type": "fix"}}),
    ("monitor", {"monitor": {"format": "csv", "targets": {"a": {"input": " tuple[2]:1 "}}}}),
    ("monitor", {"monitor": {"alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
                                                 {"rule_name": "AnomalyNan"}]}}}),
    ("monitor", {"monitor": None}),
    ("compare", {"compare": {"target_path": "a", "golden_path": "b", "api_mapping": False, "rank": None,
                             "highlight": "classic", "formats": ["xlsx"]}}),
    ("overflow_check", {"overflow_check": {"overflow_nums": -1}}),
]


@pytest.mark.parametrize("task, body", REFUSED_BY_BOTH)
def test_schema_refuses_what_the_loader_refuses(task, body):
    config = {"task": task, **body}
    issues, schema_ok = _verdicts(task, config)
    assert issues, "the loader accepts it"
    assert not schema_ok, f"schema-valid, but the loader says: {[str(i) for i in issues]}"
    _union_agrees(task, config)


@pytest.mark.parametrize("task, body", ACCEPTED_BY_BOTH)
def test_schema_accepts_what_the_loader_accepts(task, body):
    config = {"task": task, **body}
    issues, schema_ok = _verdicts(task, config)
    assert not issues, [str(i) for i in issues]
    assert schema_ok, next(_validator(task).iter_errors(config)).message
    _union_agrees(task, config)


def test_inexpressible_rules_are_named_in_the_schema():
    text = "".join(p.read_text(encoding="utf-8") for p in DEFAULT_DIR.glob("*.schema.json"))
    for words in ("a-b' needs a <= b", "d_model divides by n_head", "bounds are strictly ascending",
                  "error is not above warning", "i is below n", "at least one byte", "3.0 is refused"):
        assert words in text, words
