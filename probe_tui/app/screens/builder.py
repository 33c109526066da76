"""The config builder: choose a task, edit the generated form, see errors live at their fields, save, run."""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import Collapsible, Label, Select, Static

from probe_tui.app.actions import bindings_for
from probe_tui.app.config_backend import Issue, Validation, task_of, write_json_atomic
from probe_tui.app.form.fields import FieldRow
from probe_tui.app.form.model_form import (
    ModelForm,
    all_rows,
    place_issues,
)
from probe_tui.app.screens.base import AppScreen
from probe_tui.app.screens.builder_build import FormBuild
from probe_tui.app.screens.path_prompt import PathPrompt, relative_text
from probe_tui.app.styles import themed
from probe_tui.app.widgets.key_footer import KeyFooter

VALIDATE_DELAY_S = 0.2


class BuilderScreen(FormBuild, AppScreen):
    """Edits one config. ``data`` is a config dict (native or msprobe shape); ``path`` is where it saves."""

    focused: Reactive[Optional[Widget]] = Reactive(None, repaint=False)
    """As Textual's, without repainting the whole screen on each focus change (a Tab drew all of the form
    again): the widgets that gain and lose the focus restyle and repaint themselves."""

    SCOPE = "builder"
    CSS_PATH = "builder.tcss"
    BINDINGS = bindings_for("builder")
    AUTO_FOCUS = "#task"

    def __init__(self, data: Dict[str, Any], *, path: Optional[Path] = None, backend: Any = None,
                 origin: str = "", notes: Optional[List[Issue]] = None) -> None:
        """``notes``: what loading the file reported (msprobe keys that were dropped), shown above the form."""
        super().__init__()
        self.notes: List[Issue] = list(notes or [])
        self.suggested_name: Optional[str] = None
        """File name the first save proposes (default: ``<task>.json``)."""
        self._backend = backend
        self._path: Optional[Path] = None
        self._disk_mtime: Optional[float] = None
        """When the file at ``path`` was last modified as this builder knows it (saving over a newer one asks)."""
        self.path = Path(path) if path else None
        self.origin = origin
        self.initial_data = dict(data)
        self.validation = Validation()
        self._baseline: Optional[str] = None
        self._timer = None
        self._advanced_open = False
        self._current_row: Optional[FieldRow] = None
        self._edits = 0
        """Edits made at the focused field since the form was built (controls report their first value as they
        mount: those do not count); the baseline is taken again when the build ends before any."""
        self._holder = Vertical(classes="form-holder")
        """Holds the form shown (``replace_form`` builds the next one in another holder)."""

    # ---- construction -------------------------------------------------------------------------------------
    @property
    def path(self) -> Optional[Path]:
        """Where ctrl+s saves (None: not saved yet)."""
        return self._path

    @path.setter
    def path(self, value: Optional[Path]) -> None:
        self._path = Path(value) if value is not None else None
        self._disk_mtime = _mtime(self._path) if self._path is not None else None

    @property
    def backend(self) -> Any:
        return self._backend or self.app.backend

    @property
    def tasks(self) -> Dict[str, type]:
        return self.backend.tasks()

    @property
    def task(self) -> str:
        value = self.query_one("#task", Select).value
        return str(value)

    def compose(self) -> ComposeResult:
        tasks = self.tasks
        task = task_of(self.initial_data, tasks) or next(iter(tasks))
        yield Static(self._title_text(), id="builder-title")
        with Horizontal(id="task-bar"):
            yield Label("task", id="task-label")
            yield Select([(name, name) for name in tasks], value=task, allow_blank=False, compact=True, id="task")
            yield Static("", id="validity")
        with VerticalScroll(id="form-scroll", can_focus=False):
            yield Static("", id="issues")
            self._holder = Vertical(self._new_form(tasks[task], self.initial_data), classes="form-holder")
            yield self._holder
        yield Static("", id="field-help")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.validate_now()
        self._baseline = self._snapshot()
        self._show_help(None)
        self.call_after_refresh(self._build_step, self.form)

    def _new_form(self, model: type, data: Dict[str, Any]) -> ModelForm:
        """A form that mounts a screenful of rows first and the rest after the first frame (``_build_step``)."""
        self._edits = 0
        return ModelForm(model, data, id="form", line_budget=max(16, self.app.size.height - 7))

    def _title_text(self) -> Text:
        where = relative_text(self.path, self.app.root) if self.path else "not saved yet"
        text = Text("Config builder", style="bold")
        text.append(f" · {where}", style="")
        if self.origin:
            text.append(f" · from {self.origin}", style="italic")
        return text

    # ---- the form -----------------------------------------------------------------------------------------
    @property
    def form(self) -> ModelForm:
        return self._holder.query_one("#form", ModelForm)

    def collect(self) -> Dict[str, Any]:
        """The config the form holds now (only what is set; defaults apply to the rest)."""
        return self.form.collect()

    def _snapshot(self) -> str:
        return json.dumps(self.collect(), sort_keys=True, default=str)

    @property
    def dirty(self) -> bool:
        return self._baseline is not None and self._snapshot() != self._baseline

    def mark_saved(self) -> None:
        """Take the form as it is now as the saved state (after a load)."""
        self._baseline = self._snapshot()
        self._update_title()

    @on(FieldRow.Edited)
    def _edited(self, event: FieldRow.Edited) -> None:
        focused = self.focused
        if focused is not None and (focused is event.row or event.row in focused.ancestors):
            self._edits += 1
        self._schedule_validation()

    def _schedule_validation(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(VALIDATE_DELAY_S, self.validate_now)

    def validate_now(self) -> Validation:
        """Validate the form's config and show each issue at its field (or in the summary above the form)."""
        self._timer = None
        data = self.collect()
        try:
            result = self.backend.validate(data)
        except Exception as exc:  # a schema bug must not take the app down
            result = Validation(None, [Issue("", f"validation failed: {exc}")])
        self.validation = result
        unplaced = place_issues(all_rows(self.form), [(i.path, i.text) for i in result.issues])
        self._show_summary(result, unplaced)
        self._update_title()
        return result

    def _show_summary(self, result: Validation, unplaced: List[Any]) -> None:
        validity = self.query_one("#validity", Static)
        if result.ok:
            validity.update(Text("✓ valid", style=themed("bold success")))
        else:
            n = len(result.issues)
            validity.update(Text(f"✗ {n} error{'s' if n != 1 else ''} · ^n next", style=themed("bold error")))
        lines = Text()
        for path, text in unplaced:
            lines.append(f"✗ {path + ': ' if path else ''}{text}\n", style=themed("error"))
        for warning in self.notes + result.warnings:
            lines.append(f"! {warning.line()}\n", style=themed("warning"))
        issues = self.query_one("#issues", Static)
        lines.rstrip()
        issues.update(lines)
        issues.display = bool(lines.plain)

    def _update_title(self) -> None:
        title = self._title_text()
        if self.dirty or self.path is None:
            title.append("  [modified]" if self.dirty else "", style=themed("warning"))
        self.query_one("#builder-title", Static).update(title)

    @on(Select.Changed, "#task")
    async def _task_changed(self, event: Select.Changed) -> None:
        event.stop()
        await self.switch_task(str(event.value))

    async def switch_task(self, task: str) -> None:
        """Rebuild the form for ``task``, keeping the values of the fields both tasks have."""
        old = self.form
        if old.model is self.tasks[task]:
            return
        current = old.collect()
        try:
            data = self.backend.starter(task)
        except Exception as exc:  # a schema without a starter: start from the task alone
            self.notify(f"{task}: no starter config ({exc}); starting from the task's defaults", severity="warning")
            data = {"task": task}
        new_fields = set(_field_names(self.tasks[task]))
        old_task = current.get("task")
        for key, value in current.items():
            if key in new_fields and key not in ("task", old_task, task):
                data[key] = value
        data["task"] = task
        await self.replace_form(data)

    async def replace_form(self, data: Dict[str, Any], notes: Optional[List[Issue]] = None) -> None:
        """Fill the builder with another config (``notes``: what loading it reported)."""
        self.notes = list(notes or [])
        tasks = self.tasks
        task = task_of(data, tasks) or self.task
        # The new form is built in a hidden holder beside the old one, so the screen keeps a form until the new
        # one is ready (it was blank for seconds); the old one leaves in the frame the new one shows.
        old = self._holder
        holder = Vertical(self._new_form(tasks[task], data), classes="form-holder")
        holder.display = False
        await self.query_one("#form-scroll", VerticalScroll).mount(holder, after=old)
        self._holder = holder
        with self.app.batch_update():
            await old.remove()
            holder.display = True
        self._current_row = None
        selector = self.query_one("#task", Select)
        if selector.value != task:
            with selector.prevent(Select.Changed):
                selector.value = task
        self.validate_now()
        self.call_after_refresh(self._build_step, self.form)

    # ---- help bar -----------------------------------------------------------------------------------------
    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        node = event.widget
        while node is not None and not isinstance(node, FieldRow):
            node = node.parent
        # Only a row without nested rows is marked: a class change restyles the row's whole subtree, and a
        # section's subtree is most of the form.
        marked = node if node is not None and next(node.child_rows(), None) is None else None
        if marked is not self._current_row:
            if self._current_row is not None:
                self._current_row.remove_class("-current")
            if marked is not None:
                marked.add_class("-current")
            self._current_row = marked
        self._show_help(node)

    def _update_focus_styles(self, focused: Optional[Widget] = None, blurred: Optional[Widget] = None) -> None:
        """Restyle what a focus change touches: the two widgets, their children, and their ancestors that have a
        ``:focus-within`` style of their own (Textual restyles every descendant of the outermost such ancestor:
        with the form's sections, the whole form on each Tab). No rule of the app styles a descendant by an
        ancestor's ``:focus-within``."""
        nodes: Set[Any] = set()
        for widget in (focused, blurred):
            if widget is not None:
                nodes.update(widget.walk_children(with_self=True))
                nodes.update(a for a in widget.ancestors if getattr(a, "_has_focus_within", False))
        if nodes:
            self.app.stylesheet.update_nodes(nodes, animate=True)

    def _show_help(self, row: Optional[FieldRow]) -> None:
        help_bar = self.query_one("#field-help", Static)
        if row is None:
            task = self.task
            doc = self.backend.task_doc(task) if hasattr(self.backend, "task_doc") else ""
            help_bar.update(Text(f"task · {task}\n{doc}" if doc else f"task · {task}"), layout=False)
        else:
            help_bar.update(Text(row.help_text()), layout=False)  # a fixed height: no relayout of the form

    # ---- actions ------------------------------------------------------------------------------------------
    def action_choose_task(self) -> None:
        self.query_one("#task", Select).focus()

    async def action_next_error(self) -> None:
        rows = [row for row in all_rows(self.form) if row.local_error or row.error]
        if not rows:
            self.notify("No field has an error.", timeout=3)
            return
        focused = self.focused
        current = None
        node = focused
        while node is not None and not isinstance(node, FieldRow):
            node = node.parent
        if node in rows:
            current = rows.index(node)
        row = rows[(current + 1) % len(rows)] if current is not None else rows[0]
        self._focus_row(await self._reveal(row))

    async def action_toggle_advanced(self) -> None:
        self._advanced_open = not self._advanced_open
        if self._advanced_open:
            await self.form.unfold_advanced()
        for fold in self.query(".advanced-fold").results(Collapsible):
            fold.collapsed = not self._advanced_open

    def action_save(self) -> None:
        self._save_then(None)

    def action_save_as(self) -> None:
        self._ask_path_then(None)

    def action_load(self) -> None:
        def loaded(path: Optional[Path]) -> None:
            if path is not None:
                self.app.load_into_builder(path, screen=self)

        self.app.push_screen(PathPrompt("Load a config (ours, or msprobe's config.json)", self.app.root,
                                        must_exist=True), loaded)

    async def action_run(self) -> None:
        result = self.validate_now()
        if not result.ok:
            self.notify(f"Fix {len(result.issues)} error(s) before running (ctrl+n goes to the next one).",
                        severity="error", title="Not runnable")
            await self.action_next_error()
            return
        problem = self.backend.run_problem(result.job) if hasattr(self.backend, "run_problem") else None
        if problem:
            self.notify(problem, severity="error", title="Not runnable")
            return
        self._save_then(lambda path: self.app.start_run(path))

    def action_back(self) -> None:
        if not self.dirty:
            self.dismiss()
            return

        def answered(choice: str) -> None:
            if choice == "save":
                self._save_then(lambda _path: self.dismiss())
            elif choice == "discard":
                self.dismiss()

        from probe_tui.app.screens.confirm import ConfirmScreen

        self.app.push_screen(ConfirmScreen("This config has unsaved changes.",
                                           [("Save", "save"), ("Discard", "discard"), ("Keep editing", "cancel")]),
                             answered)

    # ---- saving -------------------------------------------------------------------------------------------
    def _ask_path_then(self, then, suggestion: Optional[str] = None) -> None:
        if suggestion is None:
            suggestion = (relative_text(self.path, self.app.root) if self.path
                          else self.suggested_name or f"{self.task}.json")

        def chosen(path: Optional[Path]) -> None:
            if path is None:
                return
            if path.exists() and path != self.path:
                self._confirm_overwrite(path, then, f"{relative_text(path, self.app.root)} already exists.")
            elif self.write(path) and then is not None:
                then(path)

        self.app.push_screen(PathPrompt("Save the config as", self.app.root, suggestion), chosen)

    def _confirm_overwrite(self, path: Path, then, question: str) -> None:
        """Ask before replacing a file this builder did not load or save (or one changed on disk since)."""
        from probe_tui.app.screens.confirm import ConfirmScreen

        def answered(choice: str) -> None:
            if choice == "overwrite":
                if self.write(path) and then is not None:
                    then(path)
            elif choice == "rename":
                self._ask_path_then(then, relative_text(path, self.app.root))

        self.app.push_screen(ConfirmScreen(question, [("Overwrite", "overwrite"), ("Other name", "rename"),
                                                      ("Cancel", "cancel")]), answered)

    def _save_then(self, then) -> None:
        if self.path is None:
            self._ask_path_then(then)
            return
        if self.path.exists() and _mtime(self.path) != self._disk_mtime:
            self._confirm_overwrite(self.path, then, f"{relative_text(self.path, self.app.root)} changed on disk "
                                                     "since it was loaded.")
            return
        if (self.dirty or not self.path.exists()) and not self.write(self.path):
            return
        if then is not None:
            then(self.path)

    def write(self, path: Path) -> bool:
        """Write the config to ``path``: normalised when valid, as typed otherwise (with a warning)."""
        result = self.validate_now()
        try:
            data = self.backend.normalise(result.job) if result.ok else self.collect()
        except Exception as exc:  # never lose the user's work to a schema bug: save what the form holds
            self.notify(f"could not normalise the config ({exc}); saving it as typed", severity="warning")
            data = self.collect()
        try:
            write_json_atomic(path, data)
        except OSError as exc:
            self.notify(f"{path}: cannot write: {exc.strerror or exc}", severity="error", title="Not saved")
            return False
        self.path = Path(path)
        self._disk_mtime = _mtime(self.path)
        self._baseline = self._snapshot()
        self._update_title()
        shown = relative_text(self.path, self.app.root)
        if result.ok:
            self.notify(f"Saved {shown}", timeout=3)
        else:
            self.notify(f"Saved {shown} with {len(result.issues)} error(s): it will not run as it is.",
                        severity="warning")
        return True


def _mtime(path: Path) -> Optional[float]:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _field_names(model: type) -> List[str]:
    from probe_tui.app.form.spec import describe_model

    return [s.name for s in describe_model(model)]
