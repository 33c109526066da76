"""The form's field rows: one control per kind of field, each with its label and its error line.

Every row knows its config path (``statistics.scope``) so that a validation issue can be placed at it, and
answers :meth:`FieldRow.collect` with ``(present, value)``: absent values are left out of the config so that
the schema's defaults apply. Rows keep references to the widgets they create, so collecting a form's values
walks no DOM queries (a form has hundreds of widgets and is collected on every keystroke).

A row draws its label (and a switch's "on"/"off" after the control) and the line of doc under the control itself:
Textual spends a few milliseconds of CPU on each widget a form mounts, and a ``Horizontal``, a ``Label`` and a
``Static`` per row were three of a row's four or five. A row gets a ``Static`` note (which wraps) once it has an
error, and keeps it.
"""

from typing import Any, Iterator, List, Optional, Tuple

from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Input, Select, Static, Switch

from probe_tui.app.form import spec as S
from probe_tui.app.form import values as V

LABEL_WIDTH = 24
"""Columns of a row's label (``NARROW_LABEL_WIDTH`` below 81 columns); the control starts after it (form.tcss)."""
NARROW_LABEL_WIDTH = 18


class FieldRow(Vertical):
    """Base of every row: a label, the control(s), a one-line description and an error line.

    The label (and what :meth:`line_after_control` answers, drawn after a control of ``control_width``
    columns) is drawn by the row on its first line, under no child: the control sits after it (its
    ``margin-left`` in form.tcss); the doc line under it, in the control's ``margin-bottom``, until the row
    has a note of its own (class ``-noted``: its first error)."""

    COMPONENT_CLASSES = {"field-row--label", "field-row--after", "field-row--doc"}
    draws_label = True
    """Whether the row draws its label (a collapsible section shows its name in its title instead)."""
    control_width = 0

    class Edited(Message):
        """A control of the row changed value (bubbles to the form and the screen)."""

        def __init__(self, row: "FieldRow") -> None:
            super().__init__()
            self.row = row

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(classes="field-row")
        self.spec = spec
        self.path_parts = path
        self.initial_value = value
        self.initially_present = present
        self.error: Optional[str] = None
        self.local_error: Optional[str] = None
        self.control: Optional[Widget] = None
        """The row's main control, created in compose."""
        self.owner_form: Optional[Any] = None
        """The ModelForm this row belongs to (set by the form; rows of a folded section are not mounted)."""
        self._note: Optional[Static] = None
        """One line under the control: the field's doc, or its error when it has one."""
        if spec.advanced:
            self.add_class("advanced")

    @property
    def path(self) -> str:
        return _join_path(self.path_parts)

    def label_text(self) -> str:
        return self.spec.name + ("" if not self.spec.required else " *")

    def line_after_control(self) -> str:
        """Text drawn after the control on the first line (a switch's state)."""
        return ""

    def label_width(self) -> int:
        return NARROW_LABEL_WIDTH if self.app.has_class("narrow") else LABEL_WIDTH

    def render(self) -> RenderResult:
        if not self.draws_label:
            return super().render()
        width = self.label_width()
        label = Text(self.label_text(), style=self.get_visual_style("field-row--label").rich_style,
                     no_wrap=True, overflow="ellipsis", end="")
        label.truncate(width, overflow="ellipsis", pad=True)
        after = self.line_after_control()
        if after:
            label.append(" " * self.control_width)
            label.append(after, style=self.get_visual_style("field-row--after").rich_style)
        doc = self.doc_line
        if doc and self._note is None and not self.app.has_class("narrow"):
            line = Text(doc, style=self.get_visual_style("field-row--doc").rich_style, no_wrap=True, end="")
            line.truncate(max(1, self.size.width - width), overflow="ellipsis")
            label.append("\n" + " " * width)
            label.append_text(line)
        return label

    @property
    def doc_line(self) -> str:
        return self.spec.description.splitlines()[0] if self.spec.description else ""

    def compose_note(self, doc: bool = True) -> Static:
        self._note = Static(self.doc_line if doc else "", classes="field-note", markup=False)
        self._note_doc = doc
        return self._note

    def compose_footer(self) -> ComposeResult:
        """The note under the control: drawn by the row (no widget) until the row has an error."""
        if not self.draws_label or self.local_error or self.error:
            yield self.compose_note()
            self.add_class("-noted")

    def estimated_lines(self) -> int:
        """About how many lines the row takes (the form mounts a first screenful before the rest)."""
        return 2

    def grant_lines(self, lines: int) -> None:
        """The row is composed with about ``lines`` lines left on screen: a row with nested forms hands them
        what is left after its own lines (the rest of their rows is mounted after the first frame)."""

    def child_forms(self) -> List[Any]:
        """The forms nested in this row (sections, the chosen variant, list items)."""
        return []

    def ready(self) -> bool:
        """Whether the controls are mounted (nested rows are built after their parent)."""
        return self.control is not None and self.control.is_mounted

    def collect(self) -> Tuple[bool, Any]:
        """``(present, value)``: whether the config gets this key, and its value. A row whose controls are not
        mounted yet answers with the value it was given."""
        if not self.ready():
            return self._collect_unmounted()
        return self._collect()

    def _collect_unmounted(self) -> Tuple[bool, Any]:
        """What :meth:`_collect` answers once the row is mounted with its initial value, without mounting it."""
        return self.initially_present and self.initial_value is not None, self.initial_value

    def _collect(self) -> Tuple[bool, Any]:
        raise NotImplementedError

    def child_rows(self) -> Iterator["FieldRow"]:
        """Rows nested in this one (sections, variants, list items)."""
        return iter(())

    def on_mount(self) -> None:
        self._render_error()

    def focus_control(self) -> None:
        if self.control is not None and self.control.focusable:
            self.control.focus()

    def set_error(self, message: Optional[str]) -> None:
        """Show (or clear, with None) the schema's message for this field; a local parse error wins."""
        if message == self.error:
            return
        self.error = message
        self._render_error()

    def _render_error(self) -> None:
        shown = self.local_error or self.error
        if shown and self._note is None and self.control is not None:
            self._add_note()
        if self._note is not None:
            self._note.update(shown or (self.doc_line if self._note_doc else ""))
        self.set_class(bool(shown), "-has-error")

    def _add_note(self) -> None:
        """The row's first error: a note widget under the control (it wraps a long message) from now on."""
        if not self.control.is_attached:  # composed a moment ago: its children mount next
            self.call_after_refresh(self._render_error)
            return
        note = self.compose_note()
        self.mount(note, after=self.control)
        self.add_class("-noted")
        self.refresh()

    def _set_local_error(self, message: Optional[str]) -> None:
        if message == self.local_error:
            return
        self.local_error = message
        self._render_error()

    def edited(self) -> None:
        self.post_message(self.Edited(self))

    def help_text(self) -> str:
        """Full help for the help bar: path, description, default, bounds."""
        bits = [self.path or self.spec.name]
        if self.spec.required:
            bits.append("required")
        default = self.spec.default_text()
        if default:
            bits.append(f"default {default}")
        if self.spec.bounds:
            bits.append(self.spec.bounds)
        if self.spec.choices and self.spec.kind == S.CHOICE:
            bits.append("one of " + " | ".join(str(c) for c in self.spec.choices))
        elif self.spec.choices and self.spec.kind == S.SCALAR_LIST:
            bits.append("items from " + " | ".join(str(c) for c in self.spec.choices))
        head = " · ".join(bits)
        return head + ("\n" + self.spec.description if self.spec.description else "")


def on_off(value: bool, on: str = "on", off: str = "off") -> str:
    return f" {on}" if value else f" {off}"


def _join_path(parts: Tuple[str, ...]) -> str:
    out = ""
    for part in parts:
        if part.startswith("["):
            out += part
        else:
            out += ("." if out else "") + part
    return out


SWITCH_WIDTH = 6
"""Columns of a row's switch (form.tcss); its state is drawn after it."""


class SwitchRow(FieldRow):
    control_width = SWITCH_WIDTH

    def compose(self) -> ComposeResult:
        value = bool(self.initial_value) if self.initially_present else bool(self.spec.default is True)
        self.control = Switch(value=value, classes="field-control")
        yield self.control
        yield from self.compose_footer()

    def line_after_control(self) -> str:
        value = self.control.value if self.control is not None else False
        return on_off(bool(value))

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self.refresh()
        self.edited()

    def _collect(self) -> Tuple[bool, Any]:
        value = self.control.value
        if self.initially_present or not self.spec.has_default or value != self.spec.default:
            return True, value
        return False, None


class ChoiceRow(FieldRow):
    """A select over the field's values; blank ("(not set)") when the field is optional or has no default.
    ``choices`` replaces the spec's values (an optional bool: true, false)."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool,
                 choices: Optional[Tuple[Any, ...]] = None) -> None:
        super().__init__(spec, path, value, present)
        self.choices: Tuple[Any, ...] = tuple(choices) if choices is not None else tuple(spec.choices)

    def compose(self) -> ComposeResult:
        options = [(V.format_scalar(c), c) for c in self.choices]
        current = self.initial_value if self.initially_present else self.spec.default
        allow_blank = self.spec.optional or not self.spec.has_default
        if self.initially_present and current is not None and current not in self.choices:
            # Keep a loaded value the schema rejects, so that its error shows instead of it silently changing.
            options.append((f"{V.format_scalar(current)} (not allowed)", current))
        value = current if any(current == v for _, v in options) else Select.NULL
        if value is Select.NULL and not allow_blank:
            value = self.choices[0]
        self.control = Select(options, value=value, allow_blank=allow_blank, compact=True, prompt="(not set)",
                              classes="field-control")
        yield self.control
        yield from self.compose_footer()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self.edited()

    def _collect(self) -> Tuple[bool, Any]:
        value = self.control.value
        if value is Select.NULL:
            return False, None
        if self.initially_present or not self.spec.has_default or value != self.spec.default:
            return True, value
        return False, None


class InputRow(FieldRow):
    """Scalars, lists of scalars (comma-separated) and anything else as JSON text."""

    def initial_text(self) -> str:
        if not self.initially_present:
            return ""
        if self.spec.kind == S.SCALAR_LIST:
            return V.format_list(self.initial_value)
        if self.spec.kind == S.JSON:
            return V.format_json(self.initial_value)
        return V.format_scalar(self.initial_value)

    def placeholder(self) -> str:
        default = self.spec.default_text()
        if self.spec.kind == S.SCALAR_LIST:
            hint = "comma-separated"
            return f"{default} ({hint})" if default and default != "empty" else hint
        if self.spec.kind == S.JSON:
            return f"JSON, default {V.format_json(self.spec.default)}" if self.spec.has_default else "JSON"
        if default:
            return f"default {default}"
        return "required" if self.spec.required else "(not set)"

    def compose(self) -> ComposeResult:
        self.control = Input(self.initial_text(), placeholder=self.placeholder(), compact=True,
                             classes="field-control")
        yield self.control
        yield from self.compose_footer()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.collect()  # refreshes the local parse error
        self.edited()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.screen.focus_next()

    def _collect(self) -> Tuple[bool, Any]:
        text = self.control.value
        if V.is_blank(text):
            self._set_local_error(None)
            return False, None
        try:
            if self.spec.kind == S.SCALAR_LIST:
                value = V.parse_list(text, self.spec.scalar_types)
            elif self.spec.kind == S.JSON:
                value = V.parse_json(text)
            else:
                value = V.parse_scalar(text, self.spec.scalar_types)
        except ValueError as exc:
            self._set_local_error(str(exc))
            return True, text
        self._set_local_error(None)
        return True, value
