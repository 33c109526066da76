"""The results views on real runs of the samples: grad compare (the 0.97 / 0.03 verdict, similarity per
parameter, layer ratios), overflow_check (the first op per step and its origin, analyze-overflow's replays) and
free_benchmark (flagged ops with ratio and threshold)."""

from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from textual.widgets import DataTable

from probe_tui.app.app import ProbeApp
from probe_tui.app.data.grad_result import GradResult
from probe_tui.app.screens.free_benchmark import FreeBenchmarkScreen
from probe_tui.app.screens.grad import GradScreen, ratio_bar
from probe_tui.app.screens.overflow import OverflowScreen
from tests.app_pilot import (
    make_free_benchmark_run,
    make_grad_result,
    make_overflow_run,
    open_view,
    pilot_test,
    rendered_text,
    run_sample,
    viewing,
    wait_until,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The samples a new user runs: grad_probe fp32 and bf16 then grad_compare; overflow_check then
    analyze_overflow; free_benchmark."""
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("results")
    golden = run_sample(root, "grad_probe.json")
    target = run_sample(root, "grad_probe_bf16.json")
    grad = run_sample(root, "grad_compare.json", grad_compare={"target_path": target.run_dir,
                                                               "golden_path": golden.run_dir, "plots": False})
    overflow = run_sample(root, "overflow_check.json")
    analysis = run_sample(root, "analyze_overflow.json", analyze_overflow={"path": overflow.run_dir})
    free = run_sample(root, "free_benchmark.json")
    return root, {"grad": Path(grad.run_dir), "overflow": Path(overflow.run_dir),
                  "analysis": Path(analysis.run_dir), "free": Path(free.run_dir)}


def cells(table: DataTable, row: int):
    return [str(c) for c in table.get_row_at(row)]


@asynccontextmanager
async def result_view(runs, key: str, screen_type: type):
    """The app on the runs' root, the view of run ``key`` open and its result read: (pilot, screen)."""
    root, paths = runs
    async with viewing(paths[key], screen_type, root) as (pilot, screen):
        await wait_until(pilot, lambda: screen.result is not None)
        yield pilot, screen


@pilot_test
async def test_grad_compare_verdict_parameters_and_layers(runs):
    paths = runs[1]
    result = GradResult.read(paths["grad"])
    rank = result.ranks[0]
    first = rank.violations[0]
    async with result_view(runs, "grad", GradScreen) as (pilot, screen):
        verdict = rendered_text(screen.verdict_renderable, 200)
        assert "0.97 / 0.03 rule broken" in verdict and first.param in verdict
        assert "at step {}".format(first.step) in verdict
        table = screen.query_one("#params", DataTable)
        assert table.row_count == len(rank.params)
        broken = {v.param for v in rank.violations}
        row = cells(table, rank.params.index(first.param))
        assert row[0] == first.param and row[4].startswith(first.describe(result.threshold, result.drop))
        await pilot.press("s")  # lowest similarity first
        await wait_until(pilot, lambda: screen.by_similarity)
        assert cells(table, 0)[0] in broken
        layers = rendered_text(screen.layers_renderable, 120)
        assert "grad norm ratio target / golden per layer" in layers
        assert all(layer in layers for layer in rank.layers)
        step_before = screen.layer_step
        await pilot.press("right_square_bracket")
        assert screen.layer_step == (step_before + 1) % len(rank.layer_steps)


def test_ratio_bars_lean_the_way_the_ratio_goes():
    assert ratio_bar(1.0, 0.1, False).plain.strip() == "│"
    below, above = ratio_bar(0.8, 0.1, True).plain, ratio_bar(1.2, 0.1, True).plain
    assert below.index("█") < below.index("│") < above.index("█")
    assert ratio_bar(5.0, 0.1, True).plain.count("█") == 10  # capped at 4x the tolerance


@pilot_test
async def test_overflow_check_names_the_first_op_of_each_step_and_its_origin(runs):
    async with result_view(runs, "overflow", OverflowScreen) as (pilot, screen):
        steps = screen.query_one("#ovf-steps", DataTable)
        await wait_until(pilot, lambda: steps.row_count == 3)
        assert cells(steps, 0)[2] == "clean" and cells(steps, 1)[2] == "clean"
        flagged = cells(steps, 2)
        assert flagged[0] == "2" and flagged[5] == "Torch.exp.0.forward" and flagged[6] == "produced"
        assert steps.cursor_row == 2  # the first flagged step is under the cursor
        calls = screen.query_one("#ovf-calls", DataTable)
        assert cells(calls, 0)[1] == "Torch.exp.0.forward"
        assert "produced +inf from finite inputs" in cells(calls, 0)[3]
        assert "torch.exp(scaled)" in rendered_text(screen.detail_renderable, 100)
        verdict = rendered_text(screen.verdict_renderable, 200)
        assert verdict.startswith("overflow at step 2: Torch.exp.0.forward produced +inf")
        steps.move_cursor(row=0)
        await wait_until(pilot, lambda: calls.row_count == 0)
        assert "no call produced or passed on inf/NaN" in rendered_text(screen.detail_renderable, 100)


@pilot_test
async def test_analyze_overflow_replays_say_range_or_precision(runs):
    async with result_view(runs, "analysis", OverflowScreen) as (pilot, screen):
        table = screen.query_one("#ovf-steps", DataTable)
        row = cells(table, 0)
        assert row[2] == "Torch.exp.0.forward" and row[7] == "precision"
        assert "float16 range overflow" in rendered_text(screen.detail_renderable, 100)


@pilot_test
async def test_free_benchmark_lists_the_flagged_op_with_ratio_and_threshold(runs):
    async with result_view(runs, "free", FreeBenchmarkScreen) as (pilot, screen):
        table = screen.query_one("#fb-checks", DataTable)
        inconsistent = screen.result.inconsistent
        assert table.row_count == len(inconsistent) > 0
        step, ratio, threshold, name = cells(table, 0)[:4]
        assert name.startswith("Demo.naive_softmax") and float(ratio) > float(threshold)
        await pilot.press("a")  # every check
        await wait_until(pilot, lambda: table.row_count == len(screen.result.checks))
        assert len(screen.result.checks) > len(inconsistent)


@pilot_test
async def test_views_open_results_written_by_the_engines_writers(tmp_path):
    """The same views on results written directly by the engines' writers (no framework needed)."""
    paths = {"grad": make_grad_result(tmp_path / "grad"), "ovf": make_overflow_run(tmp_path / "ovf"),
             "fb": make_free_benchmark_run(tmp_path / "fb")}
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await open_view(pilot, paths["grad"], GradScreen)
        await wait_until(pilot, lambda: screen.result is not None)
        assert "blocks.1.fc.weight" in rendered_text(screen.verdict_renderable, 200)
        await pilot.press("escape")
        screen = await open_view(pilot, paths["ovf"], OverflowScreen)
        await wait_until(pilot, lambda: screen.query_one("#ovf-calls", DataTable).row_count == 2)
        await pilot.press("escape")
        screen = await open_view(pilot, paths["fb"], FreeBenchmarkScreen)
        await wait_until(pilot, lambda: screen.query_one("#fb-checks", DataTable).row_count == 3)


@pilot_test
async def test_at_80x24_tab_gives_the_detail_panes_room_to_read_and_scroll(tmp_path):
    """The detail panes of free_benchmark and grad compare showed 2 lines at 80x24 and could not scroll."""
    paths = {"grad": make_grad_result(tmp_path / "grad"), "fb": make_free_benchmark_run(tmp_path / "fb")}
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_view(pilot, paths["fb"], FreeBenchmarkScreen)
        await wait_until(pilot, lambda: screen.query_one("#fb-checks", DataTable).row_count == 3)
        detail = screen.query_one("#fb-detail")
        await pilot.press("tab")
        await wait_until(pilot, lambda: detail.has_focus, what="the detail pane focused")
        await pilot.pause()
        assert detail.size.height >= 8 and not screen.query_one("#fb-chart").display
        await pilot.press("escape")
        screen = await open_view(pilot, paths["grad"], GradScreen)
        await wait_until(pilot, lambda: screen.result is not None)
        layers = screen.query_one("#grad-layers")
        await pilot.press("tab")
        await wait_until(pilot, lambda: layers.has_focus, what="the layer pane focused")
        await pilot.pause()
        assert layers.size.height >= 8 and not screen.query_one("#grad-chart").display
