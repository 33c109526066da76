"""The app's acc_check view: opened by ``probe-tui open`` and listed on home, the APIs sortable by status and by
error, the detail pane with each output's metrics and reason, and ``r`` writing the reproduction script."""

import contextlib
import math
from pathlib import Path

import pytest
from textual.widgets import DataTable, Label, Static

from engines.acc_check import results as rs
from probe_tui.app.app import ProbeApp
from probe_tui.app.discovery import find_msprobe_dumps
from probe_tui.app.openers import start_kind
from probe_tui.app.screens.acc_check import AccCheckScreen, api_detail
from tests.app_pilot import count_layouts, open_view, pilot_test, rendered_text, wait_until

NAN = math.nan


def _out(api, name, status, rel, message="", **metrics):
    return {"api": api, "name": name, "direction": "backward" if ".backward." in name else "forward",
            "bench_dtype": "torch.float64", "device_dtype": "torch.float32", "shape": "[4, 8]",
            "standard": "benchmark", "metrics": {"cosine": 1.0, "max_abs_err": rel / 2, "max_rel_err": rel,
                                                 **metrics},
            "status": status, "message": message}


def make_acc_check_result(folder: Path) -> Path:
    """A finished check written by the engine's own journal and store writers: one error, one warning with the
    largest error, one SKIP, two passes."""
    folder.mkdir(parents=True)
    journal = rs.Journal(folder, "/data/dump", "20260105100000")
    entries = [
        ("Functional.linear.0", "pass", "pass", [_out("Functional.linear.0", "Functional.linear.0.forward.output.0",
                                                      "pass", 1e-9)]),
        ("Demo.naive_softmax.0", "error", " ", [_out("Demo.naive_softmax.0",
                                                      "Demo.naive_softmax.0.forward.output.0", "error", 0.008,
                                                      "4.1% of normal elements above 1 ulp", max_ulp_err=1.6)]),
        ("Tensor.add.0", "warning", " ", [_out("Tensor.add.0", "Tensor.add.0.forward.output.0", "warning", 0.02,
                                               "99.5% of elements within 0.1%")]),
        ("Tensor.to.0", "SKIP", " ", []),
        ("Functional.gelu.0", "pass", "pass", [_out("Functional.gelu.0", "Functional.gelu.0.forward.output.0",
                                                    "pass", 1e-7)]),
    ]
    for name, fwd, bwd, outs in entries:
        message = "forward: not a computation (cast)" if fwd == "SKIP" else "; ".join(
            o["message"] for o in outs if o["message"])
        journal.add({"rank": 0, "step": 0, "name": name, "forward": fwd, "backward": bwd, "status": fwd,
                     "message": message}, outs)
    journal.finish()
    journal.close()
    rs.write_store(folder, journal, {"dump": "/data/dump", "reference": "cpu"})
    return folder


@contextlib.asynccontextmanager
async def acc_check_view(tmp_path):
    """The app at 120x40 on the acc_check view of a made-up result (5 APIs), its table filled: (pilot, screen,
    table)."""
    result = make_acc_check_result(tmp_path / "acc")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, result, AccCheckScreen)
        table = screen.query_one("#ac-apis", DataTable)
        await wait_until(pilot, lambda: table.row_count == 5)
        yield pilot, screen, table


def _names(table: DataTable):
    return [str(table.get_row_at(n)[2]) for n in range(table.row_count)]


def test_open_and_home_know_an_acc_check_result(tmp_path):
    result = make_acc_check_result(tmp_path / "checks" / "acc")
    assert start_kind(result) == "acc-check"
    rows = find_msprobe_dumps(tmp_path)
    assert [(r["task"], r["status"], r["folder"]) for r in rows] == [("acc_check", "acc_check result",
                                                                     "checks/acc")]


@pilot_test
async def test_the_view_sorts_by_status_and_by_error_and_details_the_outputs(tmp_path):
    async with acc_check_view(tmp_path) as (pilot, screen, table):
        verdict = str(screen.query_one("#ac-verdict", Static).render())
        assert "5 APIs checked: 1 error, 1 warning, 1 not replayed, 2 pass" in verdict
        assert _names(table) == ["Demo.naive_softmax.0", "Tensor.add.0", "Tensor.to.0", "Functional.gelu.0",
                                 "Functional.linear.0"]
        detail = rendered_text(api_detail(screen.selected, screen.result.outputs["Demo.naive_softmax.0"]), 100)
        assert "4.1% of normal elements above 1 ulp" in detail and "max ULP" in detail and "1.6" in detail
        await pilot.press("e")
        await wait_until(pilot, lambda: screen.sort_by == "error")
        assert _names(table) == ["Tensor.add.0", "Demo.naive_softmax.0", "Functional.gelu.0",
                                 "Functional.linear.0", "Tensor.to.0"]
        assert screen.selected["name"] == "Tensor.add.0"
        await pilot.press("down")
        await wait_until(pilot, lambda: screen.selected["name"] == "Demo.naive_softmax.0")
        await pilot.press("s")
        await wait_until(pilot, lambda: _names(table)[0] == "Demo.naive_softmax.0")
        await pilot.press("r")  # the dump /data/dump does not exist: one line, no crash
        await wait_until(pilot, lambda: any("reproduce" in (n.title or "") for n in pilot.app._notifications))
        assert screen.last_written is None


@pilot_test
async def test_the_api_table_searches_filters_by_status_and_counts_its_rows(tmp_path):
    async with acc_check_view(tmp_path) as (pilot, screen, table):
        title = screen.query_one("#ac-table-title", Label)
        assert "5 rows" in str(title.render())
        await pilot.press("f")  # errors only
        await wait_until(pilot, lambda: table.row_count == 1)
        assert _names(table) == ["Demo.naive_softmax.0"] and "1 of 5 rows · filter: errors" in str(title.render())
        await pilot.press("f", "f")  # not passed: error, warning, SKIP
        await wait_until(pilot, lambda: table.row_count == 3)
        assert _names(table) == ["Demo.naive_softmax.0", "Tensor.add.0", "Tensor.to.0"]
        await pilot.press("f", "slash", *"gelu", "enter")  # every status again, searched
        await wait_until(pilot, lambda: _names(table) == ["Functional.gelu.0"])
        await pilot.press("down", "up")
        await wait_until(pilot, lambda: screen.selected["name"] == "Functional.gelu.0")
        assert "search: gelu" in str(title.render())


@pytest.mark.usefixtures("one_torch_thread")
@pilot_test
async def test_r_writes_the_reproduction_script_of_the_injected_softmax(tmp_path):
    pytest.importorskip("torch")
    from engines.events import NullSink
    from engines.runner import run_job
    from schemas import load_config

    demo = {"preset": "tiny", "steps": 1, "dtype": "fp32", "faults": {"lowp_softmax": {"layer": 1}}}
    job = load_config({"task": "tensor", "dump_path": str(tmp_path / "dump"), "target": {"demo": demo},
                       "level": "L1", "tensor": {"data_mode": ["all"], "summary_mode": "statistics"}})
    assert run_job(job, events=NullSink()).exit_code == 0
    job = load_config({"task": "acc_check", "dump_path": str(tmp_path / "checks"),
                       "acc_check": {"path": str(tmp_path / "dump" / "latest"), "backward": False}})
    run_job(job, events=NullSink())
    out = (tmp_path / "checks" / "latest").resolve()  # a run folder: run.json beside the result
    assert (out / "run.json").is_file() and start_kind(out) == "acc-check"
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, out, AccCheckScreen)
        await wait_until(pilot, lambda: screen.selected is not None)
        assert screen.selected["name"].startswith("Demo.naive_softmax") and screen.selected["status"] == "error"
        await pilot.press("r")
        await wait_until(pilot, lambda: screen.last_written is not None, 60)
        script, npz = screen.last_written
        assert script.parent == out / "reproduce" and script.is_file() and npz.is_file()
        assert script.name.startswith("Demo.naive_softmax.0.forward")
        await wait_until(pilot, lambda: any("Wrote checks/" in str(n.message) and "/reproduce/" in str(n.message)
                                            for n in app._notifications))


def test_snapshot_80x24(snap_compare, tmp_path):
    """The view at 80x24 on the fixed result (regenerate with ``--snapshot-update`` and look at the report)."""
    result = make_acc_check_result(tmp_path / "acc")

    async def run_before(pilot):
        screen = await open_view(pilot, result, AccCheckScreen)
        await wait_until(pilot, lambda: screen.selected is not None)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    assert snap_compare(ProbeApp(tmp_path, root_label="~/exp"), terminal_size=(80, 24), run_before=run_before)


@pilot_test
async def test_a_result_view_is_not_restyled_as_it_first_resumes_only_when_it_resumes_again(tmp_path, monkeypatch):
    # Textual restyles every node of a screen as it resumes; the first time, each was styled as it mounted (a
    # key that opens a view paid for it twice). A later resume that asks for it still restyles.
    from textual import events

    restyled = []
    original = AccCheckScreen.update_node_styles

    def counted(self, animate=True):
        restyled.append(self)
        return original(self, animate)

    monkeypatch.setattr(AccCheckScreen, "update_node_styles", counted)
    result = make_acc_check_result(tmp_path / "acc")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, result, AccCheckScreen)
        await wait_until(pilot, lambda: screen.query_one("#ac-apis", DataTable).row_count == 5)
        await pilot.pause(0.2)
        assert restyled == []
        screen.post_message(events.ScreenResume())
        await wait_until(pilot, lambda: restyled == [screen])


@pilot_test
async def test_the_detail_is_drawn_once_per_api(tmp_path):
    """The pane got the API's Rich group, which Textual drew to measure it, to lay the screen out and to paint
    it, again on each visit; it now gets the lines drawn once at its width, kept for a key that comes back."""
    from probe_tui.app.widgets.detail_pane import DetailPane, Prerendered

    async with acc_check_view(tmp_path) as (pilot, screen, table):
        pane = screen.query_one("#ac-detail-body", DetailPane)
        await pilot.press("down")
        await wait_until(pilot, lambda: screen.selected["name"] == "Tensor.add.0")
        drawn = pane.content
        assert isinstance(drawn, Prerendered) and drawn.width == pane.content_size.width
        assert [line.rstrip() for line in rendered_text(drawn, 100).splitlines()] == [
            line.rstrip() for line in rendered_text(api_detail(screen.selected, screen.result.outputs["Tensor.add.0"]),
                                                    drawn.width).splitlines()]
        await pilot.press("up", "down")
        await wait_until(pilot, lambda: screen.selected["name"] == "Tensor.add.0")
        assert pane.content is drawn  # drawn once


@pilot_test
async def test_a_sort_lays_nothing_out(tmp_path, monkeypatch):
    """The table's title was a Label as wide as its text, so a sort (its new title) laid the screen out again
    (~25-40 ms of CPU); the title keeps its box and is redrawn alone."""
    layouts = count_layouts(monkeypatch, AccCheckScreen)
    async with acc_check_view(tmp_path) as (pilot, screen, table):
        await pilot.press("down")  # the API the sort puts first: its detail stays as it is
        await wait_until(pilot, lambda: screen.selected["name"] == "Tensor.add.0")
        await pilot.pause(0.3)
        layouts.clear()
        await pilot.press("e")
        await wait_until(pilot, lambda: screen.sort_by == "error" and _names(table)[0] == "Tensor.add.0")
        await pilot.pause(0.3)
        assert "APIs by error, largest first" in str(screen.query_one("#ac-table-title", Label).render())
        assert layouts == []


@pilot_test
async def test_a_detail_kept_drawn_is_drawn_again_after_a_theme_switch(tmp_path):
    """The details kept drawn hold the old theme's colours: a key that comes back to a row after a switch draws
    its detail again."""
    from probe_tui.app.widgets.detail_pane import DetailPane, Prerendered

    async with acc_check_view(tmp_path) as (pilot, screen, table):
        pane = screen.query_one("#ac-detail-body", DetailPane)
        first = screen.selected["name"]
        await pilot.press("down")
        await wait_until(pilot, lambda: screen.selected["name"] == "Tensor.add.0")
        drawn = pane.content
        assert isinstance(drawn, Prerendered)
        await pilot.press("up")
        await wait_until(pilot, lambda: screen.selected["name"] == first)
        pilot.app.theme = "textual-light"
        await pilot.pause(0.1)
        await pilot.press("down")
        await wait_until(pilot, lambda: screen.selected["name"] == "Tensor.add.0")
        assert isinstance(pane.content, Prerendered) and pane.content is not drawn
