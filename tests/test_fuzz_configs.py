"""Fuzzing the config loader: every input ends in a job or a ConfigError of one-line issues, never another
exception; from the CLI, exit 0 or one line and exit 2.

Inputs: random JSON structures (as dicts, JSON strings and files), the sample configs and msprobe's config.json
shapes mutated (keys dropped, added or misspelt, values swapped for random JSON, deep nesting, huge numbers),
and the files' bytes flipped or cut. Sized to run in well under a minute on one core; derandomized so CI is
repeatable (a failure names its input). Fuzzing of dumps and mapping files lives with those readers' tests.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schemas
from probe_tui.cli import main

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "sample_configs").glob("*.json")) + sorted(
    (ROOT / "tests" / "data" / "configs" / "msprobe").glob("*.json"))
BASES = [json.loads(p.read_text(encoding="utf-8")) for p in SAMPLES]
FUZZ = settings(max_examples=150, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))
QUIET = {"on_warning": lambda *a: None}

KEYS = sorted({"task", "comment", "_comment", "dump_path", "target", "rank", "step", "level", "scope", "list",
               "data_mode", "summary_mode", "async_dump", "demo", "script", "callable", "output", "framework",
               "monitor", "targets", "ops", "format", "compare", "target_path", "golden_path", "npu_path",
               "bench_path", "xy_distribution", "wg_distribution", "alert", "rules", "bounds", "grad_probe",
               "overflow_nums", "enable_dataloader", "is_deterministic", "seed", "disk_budget", "layer", "a.b", ""}
              | set(schemas.TASKS))
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(KEYS), st.sampled_from(["L0", "L1", "mix", "L2", "debug", "0-3", "4-",
                                                                  "١-٣", "tuple[2]:0", "20GB", "m:f", "demo"]))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner,
                                                  max_size=5)), max_leaves=20)
CONFIGS = st.one_of(
    st.dictionaries(st.sampled_from(KEYS), JSON, max_size=6),
    st.fixed_dictionaries({"task": st.sampled_from(list(schemas.TASKS))},
                          optional={k: JSON for k in ("dump_path", "rank", "step", "level", "target", "output")}
                          ).flatmap(lambda c: st.fixed_dictionaries(
                              {**{k: st.just(v) for k, v in c.items()},
                               c["task"]: st.dictionaries(st.sampled_from(KEYS), JSON, max_size=4)})),
)


def _loads_or_config_error(source):
    """Load; a ConfigError must be one line per issue. Returns the job or None."""
    try:
        job = schemas.load_config(source, **QUIET)
    except schemas.ConfigError as err:
        assert err.errors, "a ConfigError names at least one issue"
        for issue in err.errors:
            text = str(issue)
            assert "\n" not in text and len(text) <= 1100, text[:300]
        return None
    again = schemas.load_config(schemas.dump_config(job), **QUIET)
    assert again == job, "dump_config round trip"
    return job


# ----------------------------------------------------------------------------------------------- mutations
def _paths(value, loc=()):
    yield loc
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, loc + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, loc + (i,))


def _set(value, loc, new):
    if not loc:
        return new
    head, rest = loc[0], loc[1:]
    if isinstance(value, dict):
        return {**value, head: _set(value[head], rest, new)}
    out = list(value)
    out[head] = _set(out[head], rest, new)
    return out


def _deep(depth):
    value = 1
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def mutated_samples(draw):
    config = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(config))
        loc = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "drop", "add", "wrap", "deep", "huge", "misspell"]))
        target = config
        for part in loc:
            target = target[part]
        if kind == "replace":
            config = _set(config, loc, draw(JSON))
        elif kind == "drop" and loc:
            parent = config
            for part in loc[:-1]:
                parent = parent[part]
            if isinstance(parent, dict):
                config = _set(config, loc[:-1], {k: v for k, v in parent.items() if k != loc[-1]})
        elif kind == "add" and isinstance(target, dict):
            config = _set(config, loc, {**target, draw(st.sampled_from(KEYS)): draw(JSON)})
        elif kind == "wrap":
            config = _set(config, loc, [target])
        elif kind == "deep":
            config = _set(config, loc, _deep(draw(st.sampled_from([10, 63, 65, 500]))))
        elif kind == "huge":
            config = _set(config, loc, draw(st.sampled_from([10 ** 99, 10 ** 100, -10 ** 400, 2 ** 64, 1e308])))
        elif kind == "misspell" and isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)))
            renamed = key[:-1] if len(key) > 1 else key + "x"
            config = _set(config, loc, {(renamed if k == key else k): v for k, v in target.items()})
    if not isinstance(config, dict):
        config = {"task": config}
    return config


# ---------------------------------------------------------------------------------------------------- tests
@FUZZ
@given(CONFIGS)
def test_random_json_structures(config):
    _loads_or_config_error(config)


@FUZZ
@given(JSON)
def test_random_json_values_as_strings(value):
    text = json.dumps(value, allow_nan=True)
    _loads_or_config_error("{" + text[1:] if text.startswith("{") else '{"task": ' + text + "}")


@FUZZ
@given(mutated_samples())
def test_mutated_samples_and_msprobe_configs(config):
    _loads_or_config_error(config)


@settings(FUZZ, max_examples=100)
@given(st.sampled_from(SAMPLES), st.data())
def test_damaged_config_files(tmp_path_factory, path, data):
    raw = bytearray(path.read_bytes())
    how = data.draw(st.sampled_from(["cut", "flip", "insert", "nest", "digits"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if how == "cut":
        raw = raw[:at]
    elif how == "flip":
        raw[at] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "insert":
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    elif how == "nest":
        depth = data.draw(st.sampled_from([64, 1000, 100_000]))
        raw = bytearray(b'{"comment": ' + b"[" * depth + b"]" * depth + b", " + bytes(raw[1:]))
    else:
        raw = bytearray(b'{"seed": ' + b"7" * data.draw(st.sampled_from([100, 101, 4301, 20_000])) + b", "
                        + bytes(raw[1:]))
    target = tmp_path_factory.mktemp("fuzz") / path.name
    target.write_bytes(bytes(raw))
    _loads_or_config_error(target)


@settings(FUZZ, max_examples=40)
@given(st.one_of(mutated_samples(), CONFIGS))
def test_cli_validate_in_process(tmp_path_factory, config):
    path = tmp_path_factory.mktemp("cli") / "c.json"
    path.write_text(json.dumps(config, allow_nan=True), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["validate", str(path)])
    errors = [line for line in err.getvalue().splitlines() if line.startswith("probe-tui: error:")]
    if code == 0:
        assert not errors and json.loads(out.getvalue())
    else:
        assert code == 2 and errors, err.getvalue()[-500:]
        assert all(line.startswith("probe-tui: ") for line in err.getvalue().splitlines())


def test_cli_subprocess_hostile_files(tmp_path):
    """A few cases through the real command line: one line on stderr, exit 2, no traceback."""
    cases = {
        "deep.json": '{"task": "statistics", "comment": ' + "[" * 100_000 + "]" * 100_000 + "}",
        "digits.json": '{"task": "statistics", "step": [' + "1" * 5000 + "]}",
        "key.json": json.dumps({"task": "statistics", "k" * 100_000: 1}),
    }
    paths = []
    for name, text in cases.items():
        paths.append(tmp_path / name)
        paths[-1].write_text(text)
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo.json")
        paths.append(tmp_path / "fifo.json")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for path in paths:
        for argv in (["validate", str(path)], ["--run", str(path)]):
            done = subprocess.run([sys.executable, "-m", "probe_tui", *argv], capture_output=True, text=True,
                                  timeout=60, env=env, cwd=tmp_path)
            assert done.returncode == 2, (argv, done.stderr[-500:])
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("probe-tui: error: ") and len(lines[0]) < 300, lines
