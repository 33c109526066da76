"""The compare browser on real results: the demo with its injected low-precision softmax against the healthy
run (the sample configs a new user runs), a module tree made by the compare engine, and a large result."""

from pathlib import Path

import numpy as np
import pytest
from textual.widgets import DataTable, Input

from engines.compare.verdicts import ERROR, PASS, WARNING
from probe_tui.app.app import ProbeApp
from probe_tui.app.data.compare_result import CompareResult
from probe_tui.app.screens.compare import CompareScreen
from probe_tui.app.screens.home import HomeScreen
from probe_tui.app.widgets.result_tree import ResultTree
from tests.app_pilot import make_compare_result, open_view, pilot_test, rendered_text, run_sample, wait_until


@pytest.fixture(scope="module")
def demo_compare(tmp_path_factory):
    """statistics.json, statistics_lowp.json, then compare.json, as the sample README says, under one folder."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("demo")
    golden = run_sample(root, "statistics.json")
    target = run_sample(root, "statistics_lowp.json")
    result = run_sample(root, "compare.json", compare={"target_path": target.run_dir,
                                                       "golden_path": golden.run_dir})
    return root, Path(result.run_dir)


@pytest.fixture(scope="module")
def tree_result(tmp_path_factory):
    return make_compare_result(tmp_path_factory.mktemp("tree"))


def loaded(app):
    screen = app.screen
    return isinstance(screen, CompareScreen) and screen.data is not None and screen.divergence is not None


@pilot_test
async def test_the_injected_fault_heads_the_first_divergence_list_opened_from_home(demo_compare):
    root, result = demo_compare
    app = ProbeApp(root, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned, what="home")
        home = app.screen
        row = next(i for i, r in enumerate(home.runs) if r["task"] == "compare")
        home.query_one("#runs", DataTable).move_cursor(row=row)
        await pilot.press("enter")
        await wait_until(pilot, lambda: loaded(app), what="compare result read")
        screen = app.screen
        await pilot.press("2")
        await wait_until(pilot, lambda: screen.divergence_table.row_count > 0)
        first = [str(c) for c in screen.divergence_table.source.cells(0)]
        # the fault: block 1's softmax computed in bfloat16; the ranking names the region the golden does not run
        # (a cast, the bf16 softmax, a cast back) by the op that computes in it
        assert first[2] == "Demo.naive_softmax.0.forward +2" and first[4] == "target-only ops", first
        assert "target-only op" in first[-1]
        detail = await wait_until(pilot, lambda: "bfloat16" in _detail_text(screen) and _detail_text(screen),
                                  what="the suspect's detail with its stack")
        assert "#1 suspect" in detail and "to(torch.bfloat16)" in detail
        # enter on the suspect shows its rows in the results table
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen._active_tab() == "results")
        row = screen.current_row()
        assert screen.data.text["record"][row] == screen.divergence["record"][0]
        assert screen.data.text["slot"][row].startswith("output")  # the record's worst row: its output


def _detail_text(screen) -> str:
    return rendered_text(screen.detail_renderable)


@pilot_test
async def test_errors_filters_sort_and_search(demo_compare):
    root, result = demo_compare
    app = ProbeApp(root, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_view(pilot, result, CompareScreen)
        await wait_until(pilot, lambda: loaded(app))
        data, table = screen.data, screen.results_table
        assert table.row_count == data.n_rows > 1000
        # n: the next row of the worst verdict present (errors; warnings when the run has none)
        worst = screen.view.problem_level
        assert worst in (ERROR, WARNING) and len(screen.view.error_positions)
        await pilot.press("n")
        await wait_until(pilot, lambda: data.columns["verdict"][screen.current_row()] == worst)
        first_problem = screen.current_row()
        assert first_problem == int(np.flatnonzero(data.columns["verdict"] == worst)[0])
        await pilot.press("n")
        await wait_until(pilot, lambda: screen.current_row() != first_problem)
        assert data.columns["verdict"][screen.current_row()] == worst
        await pilot.press("f")  # problems: errors, warnings, unmatched
        await wait_until(pilot, lambda: screen.view.verdict_filter == "problems")
        assert not np.any(data.columns["verdict"][screen.view.rows] == PASS)
        assert table.row_count == len(screen.view) < data.n_rows
        await pilot.press("s", "s")  # dump order -> worst verdict -> rel_err
        await wait_until(pilot, lambda: screen.view.sort == "rel_err")
        rel = data.columns["rel_err"][screen.view.rows]
        finite = rel[~np.isnan(rel)]
        assert np.all(np.diff(finite) <= 0) and np.isnan(rel[len(finite):]).all()
        await pilot.press("slash")
        await wait_until(pilot, lambda: screen.query_one("#cmp-search", Input).has_focus)
        await pilot.press(*"softmax", "enter")
        await wait_until(pilot, lambda: screen.view.search == "softmax")
        names = [data.name(i) + data.text["parent"][i] for i in screen.view.rows]
        assert names and all("softmax" in n for n in names)
        await pilot.press("slash", "ctrl+u", *"re:[", "enter")  # a bad expression: a notification, the view stays
        await wait_until(pilot, lambda: any("search" in n.message for n in app._notifications))
        assert screen.view.search == "softmax"
        await pilot.press("escape")  # back to home
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))


@pilot_test
async def test_the_model_tree_colours_modules_by_their_worst_verdict(tree_result):
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(app))
        await pilot.press("3")
        await wait_until(pilot, lambda: screen.tree_ready)
        tree = screen.query_one("#tree", ResultTree)
        piece = tree.root.children[0]
        top = {str(n.label.plain).split("  ")[0]: n for n in piece.children}
        assert set(top) == {"✓ blocks.0 (Block)", "✗ blocks.1 (Block)", "✓ head (Linear)"}, list(top)
        block1 = top["✗ blocks.1 (Block)"]
        assert "err" in block1.label.plain and "unmatched" in block1.label.plain
        tree.move_cursor(block1)
        await pilot.press("enter")  # expand
        await wait_until(pilot, lambda: len(block1.children) == 2)
        labels = [c.label.plain for c in block1.children]
        assert labels[0].startswith("✗ blocks.1.attn (Attention)"), labels
        attn = block1.children[0]
        tree.move_cursor(attn)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(attn.children) == 2)
        softmax = attn.children[1]
        assert softmax.label.plain.startswith("✗ Functional.softmax.1.forward")
        mlp = block1.children[1]
        tree.move_cursor(mlp)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(mlp.children) == 2)
        assert any("∅ Tensor.add.0.forward" in c.label.plain and "unmatched" in c.label.plain for c in mlp.children)
        tree.move_cursor(softmax)
        await pilot.press("g")  # its rows in the results table
        await wait_until(pilot, lambda: screen._active_tab() == "results")
        await wait_until(pilot, lambda: screen.data.text["record"][screen.current_row()] ==
                         "Functional.softmax.1.forward")
        await pilot.press("2")
        await wait_until(pilot, lambda: screen.divergence_table.row_count > 0)
        assert screen.divergence_table.source.cells(0)[2] == "Functional.softmax.1.forward"


def test_views_sort_filter_and_search_on_the_columns(tree_result):
    data = CompareResult(tree_result)
    try:
        everything = data.view()
        assert everything.rows.tolist() == list(range(data.n_rows))
        worst = data.view(sort="severity")
        assert data.columns["verdict"][worst.rows[0]] == ERROR
        errors = data.view("errors")
        assert len(errors) == len(errors.error_positions) == int((data.columns["verdict"] == ERROR).sum())
        assert everything.problem_level == ERROR
        unmatched = data.view("unmatched")  # no error or warning among them: n goes to the unmatched rows
        assert unmatched.problem_level == 3 and len(unmatched.error_positions) == len(unmatched)
        assert errors.next_error(len(errors) - 1) == 0  # wraps
        block1 = data.view(search="blocks.1")  # matches the enclosing module too
        assert {data.text["record"][i] for i in block1.rows} >= {"Functional.softmax.1.forward"}
        assert all("blocks.1" in data.text["record"][i] + data.text["parent"][i] for i in block1.rows)
        glob = data.view(search="Functional.softmax.*")
        assert {data.text["record"][i] for i in glob.rows} == {"Functional.softmax.0.forward",
                                                              "Functional.softmax.1.forward"}
        with pytest.raises(ValueError, match="search"):
            data.view(search="re:(")
        row = data.row(int(worst.rows[0]))
        assert row["verdict"] == ERROR and row["target_name"] == data.name(int(worst.rows[0]))
        assert row["golden_name"] == row["target_name"] and row["t_max"] > row["g_max"]
        first = int(np.flatnonzero(data.text["record"].codes == data.text["record"].codes[worst.rows[0]])[0])
        assert data.worst_row_of_record(first) == int(worst.rows[0])  # the softmax's output, not its input
    finally:
        data.close()


@pilot_test
async def test_a_large_result_scrolls_to_its_last_row(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from app_open_speed import build

    result = build(tmp_path, 30_000)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_view(pilot, result, CompareScreen)
        await wait_until(pilot, lambda: loaded(app))
        table = screen.results_table
        assert table.row_count == screen.data.n_rows >= 30_000
        table.focus()
        await pilot.press("end")
        await wait_until(pilot, lambda: table.cursor_row == table.row_count - 1)
        last = table.visible_text()[-1]
        assert last.strip().startswith(str(table.row_count - 1))
        await pilot.press("pageup")
        await wait_until(pilot, lambda: table.cursor_row == table.row_count - 1 - table.page_rows)
        await pilot.press("s", "s")  # worst verdict, then rel_err: the injected softmax first
        await wait_until(pilot, lambda: screen.view.sort == "rel_err")
        assert screen.data.text["record"][int(screen.view.rows[0])].startswith("Functional.softmax.")


@pilot_test
async def test_a_filter_that_matches_no_row_says_so(tree_result):
    """It said "Reading the result…" for ever."""
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(app))
        await screen.apply_view(search="no_such_op_anywhere")
        table = screen.results_table
        assert table.row_count == 0
        assert table.empty_text == "No row matches (search 'no_such_op_anywhere'): f changes the filter, / the search."
        await screen.apply_view(search="")
        assert table.row_count == screen.data.n_rows


@pilot_test
async def test_the_status_says_when_columns_go_past_the_edge(tree_result):
    """At 80 columns the results table cut its columns with no hint."""
    for size, cut in (((80, 24), True), ((250, 40), False)):
        app = ProbeApp(tree_result.parent, root_label="~/exp")
        async with app.run_test(size=size) as pilot:
            screen = await open_view(pilot, tree_result, CompareScreen)
            await wait_until(pilot, lambda: loaded(pilot.app))
            if not cut:
                await pilot.press("d")  # no detail pane: the table has the whole width
                await pilot.pause()
            await screen.apply_view(search="")
            status = str(screen.query_one("#results-status").render())
            assert ("→ more columns" in status) is cut, status


@pilot_test
async def test_the_detail_drawn_in_the_worker_fits_the_pane_as_it_stays(tree_result):
    """The detail pane keeps its scrollbar (one that came and went laid the screen out again): the detail the worker
    draws is drawn for the width beside that scrollbar, so the pane shows those lines as they are. Drawn for the
    width under the scrollbar, the pane drew the detail again on the UI thread (a repaint of the whole screen) on
    each cursor move."""
    from probe_tui.app.widgets.detail_pane import DetailPane, Prerendered

    for size in ((120, 40), (80, 24)):
        app = ProbeApp(tree_result.parent, root_label="~/exp")
        async with app.run_test(size=size) as pilot:
            screen = await open_view(pilot, tree_result, CompareScreen)
            await wait_until(pilot, lambda: loaded(pilot.app))
            pane = screen.query_one("#detail-body", DetailPane)
            for key in ("down", "n", "end"):  # short details and one taller than the pane
                row = screen.current_row()
                await pilot.press(key)
                await wait_until(pilot, _detail_shown(screen, pane, row), what="the row's detail shown")
                await pilot.pause(0.1)  # a redraw for another width comes after a refresh
                assert isinstance(pane.content, Prerendered), (size, key)
                assert pane.content.width == pane.content_size.width, (size, key)
                assert pane.parent.show_vertical_scrollbar


def _detail_shown(screen, pane, row):
    """A test that the cursor left ``row`` and its new row's detail, drawn in the worker, is in the pane."""
    from probe_tui.app.widgets.detail_pane import Prerendered

    def shown() -> bool:
        return (screen.current_row() != row and screen.detail_renderable is not None
                and screen._detail_key == ("row", screen.current_row()) and isinstance(pane.content, Prerendered)
                and pane.content.source is screen.detail_renderable)
    return shown


def _count_layouts(screen) -> list:
    """Count the screen's full layouts from now on (a scroll's reflow of the visible widgets is not one)."""
    compositor = screen._compositor
    reflow, layouts = compositor.reflow, []

    def counted(*args, **kwargs):
        layouts.append(1)
        return reflow(*args, **kwargs)

    compositor.reflow = counted
    return layouts


@pilot_test
async def test_a_detail_of_another_height_lays_the_screen_out_once(tree_result):
    """A suspect whose detail is taller or shorter than the last one changes the detail pane's box: one layout. The pane
    and its scrolling container then had a new virtual size, which laid the whole screen out a second time for
    nothing (failed before: 2 layouts each)."""
    from probe_tui.app.widgets.detail_pane import DetailPane

    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        pane, table = screen.query_one("#detail-body", DetailPane), screen.divergence_table
        await pilot.press("2")  # suspects' details, taller than the narrow layout's pane, by a line or so

        def suspect_shown(line: int):
            return lambda: (table.cursor_row == line and screen._detail_key == ("suspect", line)
                            and pane.content.source is screen.detail_renderable)

        await wait_until(pilot, suspect_shown(0), what="the first suspect's detail")
        await pilot.pause(0.3)
        changed = []
        for line in range(1, table.row_count):
            height = pane.size.height
            layouts = _count_layouts(screen)
            await pilot.press("down")
            await wait_until(pilot, suspect_shown(line), what="the next suspect's detail")
            await pilot.pause(0.3)
            if pane.size.height != height:
                changed.append(len(layouts))
        assert changed and changed == [1] * len(changed), changed


@pilot_test
async def test_a_tab_switch_back_shows_its_detail_with_the_tab(tree_result):
    """Back on a tab, the detail of its cursor's row was drawn already: it shows as the key is handled, in the
    tab's own layout (failed before: read again by a worker after the cursor's rest, a layout of its own)."""
    from probe_tui.app.widgets.detail_pane import DetailPane

    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        pane = screen.query_one("#detail-body", DetailPane)
        row = screen.current_row()
        await wait_until(pilot, lambda: screen._detail_key == ("row", row) and screen.detail_renderable is not None,
                         what="the first row's detail")
        drawn = screen.detail_renderable
        await pilot.press("2")
        await wait_until(pilot, lambda: screen._detail_key == ("suspect", 0) and screen.detail_renderable is not drawn
                         and "suspect" in rendered_text(screen.detail_renderable), what="the first suspect's detail")
        await pilot.press("1", "2")  # the first switches restyle the scrollbars (once)
        await wait_until(pilot, lambda: screen._detail_key == ("suspect", 0) and screen._active_tab() == "divergence")
        await pilot.pause(0.3)
        layouts = _count_layouts(screen)
        await pilot.press("1")
        assert screen._detail_key == ("row", row) and screen.detail_renderable is drawn
        assert pane.content.source is drawn
        await pilot.pause(0.3)
        assert len(layouts) == 1, layouts
        assert screen.results_table.has_focus


def _suspect_off_the_first_row(screen):
    """(ranking line, worst results row) of a suspect whose row is not the results view's first."""
    data, divergence = screen.data, screen.divergence
    suspects = [(line, data.worst_row_of_record(int(first)))
                for line, first in enumerate(divergence["first_row"]) if 0 <= int(first) < data.n_rows]
    line, target = next((s for s in suspects if screen.view.position_of(s[1]) != 0), (None, None))
    assert target is not None, suspects
    return line, target


async def _seen(pilot, screen, position: int) -> int:
    """Put the results cursor on ``position`` and wait until its row's detail is drawn; return that row."""
    from probe_tui.app.widgets.detail_pane import DetailPane

    pane = screen.query_one("#detail-body", DetailPane)
    screen.results_table.move_cursor(position)
    row = int(screen.view.rows[position])
    await wait_until(pilot, lambda: screen._detail_key == ("row", row) and ("row", row) in screen._details
                     and pane.content.source is screen.detail_renderable, what="row {}'s detail".format(row))
    return row


def _shows_drawn(screen, row: int) -> bool:
    """The detail pane shows ``row``'s detail, the one drawn before (no worker, no wait for the cursor's rest)."""
    from probe_tui.app.widgets.detail_pane import DetailPane

    drawn = screen._details[("row", row)][1]
    pane = screen.query_one("#detail-body", DetailPane)
    return (screen._detail_key == ("row", row) and screen.detail_renderable is drawn
            and pane.content.source is drawn)


@pilot_test
async def test_enter_on_a_suspect_shows_the_results_tab_with_its_rows_detail(tree_result):
    """Enter on a suspect shows the results tab on its worst row, with that row's detail drawn before at once
    (failed before: the tab showed the detail of the row the cursor left, a layout, then the row's after a rest)."""
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        line, target = _suspect_off_the_first_row(screen)
        assert await _seen(pilot, screen, screen.view.position_of(target)) == target
        await _on_the_ranking(pilot, screen)
        screen.divergence_table.move_cursor(line)
        await wait_until(pilot, lambda: screen._detail_key == ("suspect", line) and ("suspect", line) in screen._details)
        await pilot.pause(0.3)
        layouts = _count_layouts(screen)
        await pilot.press("enter")
        await _shows_results_at_once(pilot, screen, target, layouts)


@pilot_test
async def test_enter_on_a_suspect_reads_its_rows_detail_at_once_and_shows_the_tab_with_it(tree_result):
    """Enter on a suspect whose row's detail was not drawn yet reads it at once (no wait for the cursor's rest) and
    shows the results tab once, with that detail (failed before: the tab showed with the suspect's detail, a layout,
    then the row's ~80 ms later, once the cursor had rested and a worker had read it, another layout)."""
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        line, target = _suspect_off_the_first_row(screen)
        await _on_the_ranking(pilot, screen)
        screen.divergence_table.move_cursor(line)
        await wait_until(pilot, lambda: screen._detail_key == ("suspect", line) and ("suspect", line) in screen._details)
        await pilot.pause(0.3)
        assert ("row", target) not in screen._details
        compositor = screen._compositor
        reflow, frames = compositor.reflow, []

        def counted(*args, **kwargs):
            if screen._active_tab() == "results":
                drawn = screen._details.get(("row", target))
                frames.append(drawn is not None and screen.detail_renderable is drawn[1])
            return reflow(*args, **kwargs)

        compositor.reflow = counted
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen._active_tab() == "results" and screen.current_row() == target)
        await wait_until(pilot, lambda: _shows_drawn(screen, target), what="the row's detail")
        await pilot.pause(0.3)
        assert frames and all(frames), frames  # every frame of the results tab shows the row's detail
        assert screen.results_table.has_focus


async def _on_the_ranking(pilot, screen):
    """From the results on row 0, to the ranking tab, its first suspect's detail shown, the switches' one-time
    restyles done."""
    await _seen(pilot, screen, 0)
    await pilot.press("2", "1", "2")  # the first switches restyle the scrollbars (once)
    await wait_until(pilot, lambda: screen._detail_key == ("suspect", 0) and screen._active_tab() == "divergence")
    await pilot.pause(0.3)


async def _shows_results_at_once(pilot, screen, target, layouts):
    """The key just pressed showed the results tab on ``target`` with its detail drawn before, in one layout."""
    assert screen._active_tab() == "results" and screen.current_row() == target
    assert _shows_drawn(screen, target)
    await pilot.pause(0.3)
    assert _shows_drawn(screen, target) and len(layouts) == 1, layouts



@pilot_test
async def test_n_from_another_tab_shows_the_results_tab_with_the_error_rows_detail(tree_result):
    """n on the ranking shows the results tab on the next error row, with that row's detail drawn before at once
    (failed before: the tab showed the detail of the row the cursor left first)."""
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        position = screen.view.next_error(0, False)
        assert position is not None and position != 0
        target = await _seen(pilot, screen, position)
        await _on_the_ranking(pilot, screen)
        layouts = _count_layouts(screen)
        await pilot.press("n")
        await _shows_results_at_once(pilot, screen, target, layouts)

async def _open_with_first_suspect_row(pilot, tree_result):
    """The compare view loaded: (screen, the results row of the first suspect)."""
    screen = await open_view(pilot, tree_result, CompareScreen)
    await wait_until(pilot, lambda: loaded(pilot.app))
    return screen, screen.data.worst_row_of_record(int(screen.divergence["first_row"][0]))



@pilot_test
async def test_enter_on_a_suspect_the_view_leaves_out_shows_the_tab_with_the_view_that_holds_its_row(tree_result):
    """The suspect's row is not in the results view (a search): enter makes a view of every row, and the results tab
    shows once, with that view and the row's detail (failed before: the tab showed first with the view that leaves
    the row out, then again with the new one; a layout and a paint of the table more)."""
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen, target = await _open_with_first_suspect_row(pilot, tree_result)
        await screen.apply_view(search="no_such_op_anywhere")
        left_out = screen.view
        assert not len(left_out)
        await pilot.press("2", "1", "2")  # the first switches restyle the scrollbars (once)
        await wait_until(pilot, lambda: screen._detail_key == ("suspect", 0) and screen._active_tab() == "divergence"
                         and ("suspect", 0) in screen._details)
        await pilot.pause(0.3)
        compositor = screen._compositor
        reflow, frames = compositor.reflow, []

        def counted(*args, **kwargs):
            frames.append((screen._active_tab(), screen.view is left_out))
            return reflow(*args, **kwargs)

        compositor.reflow = counted
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen._active_tab() == "results" and screen.current_row() == target
                         and screen._detail_key == ("row", target) and screen.detail_renderable is not None)
        await pilot.pause(0.3)
        assert screen.view.search == "" and screen.view.verdict_filter == "all"
        assert ("results", True) not in frames, frames
        assert screen.results_table.has_focus


@pilot_test
async def test_enter_on_a_left_out_suspect_shows_the_tab_when_the_view_is_slow_and_another_tab_key_wins(tree_result):
    """A view that takes long: the results tab shows after ``TAB_AFTER_VIEW_S`` anyway, and the row once the view
    arrives; a tab key pressed or a tab clicked while it waits wins (the results tab does not show over it)."""
    import time

    from probe_tui.app.screens import compare

    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen, target = await _open_with_first_suspect_row(pilot, tree_result)
        data = screen.data
        view = data.view

        def slow_view(**spec):
            time.sleep(3 * compare.TAB_AFTER_VIEW_S)
            return view(**spec)

        for then in (None, "3", "click"):
            await screen.apply_view(search="no_such_op_anywhere")
            await pilot.press("2")
            await wait_until(pilot, lambda: screen._active_tab() == "divergence")
            data.view = slow_view
            await pilot.press("enter")
            if then is None:
                await pilot.pause(compare.TAB_AFTER_VIEW_S + 0.1)
                assert screen._active_tab() == "results" and not len(screen.view)  # still waits for the view
                await wait_until(pilot, lambda: screen.current_row() == target, what="the suspect's row")
            else:
                if then == "click":
                    await pilot.click("#--content-tab-tab-tree")
                else:
                    await pilot.press(then)
                await wait_until(pilot, lambda: screen.view.search == "", what="the new view")
                await pilot.pause(compare.TAB_AFTER_VIEW_S)
                assert screen._active_tab() == "tree"
            data.view = view


@pilot_test
async def test_the_hidden_tabs_are_laid_out_before_they_first_show(tree_result):
    """Once the view is idle, the ranking and tree tabs (hidden) hold the sizes a layout gives them and the ranking's
    first detail is read: the first switch to the ranking shows it and that detail in the tab's own layout, as a
    later switch does (failed before: the tabs' widgets got their first virtual size, container size and scrollbars
    as they showed, each one a reactive that laid the screen out again, and the detail came from a worker after the
    cursor's rest, another layout; 4 layouts for the first `2` on the benchmark's result, 2 now)."""
    from textual.widgets import TabPane

    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        await pilot.pause(0.3)
        results = screen.query_one("#tab-results", TabPane)
        pane, table = screen.query_one("#tab-divergence", TabPane), screen.divergence_table

        def sizes():
            return [(w.virtual_size, w.container_size) for w in (pane, table)] + [
                (table.show_vertical_scrollbar, table.show_horizontal_scrollbar)]

        assert pane.container_size == results.container_size  # laid out while hidden
        assert ("suspect", 0) in screen._details  # and its first detail read
        before = sizes()
        await pilot.press("2")
        drawn = screen._details[("suspect", 0)][1]
        assert screen._detail_key == ("suspect", 0) and screen.detail_renderable is drawn  # with the tab, no worker
        assert screen.query_one("#detail-body").content.source is drawn
        await pilot.pause(0.3)
        assert table.size.height > 0 and sizes() == before
        tree = screen.query_one("#tab-tree", TabPane)
        assert tree.container_size == results.container_size


@pilot_test
async def test_the_tree_tab_is_read_and_laid_out_before_it_first_shows(tree_result):
    """Once the view is idle, the model tree is read and its tab laid out with its rows: the first `3` shows it as a
    later one does (failed before: the tree was read on the first `3`, its rows laid the screen out again; 4 layouts
    on the benchmark's result, 2 now)."""
    app = ProbeApp(tree_result.parent, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await open_view(pilot, tree_result, CompareScreen)
        await wait_until(pilot, lambda: loaded(pilot.app))
        await pilot.pause(0.3)
        await pilot.app.workers.wait_for_complete()
        await pilot.pause(0.1)
        assert screen.tree_ready  # read while the results tab shows
        tree = screen.query_one("#tree", ResultTree)
        before = (tree.virtual_size, tree.container_size, tree.show_vertical_scrollbar)
        assert tree.container_size.height > 0
        await pilot.press("3")
        await pilot.pause(0.3)
        assert tree.has_focus and tree.size.height > 0
        assert (tree.virtual_size, tree.container_size, tree.show_vertical_scrollbar) == before
