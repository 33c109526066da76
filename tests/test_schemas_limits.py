"""Hostile configs end in one ConfigError line (exit 2 from the CLI), never a traceback, a hang or unbounded reads:
deep nesting, integers of thousands of digits, FIFOs and devices, oversized files, huge keys, values and comments,
and rank/step strings written with non-ASCII digits."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import schemas
from probe_tui.cli import main
from schemas.common import MAX_COMMENT_CHARS
from schemas.source import MAX_CONFIG_BYTES, MAX_DEPTH, MAX_INT_DIGITS

ROOT = Path(__file__).resolve().parent.parent
QUIET = {"on_warning": lambda *a: None}


def _one_line_exit_2(capsys, argv):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("probe-tui: error: "), err
    assert "Traceback" not in err
    return err


def _deep_array(depth):
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 100_000])
def test_deeply_nested_json_file_is_one_error(tmp_path, capsys, depth):
    path = tmp_path / "deep.json"
    path.write_text('{"task": "statistics", "comment": ' + _deep_array(depth) + "}")
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path, **QUIET)
    assert "levels deep" in str(err.value)
    assert "levels deep" in _one_line_exit_2(capsys, ["validate", str(path)])
    assert "levels deep" in _one_line_exit_2(capsys, ["--run", str(path)])


def test_deeply_nested_object_names_its_key(tmp_path):
    text = '{"task": "statistics", "target": {"demo": {"faults": ' + '{"a": ' * 200 + "1" + "}" * 200 + "}}}"
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(text, **QUIET)
    (issue,) = err.value.errors
    assert issue.path == "target" and "levels deep" in issue.message


def test_deeply_nested_dict_source_is_a_config_error():
    value = []
    for _ in range(20_000):
        value = [value]
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "statistics", "comment": value}, **QUIET)
    assert "levels deep" in str(err.value)


def test_nesting_at_the_limit_is_fine():
    kwargs = {"k": 1}
    for _ in range(MAX_DEPTH - 5):  # job > target > kwargs > ... within the limit
        kwargs = {"k": kwargs}
    job = schemas.load_config({"task": "statistics", "target": {"callable": "m:f", "kwargs": kwargs}}, **QUIET)
    assert job.target.kwargs["k"]["k"]


@pytest.mark.parametrize("digits", [MAX_INT_DIGITS + 1, 4301, 50_000])
def test_huge_integer_in_a_file_is_one_error(tmp_path, capsys, digits):
    path = tmp_path / "big.json"
    path.write_text('{"task": "statistics", "seed": ' + "9" * digits + "}")
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path, **QUIET)
    assert f"integer of {digits} digits" in str(err.value)
    _one_line_exit_2(capsys, ["validate", str(path)])
    _one_line_exit_2(capsys, ["run", str(path)])


def test_huge_integer_in_a_dict_source_names_the_field():
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "statistics", "step": [1, 10 ** 5000]}, **QUIET)
    (issue,) = err.value.errors
    assert issue.path == "step[1]" and "digits" in issue.message


def test_in_script_debugger_raises_config_error(tmp_path):
    from probe_tui import PrecisionDebugger

    deep = tmp_path / "deep.json"
    deep.write_text('{"task": "statistics", "comment": ' + _deep_array(50_000) + "}")
    big = tmp_path / "big.json"
    big.write_text('{"task": "statistics", "step": [' + "1" * 5000 + "]}")
    for path in (deep, big):
        with pytest.raises(schemas.ConfigError):
            PrecisionDebugger(config_path=str(path))


def _load_in_child(path, timeout=30):
    """Load in a child process so that a regression (a blocking open, an unbounded read) fails, not hangs."""
    code = ("import sys, schemas\n"
            "try:\n    schemas.load_config(sys.argv[1])\n"
            "except schemas.ConfigError as err:\n    print(err)\n    sys.exit(2)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_config_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    done = _load_in_child(fifo)
    assert done.returncode == 2, done.stderr
    assert "not a regular file (it is a FIFO)" in done.stdout


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_device_config_is_refused_without_reading(tmp_path):
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    for path in ("/dev/zero", link):
        done = _load_in_child(path)
        assert done.returncode == 2, done.stderr
        assert "character device" in done.stdout


def test_oversized_config_file_is_refused(tmp_path, capsys):
    path = tmp_path / "huge.json"
    path.write_text('{"task": "statistics",' + " " * MAX_CONFIG_BYTES + "}")
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path, **QUIET)
    assert "larger than 4 MiB" in str(err.value)
    _one_line_exit_2(capsys, ["validate", str(path)])


def test_oversized_dict_source_is_refused():
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "statistics", "target": {"script": "t.py", "args": ["x" * 100_000] * 50}},
                            **QUIET)
    assert "larger than 4 MiB" in str(err.value)


def test_unknown_key_is_echoed_shortened(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"task": "statistics", "k" * 100_000: 1, "statistics": {"q" * 50_000: 1}}))
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(path, **QUIET)
    assert len(err.value.errors) == 2
    for issue in err.value.errors:
        assert issue.message == "unknown key" and len(issue.path) < 100 and issue.path.endswith('..."]')
    assert len(str(err.value)) < 300
    main(["validate", str(path)])
    assert len(capsys.readouterr().err) < 500


def test_long_values_and_hints_are_shortened():
    bad = {"task": "statistics", "step": ["x" * 100_000], "level": "L" * 100_000, "framework": "p" * 10_000,
           "statistics": {"scope": ["y" * 100_000, "z" * 100_000], "summary_mode": "md" * 10_000},
           "target": {"callable": "c" * 100_000}}
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config(bad, **QUIET)
    assert len(err.value.errors) >= 5
    for issue in err.value.errors:
        assert len(str(issue)) < 400, str(issue)[:500]
        assert "\n" not in str(issue)


def test_comment_over_the_cap_is_refused(tmp_path, capsys):
    ok = {"task": "statistics", "comment": "c" * MAX_COMMENT_CHARS}
    assert schemas.load_config(ok, **QUIET).comment == ok["comment"]
    for key in ("comment", "_comment"):
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({"task": "statistics", key: "c" * 1_000_000}))
        with pytest.raises(schemas.ConfigError) as err:
            schemas.load_config(path, **QUIET)
        (issue,) = err.value.errors
        assert issue.path == "comment"
        assert issue.message == f"is 1000000 characters long; at most {MAX_COMMENT_CHARS} are allowed"
        err_line = _one_line_exit_2(capsys, ["validate", str(path)])
        assert "comment: is 1000000 characters long" in err_line
    # The issue's 50 MB comment: the file is over the size cap before the comment is looked at.
    path = tmp_path / "fifty.json"
    path.write_text(json.dumps({"task": "statistics", "comment": "c" * 50_000_000}))
    assert "larger than 4 MiB" in _one_line_exit_2(capsys, ["validate", str(path)])


@pytest.mark.parametrize("item", ["١-٣", "٣", "１", "3-٥", "²", "3\u00a0-\u00a04"])
def test_rank_and_step_strings_take_ascii_digits_only(item):
    for key in ("rank", "step"):
        with pytest.raises(schemas.ConfigError) as err:
            schemas.load_config({"task": "statistics", key: [item]}, **QUIET)
        assert err.value.errors[0].path == f"{key}[0]"


@pytest.mark.parametrize("size", ["١٢GB", "1" * 400, "1." + "5" * 400 + "GB"])
def test_disk_budget_takes_ascii_digits_and_bounded_numbers(size):
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config({"task": "tensor", "output": {"disk_budget": size}}, **QUIET)
    assert err.value.errors[0].path == "output.disk_budget"


def test_ranges_in_any_spacing_and_leading_zeros_still_load():
    job = schemas.load_config({"task": "statistics", "step": [" 4 - 6 ", "0007", "\t1000000"]}, **QUIET)
    assert job.step == [4, 5, 6, 7, 1_000_000]


def _in_thread(fn, timeout=20):
    """Run ``fn`` in a daemon thread: a regression that blocks (reading a FIFO) fails the test instead of hanging."""
    import threading

    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "blocked"
    return out


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_app_config_scan_and_load_skip_fifos_and_deep_files(tmp_path):
    from probe_tui.app.config_backend import SchemaBackend
    from probe_tui.app.discovery import find_config_files

    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "deep.json").write_text('{"task": "statistics", "comment": ' + _deep_array(50_000) + "}")
    (tmp_path / "ok.json").write_text('{"task": "statistics"}')
    found = _in_thread(lambda: find_config_files(tmp_path, list(schemas.TASKS)))
    assert "error" not in found, found.get("error")
    assert [c.path.name for c in found["value"]] == ["ok.json"]
    for name, words in (("fifo.json", "not a regular file"), ("deep.json", "levels deep")):
        loaded = _in_thread(lambda name=name: SchemaBackend().read_file(tmp_path / name))
        assert isinstance(loaded.get("error"), ValueError), loaded
        assert words in str(loaded["error"]) and "\n" not in str(loaded["error"])


@pytest.mark.parametrize("raw", ["[" * 100_000 + "]" * 100_000, "[" * 100_000, "x" * 100_000, '["١-٣"]'],
                         ids=["deep", "deep-open", "long", "arabic-digits"])
def test_rank_env_that_is_deep_long_or_not_ascii_is_one_short_line(monkeypatch, raw):
    from engines.launch import LaunchError, ranks_from_env

    monkeypatch.setenv("PROBE_TUI_RANKS", raw)
    with pytest.raises(LaunchError) as err:
        ranks_from_env()
    assert str(err.value).startswith("PROBE_TUI_RANKS: ") and len(str(err.value)) < 300
    assert "\n" not in str(err.value)


def test_dict_source_holding_an_uncopyable_object_is_a_config_error():
    import threading

    for config in ({"task": "statistics", "comment": threading.Lock()},
                   {"task": "statistics", "target": {"callable": "m:f", "kwargs": {"a": threading.Lock()}}}):
        with pytest.raises(schemas.ConfigError) as err:
            schemas.load_config(config, **QUIET)
        assert "not config data" in str(err.value)


def test_nul_byte_in_a_config_path_is_a_config_error():
    with pytest.raises(schemas.ConfigError) as err:
        schemas.load_config("/tmp/a\x00b.json", **QUIET)
    assert "cannot open the file" in str(err.value)
