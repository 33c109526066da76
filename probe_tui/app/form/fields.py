"""The form's field rows: one control per kind of field, each with its label and its error line.

Every row knows its config path (``statistics.scope``) so that a validation issue can be placed at it, and
answers :meth:`FieldRow.collect` with ``(present, value)``: absent values are left out of the config so that
the schema's defaults apply. Rows keep references to the widgets they create, so collecting a form's values
walks no DOM queries (a form has hundreds of widgets and is collected on every keystroke).
"""

from typing import Any, Dict, Iterator, List, Optional, Tuple

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Button, Collapsible, Input, Label, Select, Static, Switch

from probe_tui.app.form import spec as S
from probe_tui.app.form import values as V


class FieldRow(Vertical):
    """Base of every row: a label, the control(s), a one-line description and an error line."""

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

    def compose_label(self) -> Label:
        return Label(self.label_text(), classes="field-label")

    @property
    def doc_line(self) -> str:
        return self.spec.description.splitlines()[0] if self.spec.description else ""

    def compose_note(self, doc: bool = True) -> Static:
        self._note = Static(self.doc_line if doc else "", classes="field-note", markup=False)
        self._note_doc = doc
        return self._note

    def compose_footer(self) -> ComposeResult:
        yield self.compose_note()

    def ready(self) -> bool:
        """Whether the controls are mounted (nested rows are built after their parent)."""
        return self.control is not None and self.control.is_mounted

    def collect(self) -> Tuple[bool, Any]:
        """``(present, value)``: whether the config gets this key, and its value. A row whose controls are not
        mounted yet answers with the value it was given."""
        if not self.ready():
            return self.initially_present and self.initial_value is not None, self.initial_value
        return self._collect()

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
        if self._note is not None:
            self._note.update(shown or (self.doc_line if self._note_doc else ""))
        self.set_class(bool(shown), "-has-error")

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


def _on_off(value: bool, on: str = "on", off: str = "off") -> str:
    return f" {on}" if value else f" {off}"


def _join_path(parts: Tuple[str, ...]) -> str:
    out = ""
    for part in parts:
        if part.startswith("["):
            out += part
        else:
            out += ("." if out else "") + part
    return out


class SwitchRow(FieldRow):
    def compose(self) -> ComposeResult:
        value = bool(self.initial_value) if self.initially_present else bool(self.spec.default is True)
        self.control = Switch(value=value, classes="field-control")
        self._state = Label(_on_off(value), classes="switch-state")
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield self.control
            yield self._state
        yield from self.compose_footer()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self._state.update(_on_off(event.value))
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
        with Horizontal(classes="field-line"):
            yield self.compose_label()
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
        with Horizontal(classes="field-line"):
            yield self.compose_label()
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


def _model_form(owner: FieldRow, model: type, data: Dict[str, Any], path: Tuple[str, ...], classes: str = "") -> Any:
    from probe_tui.app.form.model_form import ModelForm

    form = ModelForm(model, data, path, classes=classes)
    form.owner_row = owner
    return form


class SectionRow(FieldRow):
    """A nested model. Optional ones have an on/off switch; the rest are a collapsible section."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.add_class("section-row")
        data = value if isinstance(value, dict) else {}
        self.form = _model_form(self, spec.model, data, path)

    def compose(self) -> ComposeResult:
        if self.spec.optional:
            on = self.initially_present and self.initial_value is not None
            self.control = Switch(value=on, classes="field-control section-switch")
            self._state = Label(_on_off(on, "set", "not set"), classes="switch-state")
            with Horizontal(classes="field-line"):
                yield self.compose_label()
                yield self.control
                yield self._state
            yield from self.compose_footer()
            self.form.display = on
            self.form.add_class("section-body")
            yield self.form
        else:
            self.control = Collapsible(title=self.spec.name, collapsed=False, classes="section")
            with self.control:
                if self.spec.description:
                    yield Static(self.spec.description, classes="section-doc", markup=False)
                yield self.compose_note(doc=False)
                yield self.form

    def ready(self) -> bool:
        return self.control is not None and self.control.is_mounted

    def focus_control(self) -> None:
        if isinstance(self.control, Switch):
            self.control.focus()
        else:
            for row in self.form.rows.values():
                if row.ready():
                    row.focus_control()
                    return

    def on_switch_changed(self, event: Switch.Changed) -> None:
        if event.switch is self.control:
            event.stop()
            self.form.display = event.value
            self._state.update(_on_off(event.value, "set", "not set"))
            self.edited()

    def child_rows(self) -> Iterator[FieldRow]:
        return iter(self.form.rows.values())

    def _collect(self) -> Tuple[bool, Any]:
        if isinstance(self.control, Switch) and not self.control.value:
            return False, None
        return True, self.form.collect()


class UnionRow(FieldRow):
    """A choice of variants (models), then the form of the chosen one."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.form: Optional[Any] = None

    def _initial_variant(self) -> Optional[str]:
        data = self.initial_value if self.initially_present else self.spec.default
        if isinstance(data, dict) and self.spec.discriminator and self.spec.discriminator in data:
            label = str(data[self.spec.discriminator])
            if label in self.spec.variants:
                return label
        if self.spec.optional and not self.initially_present:
            return None
        return next(iter(self.spec.variants))

    def compose(self) -> ComposeResult:
        variant = self._initial_variant()
        options = [(label, label) for label in self.spec.variants]
        self.control = Select(options, value=variant if variant else Select.NULL, allow_blank=self.spec.optional,
                              compact=True, prompt="(not set)", classes="field-control variant-select")
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield self.control
        yield from self.compose_footer()
        data = self.initial_value if isinstance(self.initial_value, dict) else {}
        self._body = Vertical(classes="section-body variant-body")
        if variant:
            self.form = _model_form(self, self.spec.variants[variant], data, self.path_parts)
            self._body.compose_add_child(self.form)
        yield self._body

    async def on_select_changed(self, event: Select.Changed) -> None:
        if event.select is not self.control:
            return
        event.stop()
        carried: Dict[str, Any] = self.form.collect() if self.form is not None else {}
        await self._body.remove_children()
        self.form = None
        if event.value is not Select.NULL:
            model = self.spec.variants[str(event.value)]
            names = [s.name for s in S.describe_model(model)]
            keep = {k: v for k, v in carried.items() if k in names and k != self.spec.discriminator}
            self.form = _model_form(self, model, keep, self.path_parts)
            await self._body.mount(self.form)
        self.edited()

    def child_rows(self) -> Iterator[FieldRow]:
        return iter(self.form.rows.values()) if self.form is not None else iter(())

    def _collect(self) -> Tuple[bool, Any]:
        if self.form is None:
            return False, None
        return True, self.form.collect()


class ModelListRow(FieldRow):
    """A list of nested models: each item its own section, with add and remove buttons."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.add_class("section-row")
        self.items: List[Tuple[Collapsible, Any, Button]] = []

    def compose(self) -> ComposeResult:
        items = self.initial_value if self.initially_present and isinstance(self.initial_value, list) else []
        self.control = Button(f"Add {self.spec.name} item", compact=True, classes="field-control list-add")
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield self.control
        yield from self.compose_footer()
        self._body = Vertical(classes="section-body list-body")
        for item in items:
            self._body.compose_add_child(self._item(item if isinstance(item, dict) else {}))
        yield self._body

    def _item(self, data: Dict[str, Any]) -> Widget:
        index = len(self.items)
        form = _model_form(self, self.spec.model, data, self.path_parts + (f"[{index}]",), classes="item-form")
        remove = Button("Remove item", compact=True, classes="list-remove")
        box = Collapsible(form, remove, title=f"{self.spec.name}[{index}]", collapsed=False, classes="list-item")
        self.items.append((box, form, remove))
        return box

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button is self.control:
            event.stop()
            box = self._item({})
            await self._body.mount(box)
            self.items[-1][1].focus_first()
        else:
            index = next((n for n, (_, _, remove) in enumerate(self.items) if remove is event.button), None)
            if index is None:
                return
            event.stop()
            values = [form.collect() for _, form, _ in self.items]
            del values[index]
            await self._body.remove_children()
            self.items = []
            await self._body.mount_all([self._item(v) for v in values])
            self.control.focus()
        self.edited()

    def child_rows(self) -> Iterator[FieldRow]:
        for _, form, _ in self.items:
            yield from form.rows.values()

    def _collect(self) -> Tuple[bool, Any]:
        values = [form.collect() for _, form, _ in self.items]
        if values or self.initially_present:
            return True, values
        return False, None


ROW_CLASSES = {
    S.BOOL: SwitchRow,
    S.CHOICE: ChoiceRow,
    S.SCALAR: InputRow,
    S.SCALAR_LIST: InputRow,
    S.JSON: InputRow,
    S.MODEL: SectionRow,
    S.UNION: UnionRow,
    S.MODEL_LIST: ModelListRow,
}


def make_row(spec: S.FieldSpec, path: Tuple[str, ...], data: Dict[str, Any]) -> FieldRow:
    present = spec.name in data
    if spec.kind == S.BOOL and spec.optional:
        # A switch has no "not set" state: an optional bool (None means something of its own) is a choice of
        # (not set) / true / false, so that an unset field stays out of the config.
        return ChoiceRow(spec, path, data.get(spec.name), present, choices=(True, False))
    return ROW_CLASSES[spec.kind](spec, path, data.get(spec.name), present)
