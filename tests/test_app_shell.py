"""The app's frame: one action registry feeding bindings, footer, help screen, command palette and docs."""

import asyncio
import functools
from pathlib import Path

from textual.command import CommandPalette
from textual.widgets import Footer, Static

from probe_tui.app.actions import ACTIONS, SCOPES, action_by_id, actions_for, bindings_for, key_label
from probe_tui.app.app import ProbeApp, resolve_start
from probe_tui.app.commands import palette_actions
from probe_tui.app.keys_doc import END, START, keys_markdown
from probe_tui.app.screens.acc_check import AccCheckScreen
from probe_tui.app.screens.builder import BuilderScreen
from probe_tui.app.screens.compare import CompareScreen
from probe_tui.app.screens.diagnose import DiagnoseScreen
from probe_tui.app.screens.dump import DumpScreen
from probe_tui.app.screens.free_benchmark import FreeBenchmarkScreen
from probe_tui.app.screens.grad import GradScreen
from probe_tui.app.screens.help import HelpScreen, help_tables
from probe_tui.app.screens.home import HomeScreen
from probe_tui.app.screens.monitor import MonitorScreen
from probe_tui.app.screens.online_check import OnlineCheckScreen
from probe_tui.app.screens.overflow import OverflowScreen
from probe_tui.app.screens.rank_picker import RankPicker
from probe_tui.app.screens.run import RunScreen
from probe_tui.app.screens.summary import RunSummaryScreen
from probe_tui.app.widgets.find_table import FindTable
from tests.app_pilot import wait_until

ROOT = Path(__file__).resolve().parents[1]
SCREENS = {"app": ProbeApp, "home": HomeScreen, "builder": BuilderScreen, "run": RunScreen,
           "summary": RunSummaryScreen, "compare": CompareScreen, "dump": DumpScreen, "monitor": MonitorScreen,
           "grad": GradScreen, "overflow": OverflowScreen, "freebench": FreeBenchmarkScreen, "ranks": RankPicker,
           "help": HelpScreen, "diagnose": DiagnoseScreen, "table": FindTable, "acccheck": AccCheckScreen,
           "onlinecheck": OnlineCheckScreen}


def pilot_test(coro_fn):
    @functools.wraps(coro_fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(coro_fn(*args, **kwargs))

    return wrapper


def test_binding_ids_are_unique_and_name_their_scope():
    ids = [a.id for a in ACTIONS]
    assert len(ids) == len(set(ids))
    for action in ACTIONS:
        assert action.scope in SCOPES
        assert action.id.split(".")[0] == action.scope
        assert action.description and action.help


def test_every_action_has_a_method_on_its_screen():
    for action in ACTIONS:
        namespace, _, name = action.action.split("(")[0].rpartition(".")
        owner = ProbeApp if namespace == "app" or action.scope == "app" else SCREENS[action.scope]
        assert hasattr(owner, f"action_{name}"), action.id


def test_no_key_means_two_things_on_one_screen():
    for scope in SCOPES:
        seen = {}
        for action in actions_for(scope):
            for key in action.key_list:
                assert key not in seen, f"{scope}: {key} is bound to {seen.get(key)} and {action.id}"
                seen[key] = action.id


def test_screens_take_their_bindings_from_the_registry():
    for scope, owner in SCREENS.items():
        ids = {b.id for b in owner.BINDINGS}
        assert ids == {a.id for a in actions_for(scope)}, scope
    assert [b.key for b in bindings_for("builder")][:1] == ["ctrl+s"]


def test_keys_are_shown_as_people_type_them():
    assert key_label("ctrl+s") == "^s" and key_label("question_mark") == "?" and key_label("escape") == "esc"


def test_help_lists_the_screen_then_the_app():
    tables = help_tables("builder")
    assert [str(t.title) for t in tables] == ["Config builder", "Everywhere"]
    from probe_tui.app.actions import actions_by_group

    groups = actions_by_group("builder")
    assert tables[0].row_count == len(actions_for("builder")) + len(groups)  # a heading row per group


def test_docs_app_md_has_the_current_keys():
    text = (ROOT / "docs" / "APP.md").read_text(encoding="utf-8")
    generated = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert generated == keys_markdown().strip(), "run: python -m probe_tui.app.keys_doc"


def test_start_paths_resolve_to_a_folder_and_what_to_open(tmp_path):
    assert resolve_start(None)[1] is None
    run = tmp_path / "dump" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    assert resolve_start(str(run)) == (run.parent.resolve(), run.resolve())
    config = tmp_path / "c.json"
    config.write_text("{}")
    assert resolve_start(str(config)) == (tmp_path.resolve(), config.resolve())
    assert resolve_start(str(tmp_path)) == (tmp_path.resolve(), None)
    try:
        resolve_start(str(tmp_path / "missing"))
    except FileNotFoundError as exc:
        assert "missing: no such file or folder" in str(exc)
    else:
        raise AssertionError("a missing path must be refused")


@pilot_test
async def test_help_screen_is_generated_for_the_current_screen(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        await pilot.press("f1")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = "\n".join(str(s.render()) for s in app.screen.query(Static))
        assert "Home (runs and configs)" in text or app.screen.scope == "home"
        assert app.screen.scope == "home"
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))


@pilot_test
async def test_palette_offers_the_screens_actions_and_runs_them(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        offered = {a.id for a in palette_actions(app.screen)}
        assert {"home.new", "home.refresh", "app.help"} <= offered
        assert "builder.save" not in offered
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"help")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.screen.scope == "home"


@pilot_test
async def test_the_footer_shows_the_keys_of_the_screen(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.is_mounted)
        footer = app.screen.query_one(Footer)
        keys = {b.binding.id for b in app.screen.active_bindings.values() if b.binding.show}
        assert {"home.new", "home.open", "home.refresh"} <= keys
        assert footer.display


@pilot_test
async def test_narrow_terminals_get_the_narrow_class(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.has_class("narrow"))
        await pilot.resize_terminal(120, 40)
        await wait_until(pilot, lambda: not app.has_class("narrow"))


def test_action_lookup_by_id():
    assert action_by_id("run.stop").keys.startswith("s")


def test_a_user_keymap_names_binding_ids_and_unknown_ids_are_reported(tmp_path):
    from probe_tui.app.actions import load_keymap

    path = tmp_path / "keymap.json"
    path.write_text('{"home.refresh": "z", "home.nwe": "a", "run.stop": ""}')
    keymap, problems = load_keymap(path)
    assert keymap == {"home.refresh": "z"}
    assert any("unknown binding id 'home.nwe' (did you mean 'home.new'?)" in p for p in problems)
    assert any("run.stop: keys must be a non-empty string" in p for p in problems)
    assert load_keymap(tmp_path / "none.json") == ({}, [])


@pilot_test
async def test_a_user_keymap_rebinds_keys_in_the_app(tmp_path, monkeypatch):
    path = tmp_path / "keymap.json"
    path.write_text('{"app.help": "f12"}')
    monkeypatch.setenv("PROBE_TUI_KEYMAP", str(path))
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        await pilot.press("f12")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        tables = help_tables("home", app.user_keymap)
        assert "f12" in [row for row in tables[-1].columns[0]._cells]


@pilot_test
async def test_probe_tui_open_on_a_run_shows_it_over_home(tmp_path):
    from probe_tui.app.screens.summary import RunSummaryScreen

    run = tmp_path / "probe_dump" / "20260105-101500-a1b2c3"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"run_id": "20260105-101500-a1b2c3", "task": "statistics", "status": "finished"}')
    root, start = resolve_start(str(run))
    app = ProbeApp(root, start=start, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, RunSummaryScreen))
        assert app.screen.path == run
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))


@pilot_test
async def test_a_failing_background_task_is_a_notification(tmp_path, monkeypatch):
    import probe_tui.app.screens.summary as summary

    def broken(path):
        raise OSError("disk on fire")

    monkeypatch.setattr(summary, "summarise_folder", broken)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        app.open_path(tmp_path)
        await wait_until(pilot, lambda: any("disk on fire" in str(n.message) for n in app._notifications))
        assert app.is_running


@pilot_test
async def test_opening_a_folder_detects_its_view_off_the_ui_thread(tmp_path, monkeypatch):
    """The detectors read files: they run on a worker thread, and the view opens from the message it posts."""
    import threading

    from probe_tui.app import openers

    seen = []

    def detect(path):
        seen.append(threading.current_thread() is threading.main_thread())
        return path == tmp_path

    monkeypatch.setattr(openers, "_OPENERS", list(openers.openers()))
    openers.register_opener("probe-test", detect, RunSummaryScreen)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        app.open_path(tmp_path)
        await wait_until(pilot, lambda: isinstance(app.screen, RunSummaryScreen) and app.screen.summary is not None,
                         what="the summary open")
        assert seen == [False]
        # a view named by kind opens without detection (the "files" key of every result view)
        app.pop_screen()
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        app.open_path(tmp_path, kind="run")
        await wait_until(pilot, lambda: isinstance(app.screen, RunSummaryScreen) and app.screen.summary is not None,
                         what="the summary by kind")
        assert seen == [False]


def test_open_on_a_missing_path_is_bad_input(tmp_path, capsys):
    from probe_tui.app import run_app

    assert run_app(str(tmp_path / "missing")) == 2
    assert "missing: no such file or folder" in capsys.readouterr().err


class CountedSummary(RunSummaryScreen):
    """The run summary, its reads counted (and slowed by ``delay`` seconds), what it held at its first layout
    (``at_mount``) kept."""

    CSS_PATH = None  # the app reads every screen's stylesheet as it starts
    delay = 0.0

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.reads = 0
        self.at_mount = "unset"

    def read(self):
        import time

        self.reads += 1
        time.sleep(self.delay)
        return super().read()

    def _refresh_layout(self, size=None, scroll=False) -> None:
        if self.at_mount == "unset":  # the first layout: what the first frame shows
            self.at_mount = self.summary
        super()._refresh_layout(size, scroll)


@pilot_test
async def test_a_view_opens_with_its_result_in_its_first_frame(tmp_path):
    """A view whose result reads quickly opens with it: the screen shows it as it mounts (one layout of the
    screen, not one per part the result fills), read once, off the UI thread."""
    (tmp_path / "run.json").write_text('{"run_id": "r1", "task": "statistics"}')
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        screen = CountedSummary(tmp_path)
        app._push_view_screen(screen)
        await wait_until(pilot, lambda: app.screen is screen and screen.at_mount != "unset", what="the summary")
        assert screen.at_mount is not None and screen.at_mount.run["run_id"] == "r1"
        assert screen.reads == 1


@pilot_test
async def test_a_view_whose_result_reads_slowly_opens_before_it(tmp_path, monkeypatch):
    """A result that takes longer than READ_FIRST_WAIT_S: the view opens at once ("Reading…") and shows the
    result when it arrives, read once."""
    from probe_tui.app.screens import base

    monkeypatch.setattr(base, "READ_FIRST_WAIT_S", 0.05)
    (tmp_path / "run.json").write_text('{"run_id": "r1", "task": "statistics"}')
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        # home's start first (the views warmed, then a full collection and a freeze on the UI thread: in a test
        # process holding torch and the whole suite's objects it can hold the loop past the read's second, and the
        # view then opened with its result; a CI run saw it)
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.startup_frozen, what="home's start")
        await app.workers.wait_for_complete()
        screen = CountedSummary(tmp_path)
        screen.delay = 1.0
        app._push_view_screen(screen)
        await wait_until(pilot, lambda: app.screen is screen and screen.at_mount != "unset", what="the summary open")
        assert screen.at_mount is None
        await wait_until(pilot, lambda: screen.summary is not None, what="the result")
        assert screen.reads == 1


@pilot_test
async def test_a_view_closed_before_its_slow_result_stays_closed(tmp_path, monkeypatch):
    """Escape on a view still reading: the result that arrives later opens nothing again."""
    from probe_tui.app.screens import base

    monkeypatch.setattr(base, "READ_FIRST_WAIT_S", 0.05)
    (tmp_path / "run.json").write_text('{"run_id": "r1", "task": "statistics"}')
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        home = await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.startup_frozen and app.screen,
                                what="home's start")  # (as in the test above)
        await app.workers.wait_for_complete()
        screen = CountedSummary(tmp_path)
        screen.delay = 0.5
        app._push_view_screen(screen)
        await wait_until(pilot, lambda: app.screen is screen and screen.at_mount != "unset", what="the summary open")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is home, what="back home")
        await app.workers.wait_for_complete()
        await pilot.pause(0.2)
        assert app.screen is home and screen.reads == 1


def test_home_imports_the_views_once_its_listing_is_drawn(tmp_path):
    """The first view a user opens pays no import (50-130 ms of CPU at that key): home imports every built-in view's
    detector, screen and reader off the UI thread once its listing is on screen. A fresh interpreter: this one has
    imported the screens already."""
    import subprocess
    import sys

    code = """
import asyncio, sys
from probe_tui.app.app import ProbeApp
from probe_tui.app.screens.home import HomeScreen

async def main():
    app = ProbeApp(sys.argv[1], root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        while not (isinstance(app.screen, HomeScreen) and app.screen.scanned):
            await pilot.pause(0.05)
        for _ in range(200):
            await pilot.pause(0.05)
            await app.workers.wait_for_complete()
            if "engines.acc_check.results" in sys.modules:
                break
        from probe_tui.app import openers
        named = ["probe_tui.app.screens.acc_check", "probe_tui.app.screens.compare", "probe_tui.app.screens.dump",
                 "probe_tui.app.screens.monitor", "engines.acc_check.results"]
        print("missing", [m for m in named if m not in sys.modules])
        print("all", [m for m in [*openers._SCREEN_MODULES, *openers.WARM_READERS] if m not in sys.modules])
        print("screens", len(openers._SCREEN_MODULES))

asyncio.run(main())
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["missing"] == "[]"
    assert lines["all"] == "[]"
    assert int(lines["screens"]) >= 9


@pilot_test
async def test_the_objects_of_the_start_are_left_out_of_later_collections_while_the_app_runs(tmp_path):
    """Once home's listing is drawn and the views imported, the start's objects are frozen (the oldest garbage
    collection walked them all each time, 60-80 ms of CPU at the key it fell on); the app's end unfreezes them, so an
    app run in a longer process (tests) can be collected."""
    import gc

    assert gc.get_freeze_count() == 0
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.startup_frozen, what="the start frozen")
        assert gc.get_freeze_count() > 10_000
    assert not app.startup_frozen and gc.get_freeze_count() == 0
