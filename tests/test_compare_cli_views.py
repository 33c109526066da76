"""What the compare and parse commands show, end to end on two one-step tiny demo runs (the healthy fp32 demo and
the one with a low-precision softmax): no op named when nothing differs, ``compare --top N``, ``parse --limit N``,
and ``probe-tui open DIR`` on a ``compare -o DIR`` result (which has no run.json)."""

import json
from pathlib import Path

import pytest

from probe_tui.cli import main
from tests.app_pilot import pilot_test, run_sample, wait_until

ONE_STEP = {"preset": "tiny", "steps": 1, "dtype": "fp32"}


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory):
    """(root, target, golden): the low-precision softmax run under test and the healthy fp32 run."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("cli_views")
    golden = run_sample(root, "statistics.json", target={"demo": ONE_STEP})
    target = run_sample(root, "statistics_lowp.json",
                        target={"demo": {**ONE_STEP, "faults": {"lowp_softmax": {"layer": 1}}}})
    return root, str(target.run_dir), str(golden.run_dir)


def run_cli(args, capsys):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def _table_rows(text: str, first_column: str) -> list:
    """The body lines of the printed table whose header starts with ``first_column``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_column))
    body = []
    for line in lines[start + 2:]:  # the header, then the rule under it
        if "│" not in line:
            break
        body.append(line)
    return body


def test_a_run_compared_with_itself_names_no_op(demo_runs, tmp_path, capsys):
    _, _, golden = demo_runs
    code, out, err = run_cli(["compare", golden, golden, "-o", tmp_path / "self", "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert summary["rows"] > 0 and summary["verdicts"]["pass"] == summary["rows"]
    # every row is identical: neither naive answer may point at an op
    assert summary["largest_error_op"] is None and summary["first_differing_op"] is None
    assert "Top suspects" not in err


@pytest.mark.parametrize("top", [2, 12])
def test_compare_top_sets_how_many_suspects_are_listed(demo_runs, tmp_path, capsys, top):
    _, target, golden = demo_runs
    code, out, err = run_cli(["compare", target, golden, "-o", tmp_path / "out", "--top", top, "--json"], capsys)
    assert code == 0, err
    summary = json.loads(out)["summary"]
    assert len(summary["top_suspects"]) == top
    assert summary["top_suspects"][0]["record"].startswith("Tensor.to."), summary["top_suspects"][0]
    groups = len(summary["suspect_groups"])
    assert 0 < groups <= top
    printed = _table_rows(err, "suspect")
    assert len(printed) == groups, err  # all of them, none cut to the default ten
    if top == 12:
        assert groups > 10, groups  # the demo pair has enough groups to show the default cut is gone


@pytest.mark.parametrize("value, says", [("0", "compare.top"), ("-3", "compare.top"), ("x", "--top")])
def test_compare_top_bad_value_is_one_line(demo_runs, tmp_path, capsys, value, says):
    _, target, golden = demo_runs
    code, out, err = run_cli(["compare", target, golden, "-o", tmp_path / "bad", "--top", value], capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "bad").exists()  # nothing half-written


@pytest.mark.parametrize("limit", [3, 15])
def test_parse_limit_prints_that_many_rows(demo_runs, capsys, limit):
    _, _, golden = demo_runs
    code, out, err = run_cli(["parse", golden, "--limit", limit], capsys)
    assert code == 0, err
    rows = _table_rows(out, "name")
    assert len(rows) == limit, out
    assert "listed {} of ".format(limit) in out


def test_parse_negative_limit_is_one_line(demo_runs, capsys):
    _, _, golden = demo_runs
    code, out, err = run_cli(["parse", golden, "--limit", "-1"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "--limit" in err, err


@pilot_test
async def test_open_on_a_compare_output_folder_lands_on_the_compare_browser(demo_runs, tmp_path, capsys):
    from probe_tui.app.app import ProbeApp, resolve_start
    from probe_tui.app.screens.compare import CompareScreen

    _, target, golden = demo_runs
    result = tmp_path / "result"
    code, _, err = run_cli(["compare", target, golden, "-o", result], capsys)
    assert code == 0, err
    assert not (result / "run.json").exists()  # the case: an -o folder is not a run folder
    root, start = resolve_start(str(result))
    assert (root, start) == (tmp_path.resolve(), result.resolve())
    app = ProbeApp(root, start=start, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.is_mounted
                                  and app.screen, what="the compare browser on " + str(result))
        assert Path(screen.path) == result.resolve()
