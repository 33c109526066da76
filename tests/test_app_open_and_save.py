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
