"""Issue 19 (app, second pass): the builder's optional fields, saving over a file, opening every kind of path,
where runs start, the palette and the first-run home. Pilot tests on the real schemas."""

import json
import shutil
from pathlib import Path

from textual.widgets import Select

import schemas
from probe_tui.app.app import ProbeApp
from probe_tui.app.form.model_form import all_rows
from probe_tui.app.screens.builder import BuilderScreen
from tests.app_pilot import SAMPLES, pilot_test, wait_until


async def builder_up(pilot) -> BuilderScreen:
    app = pilot.app
    await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen) and app.screen.is_mounted
                     and bool(app.screen.query("#form")), what="the config builder")
    await wait_until(pilot, lambda: not app.screen.building, what="the whole form mounted")
    await pilot.pause()
    await wait_until(pilot, lambda: app.screen._timer is None, what="validation")
    return app.screen


def rows_named(screen, name):
    return [r for r in all_rows(screen.form) if r.path_parts[-1] == name]


@pilot_test
async def test_the_shipped_monitor_sample_opens_valid_and_saves_valid(tmp_path):
    """An optional bool (``include_inf``) has a "not set" state: the sample opens with no error and saves as
    a file ``validate`` accepts."""
    config = tmp_path / "monitor.json"
    shutil.copy(SAMPLES / "monitor.json", config)
    app = ProbeApp(tmp_path, start=config, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        builder = await builder_up(pilot)
        await builder.form.unfold_advanced()
        builder.validate_now()
        assert builder.validation.ok, [i.line() for i in builder.validation.issues]
        rule = builder.collect()["monitor"]["alert"]["rules"][0]
        assert "include_inf" not in rule.get("args", {})
        builder.write(tmp_path / "saved.json")
        schemas.load_config(json.loads((tmp_path / "saved.json").read_text()))


@pilot_test
async def test_an_optional_bool_can_be_set_and_unset(tmp_path):
    data = schemas.starter_config("monitor")
    data["monitor"]["alert"] = {"rules": [{"rule_name": "AnomalyNan", "args": {"include_inf": False}}]}
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(data, path=None)
        builder = await builder_up(pilot)
        row = rows_named(builder, "include_inf")[0]
        await wait_until(pilot, row.ready)
        control = row.control
        assert isinstance(control, Select)
        assert row.collect() == (True, False)
        control.value = Select.NULL
        await pilot.pause()
        assert row.collect() == (False, None)
        control.value = True
        await pilot.pause()
        assert row.collect() == (True, True)


@pilot_test
async def test_saving_over_an_existing_file_asks_first(tmp_path):
    from textual.widgets import Button

    from probe_tui.app.screens.confirm import ConfirmScreen
    from probe_tui.app.screens.path_prompt import PathPrompt

    existing = tmp_path / "statistics.json"
    existing.write_text('{"keep": "me"}')
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await builder_up(pilot)
        for key in ("ctrl+s", "f2", "ctrl+r"):
            await pilot.press(key)
            await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted, what=key)
            await pilot.press("enter")  # the suggestion: statistics.json, which exists
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.is_mounted,
                             what=f"{key} asks before overwriting")
            assert "already exists" in str(app.screen.question)
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is builder)
            assert existing.read_text() == '{"keep": "me"}'
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.is_mounted)
        app.screen.query_one("#answer-overwrite", Button).press()
        await wait_until(pilot, lambda: json.loads(existing.read_text()).get("task") == "statistics")
        # Saved once, the file is the builder's own: saving again does not ask, unless it changed on disk.
        existing.write_text('{"changed": "elsewhere"}')
        import os
        os.utime(existing, (1, 1))
        await pilot.press("ctrl+s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and app.screen.is_mounted)
        assert "changed on disk" in str(app.screen.question)


# ---- every kind of path the CLI reads opens in its view -----------------------------------------------------------
MSPROBE = Path(__file__).resolve().parent / "data" / "msprobe" / "e2e_83" / "npu"


def _paths(tmp_path):
    """(path, the screen that shows it) for each kind of path the CLI reads."""
    from probe_tui.app.screens.compare import CompareScreen
    from probe_tui.app.screens.dump import DumpScreen
    from probe_tui.app.screens.monitor import MonitorScreen
    from tests.app_pilot import make_compare_result, make_metrics, write_dump

    run = tmp_path / "probe_dump" / "20260105-101500-a1b2c3"
    write_dump(run / "rank0", golden=False)
    (run / "run.json").write_text(json.dumps({"run_id": run.name, "task": "statistics", "status": "finished"}))
    make_metrics(tmp_path / "monitor_run")
    return {
        "msprobe step folder": (MSPROBE / "step0", DumpScreen),
        "msprobe rank folder": (MSPROBE / "step0" / "rank0", DumpScreen),
        "msprobe dump.json": (MSPROBE / "step0" / "rank0" / "dump.json", DumpScreen),
        "our rank folder": (run / "rank0", DumpScreen),
        "metrics.h5": (tmp_path / "monitor_run" / "rank0" / "metrics.h5", MonitorScreen),
        "compare -o DIR": (make_compare_result(tmp_path / "cmp"), CompareScreen),
    }


@pilot_test
async def test_probe_tui_open_shows_every_kind_of_path_in_its_view(tmp_path, monkeypatch):
    from probe_tui.app import build_app

    monkeypatch.chdir(tmp_path)
    for what, (path, screen_type) in _paths(tmp_path).items():
        app = build_app(str(path))
        assert app.start_path is not None, f"{what}: listed as a folder of runs"
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda a=app, t=screen_type: isinstance(a.screen, t) and a.screen.is_mounted,
                             what=f"{what} open in {screen_type.__name__}")


@pilot_test
async def test_open_a_path_from_inside_the_app(tmp_path):
    from probe_tui.app.screens.dump import DumpScreen
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.path_prompt import PathPrompt

    (tmp_path / "empty").mkdir()
    app = ProbeApp(tmp_path / "empty", root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, PathPrompt) and app.screen.is_mounted)
        await pilot.press("ctrl+u", *str(MSPROBE / "step0"), "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, DumpScreen) and app.screen.is_mounted,
                         what="the step folder in the dump browser")
        # A folder of runs becomes the folder home lists.
        run = tmp_path / "runs" / "r1"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"run_id": "r1", "task": "statistics", "status": "finished"}))
        app.open_any(tmp_path / "runs")
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.root == (tmp_path / "runs"))
        await wait_until(pilot, lambda: [r["folder"] for r in app.screen.runs] == ["r1"])


@pilot_test
async def test_home_lists_a_compare_result_written_with_compare_o(tmp_path):
    from probe_tui.app.screens.home import HomeScreen
    from tests.app_pilot import make_compare_result

    make_compare_result(tmp_path / "cmp")
    (tmp_path / "cmp" / "target" / "rank0").mkdir(parents=True, exist_ok=True)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        rows = {r["folder"]: r["status"] for r in app.screen.runs}
        assert rows.get("cmp/result") == "compare result", rows


# ---- runs start where the app was started ------------------------------------------------------------------------
@pilot_test
async def test_a_config_opened_from_another_folder_runs_in_the_start_folder(tmp_path, monkeypatch):
    import sys

    from probe_tui.app import build_app
    from probe_tui.app.screens.run import RunScreen

    configs = tmp_path / "configs"
    configs.mkdir()
    shutil.copy(SAMPLES / "statistics.json", configs / "stats.json")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    app = build_app(str(configs / "stats.json"))
    app.run_command = [sys.executable, "-c", "import os; open('ran_here', 'w').write(os.getcwd())"]
    async with app.run_test(size=(120, 40)) as pilot:
        builder = await builder_up(pilot)
        assert builder.path == configs / "stats.json"
        await pilot.press("ctrl+r")
        await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.is_mounted)
        assert app.screen.cwd == work
        await wait_until(pilot, lambda: (work / "ran_here").is_file(), what="the run in the start folder")
        assert not (configs / "ran_here").exists()


# ---- first run -------------------------------------------------------------------------------------------------
@pilot_test
async def test_an_empty_folder_offers_the_demo_a_path_and_a_config(tmp_path):
    import sys

    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.screens.path_prompt import PathPrompt
    from probe_tui.app.screens.run import RunScreen
    from probe_tui.app.screens.start import StartScreen

    app = ProbeApp(tmp_path, root_label="~/exp", run_command=[sys.executable, "-c", "pass"])
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        text = str(app.screen.query_one("#runs-empty").render())
        for line in ("d  run the demo", "p  open a path", "n  build a config"):
            assert line in text
        for key, screen_type in (("p", PathPrompt), ("n", StartScreen)):
            await pilot.press(key)
            await wait_until(pilot, lambda t=screen_type: isinstance(app.screen, t), what=key)
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        await pilot.press("d")
        run = await wait_until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen)
        assert run.config_path.name == "statistics.json" and run.cwd == tmp_path


# ---- the footer at 80 columns ------------------------------------------------------------------------------------
def _footer_keys(screen):
    """(key, description) of each footer key drawn inside the terminal."""
    from textual.widgets._footer import FooterKey

    width = screen.app.size.width
    return {(k.key, k.description) for k in screen.query(FooterKey) if k.region.right <= width and k.region.width}


@pilot_test
async def test_at_80_columns_the_footer_keeps_quit_back_and_help(tmp_path):
    from probe_tui.app.screens.compare import CompareScreen
    from probe_tui.app.screens.dump import DumpScreen
    from probe_tui.app.screens.home import HomeScreen
    from tests.app_pilot import make_compare_result

    result = make_compare_result(tmp_path / "cmp")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        await pilot.pause()
        assert {("q", "Quit"), ("f1", "Help")} <= _footer_keys(app.screen)
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await builder_up(pilot)
        await pilot.pause()
        assert {("escape", "Back"), ("f1", "Help"), ("ctrl+s", "Save")} <= _footer_keys(builder)
        builder.dismiss()
        for path, screen_type in ((result, CompareScreen), (MSPROBE, DumpScreen)):
            app.open_path(path)
            screen = await wait_until(pilot, lambda t=screen_type: isinstance(app.screen, t)
                                      and app.screen.is_mounted and app.screen)
            await pilot.pause(0.3)
            assert {("escape", "Back"), ("f1", "Help")} <= _footer_keys(screen), screen_type.__name__
            await pilot.press("escape")
            await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))


# ---- palette order, its Keys command, Home/End in tables ---------------------------------------------------------
def _palette_titles(palette):
    from textual.command import CommandList

    options = palette.query_one(CommandList)
    return [str(options.get_option_at_index(i).prompt).split("\n")[0] for i in range(options.option_count)]


@pilot_test
async def test_the_palette_lists_the_apps_commands_first_and_keys_closes_with_esc(tmp_path):
    from textual.command import CommandPalette

    from probe_tui.app.screens.help import HelpScreen
    from probe_tui.app.screens.home import HomeScreen

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned)
        await pilot.press("ctrl+p")
        palette = await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen)
        titles = await wait_until(pilot, lambda: len(_palette_titles(palette)) > 5 and _palette_titles(palette))
        await pilot.pause(0.3)
        titles = _palette_titles(palette)
        assert titles[0].startswith("New config"), titles
        assert titles.index("Theme") > titles.index("Refresh (r f5)")
        await pilot.press(*"Keys")
        await wait_until(pilot, lambda: _palette_titles(palette)[:1] == ["Keys"])
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen))
        assert not app.screen.query("HelpPanel")


@pilot_test
async def test_home_and_end_go_to_the_first_and_last_row(tmp_path):
    from textual.widgets import DataTable

    from probe_tui.app.screens.home import HomeScreen

    for n in range(30):
        run = tmp_path / "probe_dump" / f"2026010{n // 10}-1{n % 10:05d}-abcdef"
        run.mkdir(parents=True)
        (run / "run.json").write_text(json.dumps({"run_id": run.name, "task": "statistics", "status": "finished",
                                                  "started_unix": 1767600000 + n}))
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and len(app.screen.runs) == 30)
        table = app.screen.query_one("#runs", DataTable)
        await wait_until(pilot, lambda: table.has_focus)
        await pilot.press("end")
        assert table.cursor_row == 29
        await pilot.press("home")
        assert table.cursor_row == 0


# ---- builder: jump to a field, no invisible Tab stop -------------------------------------------------------------
@pilot_test
async def test_the_palette_jumps_to_a_builder_field_even_an_advanced_one(tmp_path):
    from textual.command import CommandPalette

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await builder_up(pilot)
        await pilot.press("ctrl+p")
        palette = await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette) and app.screen)
        await pilot.press(*"Field: output.store_mode")
        await wait_until(pilot, lambda: (_palette_titles(palette) or [""])[0] == "Field: output.store_mode")
        await pilot.press("enter")
        row = next(r for r in all_rows(builder.form) if r.path == "output.store_mode")
        await wait_until(pilot, lambda: app.screen is builder and row.control is not None and row.control.has_focus,
                         what="focus on output.store_mode (advanced)")


@pilot_test
async def test_tab_never_stops_on_the_form_container(tmp_path):
    from textual.containers import VerticalScroll

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await builder_up(pilot)
        assert not any(isinstance(w, VerticalScroll) for w in builder.focus_chain)
