"""Home reads the run under its cursor ahead (``probe_tui.app.view_prefetch``), and the garbage collector's middle
generation runs once the user is quiet (``probe_tui.app.idle_gc``)."""

import gc

import pytest
from textual.widgets import DataTable

from probe_tui.app import idle_gc
from probe_tui.app.app import ProbeApp
from probe_tui.app.screens.acc_check import AccCheckScreen
from probe_tui.app.screens.home import HomeScreen
from probe_tui.app.view_prefetch import signature
from tests.app_pilot import pilot_test, wait_until
from tests.test_app_acc_check import make_acc_check_result


async def _home_on_the_result(pilot, app):
    home = await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned and app.screen,
                            what="home listed")
    table = home.query_one("#runs", DataTable)
    await wait_until(pilot, lambda: table.row_count == 1, what="the result listed")
    return home


@pilot_test
async def test_enter_opens_the_view_read_ahead_while_the_cursor_rested_on_its_row(tmp_path):
    """The result is read before enter: the screen pushed is the one built ahead, its first frame holds the
    result, and the key itself reads nothing (no detection, no read worker)."""
    result = make_acc_check_result(tmp_path / "checks" / "acc")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        home = await _home_on_the_result(pilot, app)
        await wait_until(pilot, lambda: home.prefetch.reads == 1, what="the row read ahead")
        ahead = home.prefetch.current
        assert ahead is not None and ahead.path == result and ahead.kind == "acc-check"
        assert ahead.loaded is not None and ahead.loaded.error == ""
        started = []
        original = app.run_worker

        def counted(*args, **kwargs):
            started.append(kwargs.get("group"))
            return original(*args, **kwargs)

        app.run_worker = counted  # type: ignore[method-assign]
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, AccCheckScreen), what="the view open")
        screen = app.screen
        assert screen is ahead.screen
        table = screen.query_one("#ac-apis", DataTable)
        assert table.row_count == 5  # in the screen as it opened
        assert "open-path" not in started and "open-view" not in started
        assert home.prefetch.current is None  # a screen opens once


@pilot_test
async def test_a_folder_changed_since_it_was_read_ahead_opens_as_usual(tmp_path):
    """A file added to the result after the read ahead: enter does not show what was read, it opens the view
    the usual way (detected and read again)."""
    result = make_acc_check_result(tmp_path / "checks" / "acc")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        home = await _home_on_the_result(pilot, app)
        await wait_until(pilot, lambda: home.prefetch.reads == 1, what="the row read ahead")
        ahead = home.prefetch.current
        before = signature(result)
        (result / "later.txt").write_text("written after the read ahead")
        assert signature(result) != before
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, AccCheckScreen), what="the view open")
        assert app.screen is not ahead.screen
        table = app.screen.query_one("#ac-apis", DataTable)
        await wait_until(pilot, lambda: table.row_count == 5, what="the result read again")


@pilot_test
async def test_a_run_still_being_written_is_not_read_ahead(tmp_path):
    make_acc_check_result(tmp_path / "checks" / "acc")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        home = await _home_on_the_result(pilot, app)
        await wait_until(pilot, lambda: home.prefetch.reads == 1, what="the row read ahead")
        home.prefetch.forget()
        home.prefetch.rest(tmp_path / "checks" / "acc", live=True)
        await pilot.pause(0.4)
        assert home.prefetch.current is None and home.prefetch.reads == 1


@pytest.fixture
def no_automatic_collections():
    """Only the collections the test asks for (the counts it checks are not moved by Python's own)."""
    saved = gc.get_threshold()
    gc.set_threshold(10_000_000, 1_000, 1_000)
    yield
    gc.set_threshold(*saved)


@pytest.mark.usefixtures("no_automatic_collections")
def test_the_idle_collector_collects_at_pythons_rate_once_the_user_is_quiet():
    """A middle collection once ten young ones ran (Python's rate), at a short quiet; a full one once ten middle
    ones ran, at a quiet of a second (or at a short one after FULL_ANYWAY)."""
    now = [100.0]
    collector = idle_gc.IdleCollector(clock=lambda: now[0])
    gc.collect()
    for _ in range(idle_gc.MIDDLE_AFTER - 1):
        gc.collect(0)
    collector.input_seen()
    now[0] += idle_gc.QUIET_S
    assert collector.tick() is None  # not yet at Python's rate
    gc.collect(0)
    now[0] -= idle_gc.QUIET_S / 2
    assert collector.tick() is None  # the user is typing
    now[0] += idle_gc.QUIET_S
    assert collector.tick(busy=True) is None
    assert collector.tick() == 1
    assert gc.get_count()[1] == 0 and gc.get_count()[2] == 1
    assert collector.next_tick() is None  # no full collection pending
    for _ in range(idle_gc.FULL_EVERY - 1):
        gc.collect(1)
    wait = collector.next_tick()  # a full collection is pending: it waits for a longer quiet
    assert wait is not None and 0 < wait <= idle_gc.FULL_QUIET_S - idle_gc.QUIET_S
    assert collector.tick() is None
    now[0] += wait
    assert collector.tick() == 2
    assert gc.get_count()[2] == 0 and collector.next_tick() is None
    for _ in range(idle_gc.FULL_ANYWAY):
        gc.collect(1)
    collector.input_seen()
    now[0] += idle_gc.QUIET_S
    assert collector.tick() == 2  # never a second of quiet: the full one runs anyway
    assert collector.collections == 3


@pilot_test
async def test_the_app_collects_once_keys_stop(tmp_path):
    """A key, then quiet: the app runs the middle collection itself (not the key that crosses the threshold)."""
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        await pilot.pause(0.3)
        before = app.idle_gc.collections
        for _ in range(idle_gc.MIDDLE_AFTER):
            gc.collect(0)  # as many young collections as make a middle one due
        await pilot.press("down")
        await wait_until(pilot, lambda: app.idle_gc.collections > before, timeout=5, what="a collection once quiet")
        assert gc.get_count()[1] == 0


@pilot_test
async def test_a_read_ahead_replaced_by_another_cancels_no_worker(tmp_path, monkeypatch):
    """The cursor moves on while a row is being read ahead: the later read ahead wins, and the earlier worker
    finishes rather than being cancelled (a cancelled worker fails whoever waits for the app's workers)."""
    import time as time_module

    from probe_tui.app import view_prefetch

    first = make_acc_check_result(tmp_path / "checks" / "first")
    second = make_acc_check_result(tmp_path / "checks" / "second")
    slow_detect = view_prefetch.detect_kind

    def detect(path):
        time_module.sleep(0.3)
        return slow_detect(path)

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        home = await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned
                                and app.screen, what="home listed")
        await app.workers.wait_for_complete()
        monkeypatch.setattr(view_prefetch, "detect_kind", detect)
        home.prefetch.forget()
        home.prefetch.rest(first)
        await wait_until(pilot, lambda: home.prefetch.current is not None, what="the first read ahead started")
        home.prefetch.rest(second)
        await wait_until(pilot, lambda: home.prefetch.current is not None and home.prefetch.current.path == second,
                         what="the second read ahead started")
        await app.workers.wait_for_complete()  # raised WorkerCancelled with exclusive workers
        await wait_until(pilot, lambda: home.prefetch.current is not None and home.prefetch.current.ready(),
                         what="the second row read")
        assert home.prefetch.current.path == second


def test_the_idle_collector_waits_for_running_workers_but_not_for_good():
    now = [10.0]
    collector = idle_gc.IdleCollector(clock=lambda: now[0])
    collector.input_seen()
    now[0] += idle_gc.QUIET_S
    assert collector.waits_for_workers(busy=True)
    assert not collector.waits_for_workers(busy=False)
    now[0] += idle_gc.MAX_WAIT_S
    assert not collector.waits_for_workers(busy=True)  # a live view's worker runs for good
