"""The app and the online check: the run screen shows the failing APIs as their steps end, and a run or rank folder
with online_check stores opens as the online check's table (searchable, filtered, sortable, with a detail pane)."""

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Label, Static

from engines.acc_check import online as oc
from probe_tui.app.app import ProbeApp
from probe_tui.app.openers import start_kind
from probe_tui.app.screens.dump import DumpScreen
from probe_tui.app.screens.online_check import OnlineCheckScreen, call_detail, read_online
from tests.app_pilot import META, open_view, pilot_test, rendered_text, wait_until


def _row(step, name, output, status, rel, message=""):
    metrics = {"cosine": 0.99999, "max_abs_err": rel / 4, "max_rel_err": rel}
    return {"step": step, "name": name, "api": name.rsplit(".", 2)[0], "output": output, "status": status,
            "standard": "benchmark", "dtype": "torch.float32", "bench_dtype": "torch.float64", "shape": "[2, 8]",
            "message": message, "metrics": json.dumps(metrics)}


def make_online_run(folder: Path) -> Path:
    """A statistics run's rank folder with an online check of two steps, written by the engine's store: the
    softmax's forward fails, its backward warns, the linear and gelu pass."""
    store = oc.OnlineStore(folder / "rank0", 0, dict(META, task="statistics"))
    for step in range(2):
        store.write(step, [
            _row(step, "Functional.linear.0.forward", "output.0", "pass", 2e-7),
            _row(step, "Demo.naive_softmax.0.forward", "output.0", "error", 0.004 + step * 1e-4,
                 "benchmark: mean_rel_err 0.0012 is 40 x the ideal's (> 2)"),
            _row(step, "Functional.gelu.0.forward", "output.0", "pass", 1e-7),
            _row(step, "Functional.gelu.0.backward", "output.0", "pass", 3e-7),
            _row(step, "Demo.naive_softmax.0.backward", "output.0", "warning", 0.02,
                 "only 99.98% of elements within 0.01% relative error (needs > 99.99%)"),
            _row(step, "Functional.linear.0.backward", "output.0", "pass", 1e-6),
            _row(step, "Functional.linear.0.backward", "output.1", "pass", 5e-7),
        ])
    store.close("finished")
    return folder


def _names(table: DataTable):
    return [str(table.get_row_at(n)[1]) for n in range(table.row_count)]


def test_a_run_or_rank_folder_with_online_stores_opens_as_the_online_check(tmp_path):
    run = make_online_run(tmp_path / "run")
    assert start_kind(run) == "online-check" and start_kind(run / "rank0") == "online-check"
    result = read_online(run)
    assert len(result.calls) == 12 and result.failing_apis == ["Demo.naive_softmax"]
    linear = next(c for c in result.calls if c["name"] == "Functional.linear.0.backward")
    assert linear["error"] == 1e-6 and len(result.outputs[linear["key"]]) == 2
    detail = rendered_text(call_detail(linear, result.outputs[linear["key"]]), 100)
    assert "gradients w.r.t. its inputs" in detail and "output.1" in detail and "max rel err" in detail


@pilot_test
async def test_the_table_sorts_searches_filters_and_details_the_calls(tmp_path):
    run = make_online_run(tmp_path / "run")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, run, OnlineCheckScreen)
        table = screen.query_one("#ac-apis", DataTable)
        await wait_until(pilot, lambda: table.row_count == 12)
        verdict = str(screen.query_one("#ac-verdict", Static).render())
        assert "12 calls judged: 2 error, 2 warning, 8 pass · failing: Demo.naive_softmax" in verdict
        assert _names(table)[:4] == ["Demo.naive_softmax.0.forward"] * 2 + ["Demo.naive_softmax.0.backward"] * 2
        assert screen.selected["step"] == 1  # the larger error first among the errors
        detail = rendered_text(call_detail(screen.selected, screen.result.outputs[screen.selected["key"]]), 100)
        assert "40 x the ideal" in detail
        await pilot.press("e")  # by error: the softmax's backward (0.02) first
        await wait_until(pilot, lambda: screen.sort_by == "error")
        assert _names(table)[:2] == ["Demo.naive_softmax.0.backward"] * 2
        assert _names(table)[-1] == "Functional.gelu.0.forward"
        await pilot.press("f")  # errors only
        await wait_until(pilot, lambda: table.row_count == 2)
        title = str(screen.query_one("#ac-table-title", Label).render())
        assert "2 of 12 rows · filter: errors" in title
        await pilot.press("f", "f", "f", "slash", *"linear.0.back", "enter")  # every status again, searched
        await wait_until(pilot, lambda: _names(table) == ["Functional.linear.0.backward"] * 2)
        await pilot.press("s")
        await wait_until(pilot, lambda: screen.sort_by == "status")
        await pilot.press("d")  # the run's dump: none here, the dump browser says so
        await wait_until(pilot, lambda: isinstance(app.screen, DumpScreen))


@pytest.mark.usefixtures("one_torch_thread")
@pilot_test
async def test_a_run_from_the_app_shows_the_failing_api_live_and_opens_its_online_check(tmp_path):
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.run import RunScreen

    config = tmp_path / "online.json"
    config.write_text(json.dumps({
        "task": "statistics", "level": "L1", "dump_path": "probe_dump",
        "target": {"demo": {"preset": "tiny", "steps": 2, "dtype": "fp32", "faults": {"lowp_softmax": {"layer": 1}}}},
        "statistics": {"online_check": {"enabled": True, "api_list": ["softmax", "gelu"]}}}))
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.is_mounted)
        app.start_run(config)
        run = await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.is_mounted
                               and app.screen, what="the run screen")
        await wait_until(pilot, lambda: run.finished_at is not None, timeout=120)
        assert run.status == "finished", run.child.log_path.read_text()
        assert run.online_failing == 1 and run.online_apis == ["Demo.naive_softmax"]
        line = str(run.query_one("#run-online", Static).render())
        assert line == "online check: 1 failing API Demo.naive_softmax"
        assert any("Demo.naive_softmax failed the online check" in str(n.message) for n in app._notifications)
        await pilot.press("o")
        screen = await wait_until(pilot, lambda: isinstance(app.screen, OnlineCheckScreen) and app.screen)
        table = screen.query_one("#ac-apis", DataTable)
        await wait_until(pilot, lambda: table.row_count > 0)
        assert {c["api"] for c in screen.result.calls if c["status"] == "error"} == {"Demo.naive_softmax"}
        assert {"Demo.naive_softmax", "Functional.softmax", "Functional.gelu"} == {c["api"] for c in screen.result.calls}
        assert any(c["name"].endswith(".backward") for c in screen.result.calls)


@pilot_test
async def test_the_run_screen_names_each_failing_api_as_its_step_ends(tmp_path):
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.run import RunScreen

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.is_mounted)
        screen = RunScreen(tmp_path / "stats.json", cwd=tmp_path, autostart=False)
        await app.push_screen(screen)
        line = screen.query_one("#run-online", Static)
        assert not line.display  # no online check: no line
        screen.apply_event({"kind": "run_started", "run_dir": "d", "task": "statistics", "total_steps": 3})
        screen.apply_event({"kind": "step", "step": 0, "online_failing": 0, "online_failing_apis": []})
        assert line.display and "no API fails on the reference so far" in str(line.render())
        screen.apply_event({"kind": "step", "step": 1, "online_failing": 1,
                            "online_failing_apis": ["Demo.naive_softmax"]})
        assert str(line.render()) == "online check: 1 failing API Demo.naive_softmax"
        screen.apply_event({"kind": "step", "step": 2, "online_failing": 22,
                            "online_failing_apis": ["Demo.naive_softmax", "Functional.gelu"]})
        assert str(line.render()) == "online check: 22 failing APIs Demo.naive_softmax, Functional.gelu and 20 more"
        await pilot.pause()
        notes = [str(n.message) for n in app._notifications if n.title == "Online check"]
        assert notes == ["Demo.naive_softmax failed the online check", "Functional.gelu failed the online check"]
