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
