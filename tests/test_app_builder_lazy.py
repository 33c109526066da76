"""Issue 19, builder speed: the form mounts a screenful of rows first and the rest after the first frame; the
palette and the jumps reach rows not mounted yet; Tab past the rows mounted goes on to the next field; a focus
change does not repaint the whole screen. Pilot tests on the real schemas."""

from typing import Any, List

import schemas
from probe_tui.app.app import ProbeApp
from probe_tui.app.form.fields import FieldRow
from probe_tui.app.form.model_form import all_rows, folds_above
from probe_tui.app.form.sections import SectionRow
from probe_tui.app.screens.builder import BuilderScreen
from tests.app_pilot import pilot_test, wait_until


def _hold_the_build(monkeypatch: Any) -> None:
    """Stop the builder's background build after the first screenful (as a user acting before it ends sees)."""

    async def held(self: BuilderScreen, form: Any) -> None:
        return None

    monkeypatch.setattr(BuilderScreen, "_build_step", held)


async def _builder(pilot: Any) -> BuilderScreen:
    app = pilot.app
    return await wait_until(pilot, lambda: isinstance(app.screen, BuilderScreen) and app.screen.is_mounted
                            and app.screen._baseline is not None and app.screen, what="the config builder")


def _row(screen: BuilderScreen, path: str) -> FieldRow:
    return next(r for r in all_rows(screen.form) if r.path == path)


def _mounted(screen: BuilderScreen) -> List[str]:
    return [r.path for r in all_rows(screen.form) if r.ready()]


@pilot_test
async def test_the_form_mounts_a_screenful_first_then_the_rest_unmodified(tmp_path, monkeypatch):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        rows = all_rows(builder.form)
        first = _mounted(builder)
        assert "dump_path" in first and len(first) < len(rows) // 2, (len(first), len(rows))
        assert builder.building
        await wait_until(pilot, lambda: not builder.building, what="the rest of the form")
        unset_optional = [r for r in rows if isinstance(r, SectionRow) and r.spec.optional and not r.set_initially]
        assert unset_optional  # the demo's faults: mounted when they are set
        shown = [r for r in rows if not folds_above(r) and not any(r.path.startswith(s.path + ".")
                                                                   for s in unset_optional)]
        # a row's own controls mount a moment after the row (its compose): wait for them, never forever
        await wait_until(pilot, lambda: all(r.ready() for r in shown), timeout=30,
                         what="every shown row's controls: %s" % [r.path for r in shown if not r.ready()])
        await pilot.pause()
        assert not builder.dirty


@pilot_test
async def test_the_palette_lists_and_jumps_to_a_field_not_mounted_yet(tmp_path, monkeypatch):
    _hold_the_build(monkeypatch)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        row = _row(builder, "statistics.summary_mode")
        assert not row.ready()
        titles = [title for title, _help, _run in builder.palette_entries()]
        assert "Field: statistics.summary_mode" in titles and "Field: output.store_mode" in titles
        run = next(run for title, _help, run in builder.palette_entries()
                   if title == "Field: statistics.summary_mode")
        run()
        await wait_until(pilot, lambda: row.control is not None and row.control.has_focus,
                         what="focus on statistics.summary_mode")
        assert not builder.dirty


@pilot_test
async def test_a_jump_into_an_unset_optional_section_focuses_its_switch(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        section = _row(builder, "target.demo.faults.grad_explosion")
        assert isinstance(section, SectionRow) and section.switched_off
        await builder.jump_to(_row(builder, "target.demo.faults.grad_explosion.scale"))
        await wait_until(pilot, lambda: section.control is not None and section.control.has_focus,
                         what="focus on the grad_explosion switch")
        assert "grad_explosion" not in builder.collect()["target"]["demo"].get("faults", {})


@pilot_test
async def test_tab_past_the_rows_mounted_goes_to_the_next_field(tmp_path, monkeypatch):
    _hold_the_build(monkeypatch)
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        chain = builder.focus_chain
        last = [w for w in chain if builder.form in w.ancestors][-1]
        last.focus()
        await pilot.pause()
        await pilot.press("tab")
        await wait_until(pilot, lambda: builder.focused is not None and builder.focused is not last,
                         what="the focus to move")
        focused = builder.focused
        assert builder.form in focused.ancestors, focused  # not back to the task selector


@pilot_test
async def test_tab_does_not_repaint_the_whole_screen(tmp_path):
    from textual._compositor import Compositor

    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        app.open_builder(schemas.starter_config("statistics"), path=None)
        builder = await _builder(pilot)
        await wait_until(pilot, lambda: not builder.building, what="the whole form")
        _row(builder, "dump_path").focus_control()
        await pilot.pause()
        full = []
        original = Compositor.render_full_update

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            full.append(1)
            return original(self, *args, **kwargs)

        Compositor.render_full_update = counted  # type: ignore[method-assign]
        try:
            await pilot.press("tab")
            await pilot.pause()
            await pilot.press("tab")
            await pilot.pause()
        finally:
            Compositor.render_full_update = original  # type: ignore[method-assign]
        assert builder.focused is not None and builder.focused is not _row(builder, "dump_path").control
        assert not full
