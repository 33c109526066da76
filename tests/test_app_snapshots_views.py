"""SVG snapshots of the views (compare browser, dump browser, live monitor, results views) at 80x24 and 120x40,
on results written by the engines from fixed data (no framework, no clock).

Regenerate after a deliberate change of looks with ``pytest tests/test_app_snapshots_views.py --snapshot-update``
and look at the report before committing the SVGs.
"""

from pathlib import Path

import pytest

from probe_tui.app.app import ProbeApp
from tests.app_pilot import (
    make_compare_result,
    make_free_benchmark_run,
    make_grad_result,
    make_metrics,
    make_overflow_run,
    make_rank_compare_result,
    make_rank_metrics,
    wait_until,
)
from tests.test_app_snapshots import table_counts_current

SIZES = {"80x24": (80, 24), "120x40": (120, 40)}
MSPROBE = Path(__file__).resolve().parent / "data" / "msprobe" / "real"


async def settle(pilot):
    """Let workers finish and timers fire once more, so the frame is the final one."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause(0.3)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    # the "→ more columns" hint needs the table laid out first (a loaded machine draws that a frame later)
    await wait_until(pilot, lambda: table_counts_current(pilot.app), what="the tables' count lines up to date")


async def open_on(pilot, path: Path, ready):
    from probe_tui.app.screens.home import HomeScreen

    await wait_until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen) and pilot.app.screen.scanned)
    pilot.app.open_path(path)
    await wait_until(pilot, lambda: ready(pilot.app.screen), what="the view ready")
    await settle(pilot)
    return pilot.app.screen


def snap_app(snap_compare, root: Path, size: str, run_before) -> bool:
    """The app on ``root`` at ``size``, after ``run_before``, against its stored snapshot."""
    return snap_compare(ProbeApp(root, root_label="~/exp"), terminal_size=SIZES[size], run_before=run_before)


def snap_view(snap_compare, root: Path, size: str, path: Path, ready) -> bool:
    """The view of ``path`` once ``ready(screen)``, against its stored snapshot."""

    async def run_before(pilot):
        await open_on(pilot, path, ready)

    return snap_app(snap_compare, root, size, run_before)


def compare_ready(screen) -> bool:
    return getattr(screen, "divergence", None) is not None and getattr(screen, "detail_renderable", None) is not None


def snap_compare_key(snap_compare, compare_result: Path, size: str, key: str, shown) -> bool:
    """The compare browser after ``key``, once ``shown(screen)``, against its stored snapshot."""

    async def run_before(pilot):
        screen = await open_on(pilot, compare_result, compare_ready)
        await pilot.press(key)
        await wait_until(pilot, lambda: shown(screen))
        await settle(pilot)

    return snap_app(snap_compare, compare_result.parent, size, run_before)


@pytest.fixture(scope="module")
def compare_result(tmp_path_factory):
    return make_compare_result(tmp_path_factory.mktemp("cmp"))


@pytest.mark.parametrize("size", SIZES)
def test_compare_results(snap_compare, compare_result, size):
    # "n": the first error, its detail
    assert snap_compare_key(snap_compare, compare_result, size, "n", lambda screen: (
        screen.detail_renderable is not None and screen._detail_key == ("row", screen.current_row())))


@pytest.mark.parametrize("size", SIZES)
def test_compare_first_divergence(snap_compare, compare_result, size):
    assert snap_compare_key(snap_compare, compare_result, size, "2",
                            lambda screen: screen._detail_key == ("suspect", 0))


@pytest.mark.parametrize("size", SIZES)
def test_compare_model_tree(snap_compare, compare_result, size):
    async def run_before(pilot):
        screen = await open_on(pilot, compare_result, compare_ready)
        await pilot.press("3")
        await wait_until(pilot, lambda: screen.tree_ready)
        tree = screen.query_one("#tree")
        block1 = tree.root.children[0].children[1]
        tree.move_cursor(block1)
        await pilot.press("enter")
        await wait_until(pilot, lambda: len(block1.children) == 2)
        await wait_until(pilot, lambda: screen._detail_key == ("node", block1.data.node))
        await settle(pilot)

    assert snap_app(snap_compare, compare_result.parent, size, run_before)


def test_compare_of_three_ranks_names_the_first(snap_compare, tmp_path):
    """80x24: the rank bar over a compare of ranks 0-2 where rank 1 diverges."""
    result = make_rank_compare_result(tmp_path, ranks=3, faulty=1)

    async def run_before(pilot):
        await open_on(pilot, result, lambda s: compare_ready(s) and getattr(s, "divergence_all", None) is not None)

    assert snap_app(snap_compare, tmp_path, "80x24", run_before)


def test_live_monitor_across_four_ranks(snap_compare, tmp_path):
    """80x24: min/mean/max of the loss over four ranks, an alert of rank 2 in the list."""
    run = make_rank_metrics(tmp_path / "monitor_run", ranks=4, steps=24, spike_rank=2, spike_at=16)

    async def run_before(pilot):
        await open_on(pilot, run, lambda s: getattr(s, "last_step", None) == 23
                      and getattr(s, "shown_alerts", 0) == 1 and getattr(s, "multi_rank", False))

    assert snap_app(snap_compare, tmp_path, "80x24", run_before)


@pytest.mark.parametrize("size", SIZES)
def test_dump_browser_tensor(snap_compare, size):
    path = MSPROBE / "tensor_mix"

    async def run_before(pilot):
        screen = await open_on(pilot, path, lambda s: getattr(s, "index", None) is not None)
        tree = screen.dump_tree
        await wait_until(pilot, lambda: tree.last_line >= 4)
        tree.move_cursor_to_line(2)  # the first module
        await pilot.press("enter", "down", "down")  # its parameters.weight
        await wait_until(pilot, lambda: screen._preview is not None, what="the tensor values")
        await settle(pilot)

    assert snap_app(snap_compare, path.parent, size, run_before)


@pytest.mark.parametrize("size", SIZES)
def test_live_monitor_finished_run(snap_compare, tmp_path, size):
    run = make_metrics(tmp_path / "monitor_run", steps=24, spike_at=16)

    async def run_before(pilot):
        screen = await open_on(pilot, run, lambda s: getattr(s, "last_step", None) == 23
                               and getattr(s, "shown_alerts", 0) == 1)
        await settle(pilot)
        assert screen.status == "finished"

    assert snap_app(snap_compare, tmp_path, size, run_before)


@pytest.mark.parametrize("size", SIZES)
def test_grad_compare(snap_compare, tmp_path, size):
    path = make_grad_result(tmp_path / "grad_result")
    assert snap_view(snap_compare, tmp_path, size, path, lambda s: getattr(s, "result", None) is not None)


@pytest.mark.parametrize("size", SIZES)
def test_overflow_check(snap_compare, tmp_path, size):
    path = make_overflow_run(tmp_path / "overflow_run")
    assert snap_view(snap_compare, tmp_path, size, path,
                     lambda s: getattr(s, "result", None) is not None and s.shown_calls)


@pytest.mark.parametrize("size", SIZES)
def test_free_benchmark(snap_compare, tmp_path, size):
    path = make_free_benchmark_run(tmp_path / "free_benchmark_run")
    assert snap_view(snap_compare, tmp_path, size, path, lambda s: getattr(s, "result", None) is not None)
