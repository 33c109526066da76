"""SVG snapshots (80x24 and 120x40) of issue 19's first-pass screens: a sample with an optional bool in the
builder, the question before a save replaces a file, and the "open a path" prompt. The first-run home is
``test_app_snapshots.py::test_home_empty``.

Regenerate with ``pytest tests/test_app_snapshots_start.py --snapshot-update`` and look at the report first.
"""

import json
import shutil

import pytest

from tests.app_pilot import SAMPLES
from tests.test_app_snapshots import SIZES, app_for, home_ready, settle, utc  # noqa: F401 (utc: autouse fixture)


@pytest.mark.parametrize("size", SIZES)
def test_builder_optional_bool_not_set(snap_compare, tmp_path, size):
    shutil.copy(SAMPLES / "monitor.json", tmp_path / "monitor.json")

    async def run_before(pilot):
        from probe_tui.app.form.model_form import all_rows

        await settle(pilot, home_ready)
        pilot.app.load_into_builder(tmp_path / "monitor.json")
        await settle(pilot, lambda app: bool(app.screen.query("#form")))
        builder = pilot.app.screen
        row = next(r for r in all_rows(builder.form) if r.path.endswith("rules[0].args.include_inf"))
        await builder.jump_to(row)
        await settle(pilot, lambda app: row.control is not None and row.control.has_focus)

    assert snap_compare(app_for(tmp_path), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_save_asks_before_replacing_a_file(snap_compare, tmp_path, size):
    (tmp_path / "statistics.json").write_text(json.dumps({"task": "statistics"}))

    async def run_before(pilot):
        import schemas

        await settle(pilot, home_ready)
        pilot.app.open_builder(schemas.starter_config("statistics"), path=None)
        await settle(pilot, lambda app: bool(app.screen.query("#form")))
        await pilot.press("ctrl+s")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot, lambda app: type(app.screen).__name__ == "ConfirmScreen")

    assert snap_compare(app_for(tmp_path), terminal_size=SIZES[size], run_before=run_before)


@pytest.mark.parametrize("size", SIZES)
def test_open_a_path_prompt(snap_compare, tmp_path, size):
    (tmp_path / "probe_dump").mkdir()
    (tmp_path / "result").mkdir()
    (tmp_path / "stats.json").write_text("{}")

    async def run_before(pilot):
        await settle(pilot, home_ready)
        await pilot.press("p")
        await settle(pilot, lambda app: type(app.screen).__name__ == "PathPrompt")

    assert snap_compare(app_for(tmp_path), terminal_size=SIZES[size], run_before=run_before)
