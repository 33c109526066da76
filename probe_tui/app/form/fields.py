"""The form's field rows: one control per kind of field, each with its label and its error line.

Every row knows its config path (``statistics.scope``) so that a validation issue can be placed at it, and
answers :meth:`FieldRow.collect` with ``(present, value)``: absent values are left out of the config so that
the schema's defaults apply.
"""

from typing import Any, Dict, List, Optional, Tuple

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
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
        if spec.advanced:
            self.add_class("advanced")

    @property
    def path(self) -> str:
        return _join_path(self.path_parts)

    def label_text(self) -> str:
        return self.spec.name + ("" if not self.spec.required else " *")

    def compose_label(self) -> Label:
        return Label(self.label_text(), classes="field-label")

    def compose_footer(self) -> ComposeResult:
        if self.spec.description:
            yield Static(self.spec.description.splitlines()[0], classes="field-doc", markup=False)
        yield Static("", classes="field-error", markup=False)

    def collect(self) -> Tuple[bool, Any]:
        """``(present, value)``: whether the config gets this key, and its value. A row not composed yet
        (nested rows are built after their parent) answers with the value it was given."""
        try:
            return self._collect()
        except NoMatches:
            return self.initially_present and self.initial_value is not None, self.initial_value

    def _collect(self) -> Tuple[bool, Any]:
        raise NotImplementedError

    def on_mount(self) -> None:
        self._render_error()

    def focus_control(self) -> None:
        for widget in self.query("Input, Select, Switch, Button"):
            if widget.focusable:
                widget.focus()
                return

    def set_error(self, message: Optional[str]) -> None:
        """Show (or clear, with None) the schema's message for this field; a local parse error wins."""
        self.error = message
        self._render_error()

    def _render_error(self) -> None:
        shown = self.local_error or self.error
        lines = self.query(".field-error")
        if lines:
            lines.first(Static).update(shown or "")
        self.set_class(bool(shown), "-has-error")

    def _set_local_error(self, message: Optional[str]) -> None:
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
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield Switch(value=value, classes="field-control")
            yield Label(_on_off(value), classes="switch-state")
        yield from self.compose_footer()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        event.stop()
        self.query_one(".switch-state", Label).update(_on_off(event.value))
        self.edited()

    def _collect(self) -> Tuple[bool, Any]:
        value = self.query_one(Switch).value
        if self.initially_present or not self.spec.has_default or value != self.spec.default:
            return True, value
        return False, None


class ChoiceRow(FieldRow):
    def compose(self) -> ComposeResult:
        options = [(V.format_scalar(c), c) for c in self.spec.choices]
        current = self.initial_value if self.initially_present else self.spec.default
        allow_blank = self.spec.optional or not self.spec.has_default
        value = current if current in self.spec.choices else Select.NULL
        if value is Select.NULL and not allow_blank:
            value = self.spec.choices[0]
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield Select(options, value=value, allow_blank=allow_blank, compact=True, prompt="(not set)",
                         classes="field-control")
        yield from self.compose_footer()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self.edited()

    def _collect(self) -> Tuple[bool, Any]:
        value = self.query_one(Select).value
        if value is Select.NULL or value is Select.BLANK:
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
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield Input(self.initial_text(), placeholder=self.placeholder(), compact=True, classes="field-control")
        yield from self.compose_footer()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.collect()  # refreshes the local parse error
        self.edited()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.screen.focus_next()

    def _collect(self) -> Tuple[bool, Any]:
        text = self.query_one(Input).value
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


class SectionRow(FieldRow):
    """A nested model. Optional ones have an on/off switch; the rest are a collapsible section."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.add_class("section-row")

    def compose(self) -> ComposeResult:
        from probe_tui.app.form.model_form import ModelForm

        data = self.initial_value if isinstance(self.initial_value, dict) else {}
        form = ModelForm(self.spec.model, data, self.path_parts)
        if self.spec.optional:
            on = self.initially_present and self.initial_value is not None
            with Horizontal(classes="field-line"):
                yield self.compose_label()
                yield Switch(value=on, classes="field-control section-switch")
                yield Label(_on_off(on, "set", "not set"), classes="switch-state")
            yield from self.compose_footer()
            form.display = on
            form.add_class("section-body")
            yield form
        else:
            with Collapsible(title=self.spec.name, collapsed=False, classes="section"):
                if self.spec.description:
                    yield Static(self.spec.description, classes="section-doc", markup=False)
                yield Static("", classes="field-error", markup=False)
                yield form

    def compose_footer(self) -> ComposeResult:
        yield from super().compose_footer()

    def on_switch_changed(self, event: Switch.Changed) -> None:
        if event.switch.has_class("section-switch"):
            event.stop()
            self.query_one("ModelForm").display = event.value
            self.query_one(".switch-state", Label).update(_on_off(event.value, "set", "not set"))
            self.edited()

    def _render_error(self) -> None:
        shown = self.local_error or self.error
        lines = self.query(".field-error")
        if lines:
            lines.first(Static).update(shown or "")
        self.set_class(bool(shown), "-has-error")

    def _collect(self) -> Tuple[bool, Any]:
        from probe_tui.app.form.model_form import ModelForm

        forms = self.query(ModelForm)
        switches = self.query(".section-switch")
        if not forms or (self.spec.optional and not switches):
            return self.initially_present and self.initial_value is not None, self.initial_value
        if self.spec.optional and not switches.first(Switch).value:
            return False, None
        return True, forms.first().collect()


class UnionRow(FieldRow):
    """A choice of variants (models), then the form of the chosen one."""

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
        from probe_tui.app.form.model_form import ModelForm

        variant = self._initial_variant()
        options = [(label, label) for label in self.spec.variants]
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield Select(options, value=variant if variant else Select.NULL, allow_blank=self.spec.optional,
                         compact=True, prompt="(not set)", classes="field-control variant-select")
        yield from self.compose_footer()
        data = self.initial_value if isinstance(self.initial_value, dict) else {}
        body = Vertical(classes="section-body variant-body")
        if variant:
            body.compose_add_child(ModelForm(self.spec.variants[variant], data, self.path_parts))
        yield body

    async def on_select_changed(self, event: Select.Changed) -> None:
        from probe_tui.app.form.model_form import ModelForm

        if not event.select.has_class("variant-select"):
            return
        event.stop()
        body = self.query_one(".variant-body", Vertical)
        old = body.query(ModelForm)
        carried: Dict[str, Any] = old.first().collect() if old else {}
        await body.remove_children()
        if event.value is not Select.NULL:
            model = self.spec.variants[str(event.value)]
            keep = {k: v for k, v in carried.items() if k in _keys_of(model) and k != self.spec.discriminator}
            await body.mount(ModelForm(model, keep, self.path_parts))
        self.edited()

    def _collect(self) -> Tuple[bool, Any]:
        from probe_tui.app.form.model_form import ModelForm

        forms = self.query_one(".variant-body", Vertical).query(ModelForm)
        if not forms:
            return False, None
        return True, forms.first().collect()


class ModelListRow(FieldRow):
    """A list of nested models: each item its own section, with add and remove buttons."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.add_class("section-row")
        self._count = 0

    def compose(self) -> ComposeResult:
        items = self.initial_value if self.initially_present and isinstance(self.initial_value, list) else []
        with Horizontal(classes="field-line"):
            yield self.compose_label()
            yield Button(f"Add {self.spec.name} item", compact=True, classes="field-control list-add")
        yield from self.compose_footer()
        with Vertical(classes="section-body list-body"):
            for item in items:
                yield self._item(item if isinstance(item, dict) else {})

    def _item(self, data: Dict[str, Any]) -> Widget:
        from probe_tui.app.form.model_form import ModelForm

        index = self._count
        self._count += 1
        form = ModelForm(self.spec.model, data, self.path_parts + (f"[{index}]",), classes="item-form")
        remove = Button("Remove item", compact=True, classes="list-remove")
        return Collapsible(form, remove, title=f"{self.spec.name}[{index}]", collapsed=False, classes="list-item")

    async def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        body = self.query_one(".list-body", Vertical)
        if event.button.has_class("list-add"):
            item = self._item({})
            await body.mount(item)
            controls = item.query("Input, Select, Switch")
            if controls:
                controls.first().focus()
        elif event.button.has_class("list-remove"):
            current = self.collect()[1] or []
            items = [item for item in body.children if item.has_class("list-item")]
            index = next(n for n, item in enumerate(items) if event.button in item.query(Button))
            del current[index]
            await body.remove_children()
            self._count = 0
            await body.mount_all([self._item(d) for d in current])
            self.query_one(".list-add", Button).focus()
        self.edited()

    def _collect(self) -> Tuple[bool, Any]:
        body = self.query_one(".list-body", Vertical)
        values = [item.query(".item-form").first().collect() for item in body.children if item.has_class("list-item")]
        if values or self.initially_present:
            return True, values
        return False, None


def _keys_of(model: type) -> List[str]:
    return [s.name for s in S.describe_model(model)]


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
    return ROW_CLASSES[spec.kind](spec, path, data.get(spec.name), present)
