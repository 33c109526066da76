"""The config builder's form as it is built: a screenful of rows first, the rest a step at a time after the first
frame (``probe_tui.app.form.model_form``); jumps to fields not mounted yet, and Tab past the rows mounted."""

from functools import partial
from typing import Any, Callable, List, Optional, Tuple

from textual import events
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget

from probe_tui.app.form.fields import FieldRow
from probe_tui.app.form.model_form import (
    ModelForm,
    all_rows,
    build_everything,
    build_step,
    folds_above,
    next_to_build,
)
from probe_tui.app.form.sections import SectionRow


class FormBuild(Screen):
    """Mixed into the builder screen, which provides ``form``, ``validate_now``, ``_snapshot``, ``_baseline``,
    ``_edits`` and ``_update_title``."""

    form: ModelForm
    _baseline: Optional[str]
    _edits: int

    _shown = False
    """Whether the screen has been shown once (its first ScreenResume handled)."""

    def validate_now(self) -> Any:
        raise NotImplementedError

    def _snapshot(self) -> str:
        raise NotImplementedError

    def _update_title(self) -> None:
        raise NotImplementedError

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        """Textual restyles every node of a screen as it resumes; the first time, each node was styled a moment
        ago as it mounted (about 40 ms of CPU with a form's first screenful): that restyle is skipped."""
        first = not self._shown
        self._shown = True
        event.prevent_default()  # Screen's handler runs here, once, with the event below
        Screen._on_screen_resume(self, events.ScreenResume(refresh_styles=False) if first else event)

    def _screen_resized(self, size: Size) -> None:
        """Textual sends a screen a Resize after its first layout and lays the whole screen out again on it, at
        the size it has just been laid out at (about 100 ms of CPU with the form): a layout at an unchanged size
        is skipped (what changed meanwhile asks for its own layout)."""
        if self._compositor.size == size and self.is_attached:
            return
        super()._screen_resized(size)

    @property
    def building(self) -> bool:
        """Whether rows of the form are still waiting to be mounted (they come a screenful at a time)."""
        try:
            return next_to_build(self.form) is not None
        except Exception:  # no form mounted right now (being replaced)
            return True

    async def _build_step(self, form: ModelForm) -> None:
        """Mount the form's next waiting row, then (after a frame, so keys are answered in between) the next."""
        if form is not self.form:
            return  # replaced meanwhile
        if await build_step(form):
            self.call_after_refresh(self._build_step, form)
        else:
            self._form_built()

    def _form_built(self) -> None:
        """The whole form is mounted: validate again so every error reaches its field; when nothing was edited
        yet, the form as mounted is the saved state."""
        self.validate_now()
        if self._edits == 0 and self._baseline is not None:
            self._baseline = self._snapshot()
            self._update_title()

    def focus_next(self, selector: Any = "*") -> Optional[Widget]:
        """Tab: past the last row mounted while the form is still being built, mount the next row first (a fast
        typist's Tab must land on the next field, not wrap to the task)."""
        if self.building and self._at_built_end():
            self.call_later(self._build_then_focus_next, selector)
            return self.focused
        return super().focus_next(selector)

    def _at_built_end(self) -> bool:
        focused = self.focused
        chain = self.focus_chain
        if focused is None or focused not in chain:
            return False
        after = chain[(chain.index(focused) + 1) % len(chain)]
        form = self.form
        return form in focused.ancestors and form not in after.ancestors

    async def _build_then_focus_next(self, selector: Any) -> None:
        await build_step(self.form)
        self.call_after_refresh(self.focus_next, selector)

    def palette_entries(self) -> List[Tuple[str, str, Callable[[], Any]]]:
        """The command palette's "go to a field" entries: every field of the form, advanced ones too."""
        out: List[Tuple[str, str, Callable[[], Any]]] = []
        for row in all_rows(self.form):
            doc = row.doc_line
            out.append((f"Field: {row.path}", doc or "Go to this field.", partial(self.call_later, self.jump_to, row)))
        return out

    async def jump_to(self, row: FieldRow) -> None:
        """Mount and unfold what hides ``row``, focus its control and scroll it into view (a field of an optional
        section that is not set: that section's switch)."""
        target = await self._reveal(row)
        self.call_after_refresh(self._focus_row, target)

    @staticmethod
    def _focus_row(row: FieldRow) -> None:
        row.focus_control()
        row.scroll_visible()

    async def _reveal(self, row: FieldRow) -> FieldRow:
        """Mount the rest of the form when ``row`` is not mounted yet, unfold the advanced sections that hold it
        (from the outside in); answer the row to focus: ``row``, or the switch of the outermost optional section
        above it that is not set."""
        if not row.is_attached:
            await build_everything(self.form)
        for form in folds_above(row):
            await form.unfold_advanced()
        target = row
        node: Optional[FieldRow] = row
        while node is not None and node.owner_form is not None:
            node = node.owner_form.owner_row
            if isinstance(node, SectionRow) and node.switched_off:
                target = node
        return target

