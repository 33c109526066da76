"""The form's rows that hold other forms: a nested model (a section), a choice of variants, a list of sections;
and :func:`make_row`, which picks the row class of a field.

Their nested forms are built with the row (not mounted), so the fields under them are known before they show;
a row composed with a line budget hands its forms what is left of it (``grant_lines``).
"""

from typing import Any, Dict, Iterator, List, Optional, Tuple

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Button, Collapsible, Select, Static, Switch

from probe_tui.app.form import spec as S
from probe_tui.app.form.fields import SWITCH_WIDTH, ChoiceRow, FieldRow, InputRow, SwitchRow, on_off


def _model_form(owner: FieldRow, model: type, data: Dict[str, Any], path: Tuple[str, ...], classes: str = "") -> Any:
    from probe_tui.app.form.model_form import ModelForm

    form = ModelForm(model, data, path, classes=classes)
    form.owner_row = owner
    return form


class SectionRow(FieldRow):
    """A nested model. Optional ones have an on/off switch; the rest are a collapsible section."""

    control_width = SWITCH_WIDTH

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.add_class("section-row")
        self.draws_label = bool(spec.optional)
        data = value if isinstance(value, dict) else {}
        self.form = _model_form(self, spec.model, data, path)
        self.set_initially = bool(spec.optional and present and value is not None)
        """An optional section that starts set (one not set mounts its fields when it is switched on)."""

    def estimated_lines(self) -> int:
        if self.spec.optional:
            return 2 + (_form_lines(self.form) if self.set_initially else 0)
        return 1 + (1 if self.spec.description else 0) + _form_lines(self.form)

    def grant_lines(self, lines: int) -> None:
        composed_with_form = not self.spec.optional or self.set_initially
        if composed_with_form and self.form.line_budget is None and not self.form.is_attached:
            self.form.line_budget = lines - (2 if self.spec.optional else 1 + (1 if self.spec.description else 0))

    def child_forms(self) -> List[Any]:
        return [self.form]

    @property
    def switched_off(self) -> bool:
        """An optional section that is not set (its fields are hidden, and not mounted until it is set)."""
        return isinstance(self.control, Switch) and not self.control.value

    def compose(self) -> ComposeResult:
        if self.spec.optional:
            on = self.set_initially
            self.control = Switch(value=on, classes="field-control section-switch")
            yield self.control
            yield from self.compose_footer()
            self.form.add_class("section-body")
            if on:
                yield self.form
        else:
            self.control = Collapsible(title=self.spec.name, collapsed=False, classes="section")
            with self.control:
                if self.spec.description:
                    yield Static(self.spec.description, classes="section-doc", markup=False)
                yield self.compose_note(doc=False)
                yield self.form

    def line_after_control(self) -> str:
        return on_off(self.control.value, "set", "not set") if isinstance(self.control, Switch) else ""

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

    async def on_switch_changed(self, event: Switch.Changed) -> None:
        if event.switch is self.control:
            event.stop()
            if event.value and not self.form.is_attached:
                await self.mount(self.form)
            self.form.display = event.value
            self.refresh()
            self.edited()

    def child_rows(self) -> Iterator[FieldRow]:
        return iter(self.form.rows.values())

    def _collect(self) -> Tuple[bool, Any]:
        if isinstance(self.control, Switch) and not self.control.value:
            return False, None
        return True, self.form.collect()

    def _collect_unmounted(self) -> Tuple[bool, Any]:
        if self.spec.optional and not self.set_initially:
            return False, None
        return True, self.form.collect()


class UnionRow(FieldRow):
    """A choice of variants (models), then the form of the chosen one."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.variant = self._initial_variant()
        data = value if isinstance(value, dict) else {}
        self.form: Optional[Any] = (_model_form(self, spec.variants[self.variant], data, path)
                                    if self.variant else None)

    def estimated_lines(self) -> int:
        return 2 + (_form_lines(self.form) if self.form is not None else 0)

    def grant_lines(self, lines: int) -> None:
        if self.form is not None and self.form.line_budget is None and not self.form.is_attached:
            self.form.line_budget = lines - 2

    def child_forms(self) -> List[Any]:
        return [self.form] if self.form is not None else []

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
        variant = self.variant
        options = [(label, label) for label in self.spec.variants]
        self.control = Select(options, value=variant if variant else Select.NULL, allow_blank=self.spec.optional,
                              compact=True, prompt="(not set)", classes="field-control variant-select")
        yield self.control
        yield from self.compose_footer()
        self._body = Vertical(classes="section-body variant-body")
        if self.form is not None:
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

    def _collect_unmounted(self) -> Tuple[bool, Any]:
        return self._collect()


class ModelListRow(FieldRow):
    """A list of nested models: each item its own section, with add and remove buttons."""

    def __init__(self, spec: S.FieldSpec, path: Tuple[str, ...], value: Any, present: bool) -> None:
        super().__init__(spec, path, value, present)
        self.add_class("section-row")
        self.items: List[Tuple[Collapsible, Any, Button]] = []
        items = value if present and isinstance(value, list) else []
        self._initial_boxes = [self._item(item if isinstance(item, dict) else {}) for item in items]
        """The items' sections, built with the row so that their fields are known before they are mounted."""

    def estimated_lines(self) -> int:
        return 2 + sum(2 + _form_lines(form) for _, form, _ in self.items)

    def grant_lines(self, lines: int) -> None:
        left = lines - 2
        for _, form, _ in self.items:
            if form.line_budget is None and not form.is_attached:
                form.line_budget = max(0, left - 1)
            left -= 2 + _form_lines(form)

    def child_forms(self) -> List[Any]:
        return [form for _, form, _ in self.items]

    def compose(self) -> ComposeResult:
        self.control = Button(f"Add {self.spec.name} item", compact=True, classes="field-control list-add")
        yield self.control
        yield from self.compose_footer()
        self._body = Vertical(classes="section-body list-body")
        for box in self._initial_boxes:
            self._body.compose_add_child(box)
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

    def _collect_unmounted(self) -> Tuple[bool, Any]:
        return self._collect()


def _form_lines(form: Any) -> int:
    """About how many lines a nested form takes: its shown rows, and one for its advanced fold."""
    rows = [row for name, row in form.rows.items() if not row.spec.advanced]
    return sum(row.estimated_lines() for row in rows) + (1 if form.advanced_names else 0)


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
