"""The views of a multi-rank run: the rank selector (R picks, < > step, remembered per run, absent on one rank),
the compare browser naming the rank that diverged first, the dump browser of one rank, and the live monitor's
min/mean/max across ranks with its drill-down to one rank and alerts that name their rank.

Results are written by the engines' own writers (synthetic, no framework) except the last tests, which run the
demo as two ranks of one run (RANK/WORLD_SIZE/PROBE_TUI_RUN_ID, one process per rank)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, OptionList

from probe_tui.app.app import ProbeApp
from probe_tui.app.screens.compare import CompareScreen
from probe_tui.app.screens.dump import DumpScreen
from probe_tui.app.screens.grad import GradScreen
from probe_tui.app.screens.home import HomeScreen
from probe_tui.app.screens.monitor import MonitorScreen
from probe_tui.app.screens.overflow import OverflowScreen
from probe_tui.app.screens.rank_picker import RankPicker
from probe_tui.app.widgets.rank_bar import RankBar
from probe_tui.app.widgets.result_tree import ResultTree
from tests.app_pilot import (
    make_compare_result,
    make_grad_result,
    make_overflow_run,
    make_rank_compare_result,
    make_rank_metrics,
    open_view,
    pilot_test,
    viewing,
    wait_until,
    write_dump,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_configs"


def bar(screen) -> str:
    widget = screen.query_one(RankBar)
    return widget.text.plain if widget.has_class("multi") else ""


def picker_lines(app) -> list:
    listing = app.screen.query_one(OptionList)
    return [str(listing.get_option_at_index(i).prompt) for i in range(listing.option_count)]


def footer_keys(screen) -> set:
    return {binding.description for _, binding, enabled, _ in screen.active_bindings.values()
            if enabled and binding.show}


def tree_lines(tree) -> list:
    return [str(node.label) for node in tree.root.children]


# ---- the compare browser -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def three_rank_result(tmp_path_factory):
    """Ranks 0-2 compared; rank 1's block 1 softmax is doubled."""
    return make_rank_compare_result(tmp_path_factory.mktemp("ranks"), ranks=3, faulty=1)


@pilot_test
async def test_compare_names_the_rank_that_diverged_first_and_shows_one_rank(three_rank_result):
    async with viewing(three_rank_result, CompareScreen, size=(80, 24)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.divergence_all is not None and "diverged first" in bar(screen),
                         what="the ranking read")
        assert bar(screen).startswith("every rank (3: 0-2) · rank 1 diverged first: Functional.softmax.1.forward")
        assert "Rank" in footer_keys(screen)
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, RankPicker))
        lines = picker_lines(pilot.app)
        assert lines[0].startswith("every rank")
        assert lines[1] == "rank 0  ✓ no divergence"
        assert lines[2].startswith("rank 1  ◀ diverged first: Functional.softmax.1.forward · step 0")
        assert lines[3] == "rank 2  ✓ no divergence"
        await pilot.press("2", "enter")  # typing the rank moves to it
        await wait_until(pilot, lambda: screen.view is not None and screen.view.rank == 2, what="rank 2's rows")
        ranks = screen.data.columns["rank"][screen.view.rows]
        assert len(ranks) and set(ranks.tolist()) == {2}
        assert "rank 2 of 3" in bar(screen) and "(rank 1 diverged first)" in bar(screen)
        assert "rank 2" in str(screen.query_one("#results-status").render())
        await pilot.press("3")
        await wait_until(pilot, lambda: screen.tree_ready)
        tree = screen.query_one("#tree", ResultTree)
        assert tree_lines(tree) == ["rank 2 · step 0  3 top-level nodes"]
        await pilot.press("less_than_sign")  # back to rank 1: its piece carries the mark
        await wait_until(pilot, lambda: screen.rank == 1 and tree_lines(tree)[0].startswith("rank 1"))
        assert tree_lines(tree) == ["rank 1 · step 0  3 top-level nodes  ◀ diverged first: "
                                    "Functional.softmax.1.forward"]
        await pilot.press("2")  # the ranking of rank 1 only
        await wait_until(pilot, lambda: screen.divergence is not None and len(screen.divergence["rank"])
                         and set(screen.divergence["rank"].tolist()) == {1})
        assert screen.divergence["record"][0] == "Functional.softmax.1.forward"
        await pilot.press("greater_than_sign", "greater_than_sign")  # rank 2, then every rank again
        await wait_until(pilot, lambda: screen.rank is None and screen.view.rank is None)
        assert len(screen.view) == screen.data.n_rows
        await pilot.press("less_than_sign")  # from every rank, < goes to the last rank
        await wait_until(pilot, lambda: screen.view.rank == 2)
        # the choice is remembered for this result: open it again
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen))
        again = await open_view(pilot, three_rank_result, CompareScreen)
        await wait_until(pilot, lambda: again.view is not None and again.view.rank == 2, what="rank 2 remembered")
        assert "rank 2 of 3" in bar(again)


@pilot_test
async def test_a_one_rank_result_has_no_rank_selector(tmp_path):
    result = make_compare_result(tmp_path)
    async with viewing(result, CompareScreen, size=(80, 24)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.divergence_all is not None)
        assert bar(screen) == "" and not screen.query_one(RankBar).display
        assert "Rank" not in footer_keys(screen) and "Filter" in footer_keys(screen)
        await pilot.press("R", "greater_than_sign")
        await pilot.pause(0.2)
        assert pilot.app.screen is screen and screen.rank is None


# ---- the dump browser ----------------------------------------------------------------------------------------------
@pilot_test
async def test_the_dump_browser_shows_every_rank_or_one(tmp_path):
    run = tmp_path / "run"
    for rank in (0, 1):
        write_dump(run / "rank{}".format(rank), golden=rank == 0)
    async with viewing(run, DumpScreen, root=tmp_path, size=(80, 24)) as (pilot, screen):
        tree = screen.dump_tree
        await wait_until(pilot, lambda: screen.index is not None and bar(screen))
        step = tree.root.children[0]
        assert [str(n.label).split("  ")[0] for n in step.children] == ["rank 0", "rank 1"]
        assert bar(screen).startswith("every rank (2: 0-1)")
        await pilot.press("greater_than_sign")
        await wait_until(pilot, lambda: screen.rank == 0)
        await wait_until(pilot, lambda: [str(n.label).split("  ")[0] for n in tree.root.children[0].children]
                         == ["rank 0"])
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, RankPicker))
        assert [line.split("  ")[0] for line in picker_lines(pilot.app)] == ["every rank", "rank 0", "rank 1"]
        await pilot.press("1", "enter")
        await wait_until(pilot, lambda: [str(n.label).split("  ")[0] for n in tree.root.children[0].children]
                         == ["rank 1"], what="rank 1 alone")
        assert bar(screen).startswith("rank 1 of 2 (0-1)")
        await wait_until(pilot, lambda: "records" in str(tree.root.children[0].children[0].label),
                         what="rank 1 read and opened")
        # a search reads the rank shown only
        await pilot.press("slash", *"add", "enter")
        await wait_until(pilot, lambda: screen.keep is not None, what="the search done")
        assert set(screen.keep) == {(1, 0)} and screen.matches == 1  # Tensor.add.0 runs on rank 1's target only


# ---- overflow check and grad compare ------------------------------------------------------------------------------
@pilot_test
async def test_the_overflow_view_shows_one_ranks_steps_and_remembers_it(tmp_path):
    run = tmp_path / "run"
    make_overflow_run(run, rank=0, clean=True)
    make_overflow_run(run, rank=1)
    async with viewing(run, OverflowScreen, root=tmp_path, size=(80, 24)) as (pilot, screen):
        steps = screen.query_one("#ovf-steps", DataTable)
        await wait_until(pilot, lambda: screen.result is not None and steps.row_count == 6)
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, RankPicker))
        assert picker_lines(pilot.app)[1:] == ["rank 0  clean", "rank 1  first flagged at step 2: "
                                               "Torch.exp.0.forward (1 flagged step)"]
        await pilot.press("1", "enter")
        await wait_until(pilot, lambda: steps.row_count == 3)
        assert {str(steps.get_row_at(i)[1]) for i in range(3)} == {"1"}
        assert steps.cursor_row == 2 and screen.shown_calls[0]["name"] == "Torch.exp.0.forward"
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, HomeScreen))
        again = await open_view(pilot, run, OverflowScreen)
        steps = again.query_one("#ovf-steps", DataTable)
        await wait_until(pilot, lambda: again.result is not None and steps.row_count == 3, what="rank 1 remembered")


@pilot_test
async def test_grad_compare_steps_through_its_ranks_without_an_every_rank_mode(tmp_path):
    result = make_grad_result(tmp_path / "grad")
    shutil.copytree(result / "rank0", result / "rank3")
    async with viewing(result, GradScreen, root=tmp_path, size=(80, 24)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.result is not None and bar(screen))
        assert screen.rank == 0 and bar(screen).startswith("rank 0 of 2 (0, 3)")
        await pilot.press("greater_than_sign")
        await wait_until(pilot, lambda: screen.rank == 3 and screen.rank_result.rank == 3)
        await pilot.press("r")  # the grad view's own next-rank key: wraps to rank 0, never "every rank"
        await wait_until(pilot, lambda: screen.rank == 0)
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, RankPicker))
        assert [line.split("  ")[0] for line in picker_lines(pilot.app)] == ["rank 0", "rank 3"]


# ---- the live monitor ----------------------------------------------------------------------------------------------
@pilot_test
async def test_the_monitor_charts_min_mean_max_across_ranks_and_drills_down(tmp_path):
    run = make_rank_metrics(tmp_path / "run", ranks=3, steps=6, spike_rank=2, spike_at=4)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_view(pilot, run, MonitorScreen)
        loss = "train/loss/value"
        await wait_until(pilot, lambda: loss in screen.data and screen.last_step == 5 and screen.shown_alerts,
                         what="every rank read")
        series = screen.data[loss]
        assert list(series.low) == pytest.approx([6.9 - 0.05 * n for n in range(6)])
        assert list(series.values) == pytest.approx([7.9 - 0.05 * n for n in range(6)])
        assert list(series.high) == pytest.approx([8.9 - 0.05 * n for n in range(6)])
        assert set(series.low_rank.tolist()) == {0} and set(series.high_rank.tolist()) == {2}
        assert "loss/value @5 min 6.65 (r0) · mean 7.65 · max 8.65 (r2)" in bar(screen)
        # the alert names its rank
        table = screen.query_one("#alerts", DataTable)
        assert [str(c.label) for c in table.columns.values()][:3] == ["first", "rank", "module"]
        assert table.row_count == 1 and [str(c) for c in table.get_row_at(0)[:3]] == ["4", "2", "blocks.1.fc"]
        # drill down to rank 1: its own values, no band
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, RankPicker))
        lines = picker_lines(pilot.app)
        assert lines[1:] == ["rank 0  loss/value @5 = 6.65", "rank 1  loss/value @5 = 7.65",
                             "rank 2  loss/value @5 = 8.65  1 alert"]
        await pilot.press("1", "enter")
        await wait_until(pilot, lambda: screen.rank == 1 and loss in screen.data and screen.data[loss].low is None,
                         what="rank 1 charted")
        assert list(screen.data[loss].values) == pytest.approx([7.9 - 0.05 * n for n in range(6)])
        assert bar(screen).startswith("rank 1 of 3 (0-2) · loss/value @5 7.65")
        # enter on rank 2's alert drills down to rank 2
        await pilot.press("a", "enter")
        await wait_until(pilot, lambda: screen.rank == 2 and loss in screen.data
                         and screen.data[loss].values[-1] == pytest.approx(8.65), what="rank 2 charted")
        assert screen.mark_step == 4
        await pilot.press("greater_than_sign")  # after the last rank: every rank again
        await wait_until(pilot, lambda: screen.rank is None and loss in screen.data
                         and screen.data[loss].low is not None)


def test_across_ranks_leaves_non_finite_values_out_and_counts_them():
    import numpy as np

    from probe_tui.app.data.monitor_feed import SeriesData, across_ranks

    per_rank = {0: SeriesData("k", np.array([0, 1, 2]), np.array([1.0, 2.0, 3.0])),
                1: SeriesData("k", np.array([1, 2]), np.array([np.nan, 5.0])),
                3: SeriesData("k", np.array([2]), np.array([-1.0]))}
    s = across_ranks("k", per_rank)
    assert list(s.steps) == [0, 1, 2]
    assert list(s.low) == [1.0, 2.0, -1.0] and list(s.high) == [1.0, 2.0, 5.0]
    assert list(s.values) == pytest.approx([1.0, 2.0, 7.0 / 3])
    assert list(s.low_rank) == [0, 0, 3] and list(s.high_rank) == [0, 0, 1]
    assert list(s.count) == [1, 2, 3] and list(s.bad) == [0, 1, 0]


# ---- real runs: the demo as two ranks of one run ------------------------------------------------------------------
def run_ranks(root: Path, configs: list, run_id: str) -> None:
    """``python -m probe_tui --run`` once per rank (config ``configs[r]``, in ``root``), as a launcher would start
    them; each rank writes ``<dump_path>/<run_id>/rank<R>``."""
    procs = []
    for rank, config in enumerate(configs):
        path = root / "rank{}.json".format(rank)
        path.write_text(json.dumps(config), encoding="utf-8")
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(len(configs)),
                   PROBE_TUI_RUN_ID=run_id, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
        log = open(root / "rank{}.log".format(rank), "w")
        procs.append((subprocess.Popen([sys.executable, "-m", "probe_tui", "--run", str(path)], cwd=root, env=env,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    for proc, log in procs:
        try:
            proc.wait(timeout=600)
        finally:
            log.close()
    for rank, config in enumerate(configs):
        assert (Path(config["dump_path"]) / run_id / "rank{}".format(rank)).is_dir(), \
            (root / "rank{}.log".format(rank)).read_text()


def demo_config(sample: str, dump_path: Path, steps: int = 2) -> dict:
    config = json.loads((SAMPLES / sample).read_text(encoding="utf-8"))
    config["dump_path"] = str(dump_path)
    config["target"]["demo"]["steps"] = steps
    return config


@pytest.mark.slow
@pilot_test
async def test_a_two_rank_demo_run_compared_names_rank_1_first(tmp_path):
    torch = pytest.importorskip("torch")  # noqa: F841
    dumps = tmp_path / "dumps"
    # rank 0 healthy, rank 1 with the low-precision softmax: one run folder
    run_ranks(tmp_path, [demo_config("statistics.json", dumps), demo_config("statistics_lowp.json", dumps)], "tp2")
    run = dumps / "tp2"
    golden = tmp_path / "golden"
    for rank in (0, 1):  # the demo is seeded alike on both ranks: rank 0's dump is every rank's golden
        shutil.copytree(run / "rank0", golden / "rank{}".format(rank))
    from engines.compare.engine import run_compare

    result = tmp_path / "result"
    run_compare({"task": "compare", "compare": {"target_path": str(run), "golden_path": str(golden),
                                                "formats": ["hdf5"], "output_path": str(result)}}, None)
    async with viewing(result, CompareScreen, root=tmp_path, size=(80, 24)) as (pilot, screen):
        await wait_until(pilot, lambda: "diverged first" in bar(screen), what="the ranking read")
        assert "rank 1 diverged first" in bar(screen)
        await pilot.press("R")
        await wait_until(pilot, lambda: isinstance(pilot.app.screen, RankPicker))
        lines = picker_lines(pilot.app)
        assert lines[1] == "rank 0  ✓ no divergence" and lines[2].startswith("rank 1  ◀ diverged first: ")
        await pilot.press("escape")
    # the run's dump browser: both ranks, one at a time
    async with viewing(run, DumpScreen, root=tmp_path, size=(80, 24)) as (pilot, screen):
        await wait_until(pilot, lambda: bar(screen).startswith("every rank (2: 0-1)"))
        await pilot.press("less_than_sign")
        await wait_until(pilot, lambda: [str(n.label).split("  ")[0] for n in screen.dump_tree.root.children[0]
                                         .children] == ["rank 1"])


@pytest.mark.slow
def test_a_two_rank_monitor_run_names_the_rank_of_its_alert(tmp_path):
    pytest.importorskip("torch")
    dumps = tmp_path / "dumps"
    healthy = demo_config("monitor.json", dumps, steps=5)
    healthy["target"]["demo"].pop("faults")
    run_ranks(tmp_path, [healthy, demo_config("monitor.json", dumps, steps=5)], "mon2")
    logs = [(tmp_path / "rank{}.log".format(r)).read_text() for r in (0, 1)]
    assert "alert at step 3 on rank 1:" in logs[1] and "alert at step" not in logs[0]
    from engines.monitor.reader import open_metrics

    with open_metrics(dumps / "mon2", rank=1) as metrics:
        assert {a["rank"] for a in metrics.alerts()} == {1}  # the store's alerts name the rank that wrote them
    from probe_tui.app.data.monitor_feed import MonitorFeed

    snapshots = []
    feed = MonitorFeed(dumps / "mon2", snapshots.append)
    feed.start()
    feed.schedule()
    try:
        import time

        deadline = time.monotonic() + 60
        while not any(s.new_alerts for s in snapshots) and time.monotonic() < deadline:
            feed.schedule()
            time.sleep(0.1)
    finally:
        feed.stop()
        feed.join(10)
    found = [a for s in snapshots for a in s.new_alerts]
    assert found and {a["rank"] for a in found} == {1} and {a["step"] for a in found} == {3}
    last = [s for s in snapshots if s.data][-1]
    assert last.ranks == [0, 1] and last.rank is None
    loss = last.data["train/loss/value"]
    assert loss.low is not None and list(loss.count) == [2] * len(loss.steps)
