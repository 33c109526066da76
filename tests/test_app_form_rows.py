"""Issue 19, builder speed: a form row is the row and its control; it draws its label, a switch's state and the doc
line under the control itself, and gets a note widget (which wraps) once it has an error. Pilot tests on the real
schemas."""

from typing import Any, List

import schemas
from probe_tui.app.app import ProbeApp
from probe_tui.app.form.fields import LABEL_WIDTH, NARROW_LABEL_WIDTH, FieldRow
from probe_tui.app.form.model_form import all_rows
from probe_tui.app.screens.builder import BuilderScreen
from tests.app_pilot import pilot_test, wait_until


async def _builder(pilot: Any) -> BuilderScreen:
    app = pilot.app
    return await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen) and app.screen.is_mounted
                            and app.screen._baseline is not None and app.screen, what="the config builder")


async def _mounted_row(pilot: Any, screen: BuilderScreen, path: str) -> FieldRow:
    row = next(r for r in all_rows(screen.form) if r.path == path)
    await wait_until(pilot, row.ready, what=f"{path}'s control")
    await pilot.pause()
    return row


def _drawn(row: FieldRow) -> List[str]:
    return row.render().plain.splitlines()


@pilot_test
async def test_a_row_draws_its_label_and_doc_line_around_its_only_widget(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        row = await _mounted_row(pilot, builder, "dump_path")
        assert list(row.children) == [row.control]
        first, second = _drawn(row)
        assert first.rstrip() == "dump_path" and len(first) == LABEL_WIDTH
        assert second.startswith(" " * LABEL_WIDTH)
        shown = second[LABEL_WIDTH:].rstrip("…")
        assert shown and row.doc_line.startswith(shown)
        assert row.region.height == 2 and row.control.region.y == row.region.y
        assert row.control.region.x == row.content_region.x + LABEL_WIDTH

        target = await _mounted_row(pilot, builder, "target")  # an optional section: set / not set
        assert _drawn(target)[0].rstrip().endswith(" set")
        target.control.value = False
        await pilot.pause()
        assert _drawn(target)[0].rstrip().endswith(" not set")


@pilot_test
async def test_an_error_gets_a_note_that_wraps_then_shows_the_doc_again(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        row = await _mounted_row(pilot, builder, "step")
        assert _drawn(row) == [row.label_text().ljust(NARROW_LABEL_WIDTH)]  # narrow: no doc line
        assert row.region.height == 1
        row.control.value = "0, x"
        await wait_until(pilot, lambda: row._note is not None and row._note.is_mounted, what="the error note")
        await pilot.pause()
        assert row.has_class("-has-error") and "'x' is not a step" in str(row._note.render())
        assert row.region.height >= 3  # the control, then the message on two lines at 80 columns
        assert row._note.content_region.x == row.content_region.x + NARROW_LABEL_WIDTH

        await pilot.resize_terminal(120, 40)
        row.control.value = "0, 3"
        await wait_until(pilot, lambda: not row.has_class("-has-error"), what="the error cleared")
        await pilot.pause()
        assert str(row._note.render()).startswith(row.doc_line[:20])
        assert len(_drawn(row)) == 1  # the note widget shows the doc now: the row does not draw it too
        assert row.region.height == 2
