"""Ask for a file path: an input, with the JSON files of the folder listed below it to pick from."""

import os
from pathlib import Path
from typing import List, Optional

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

MAX_LISTED = 200


def json_files_near(root: Path, text: str, any_file: bool = False) -> List[str]:
    """JSON files (every file with ``any_file``) and folders in the folder the typed text points into (relative
    to ``root``), matching its file part."""
    typed = Path(text).expanduser() if text else Path(".")
    base = typed if text.endswith(os.sep) or text in ("", ".") else typed.parent
    folder = base if base.is_absolute() else root / base
    stem = "" if text.endswith(os.sep) or text in ("", ".") else typed.name
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for entry in entries:
        if entry.name.startswith(".") or stem.lower() not in entry.name.lower():
            continue
        shown = str(base / entry.name) if str(base) != "." else entry.name
        if entry.is_dir():
            out.append(shown + os.sep)
        elif any_file or entry.name.endswith(".json"):
            out.append(shown)
        if len(out) >= MAX_LISTED:
            break
    return out


class PathPrompt(ModalScreen):
    """Dismisses with the chosen absolute :class:`Path`, or None on escape."""

    CSS_PATH = "path_prompt.tcss"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="path.cancel"),
        Binding("down", "to_list", "Files", show=False),
    ]

    def __init__(self, title: str, root: Path, initial: str = "", must_exist: bool = False,
                 folders: bool = False) -> None:
        """``folders``: any existing file or folder is an answer (the app's "open a path"), every file listed."""
        super().__init__()
        self.title_text = title
        self.root = root
        self.initial = initial
        self.must_exist = must_exist or folders
        self.folders = folders

    def compose(self) -> ComposeResult:
        with Vertical(id="path-box"):
            yield Static(self.title_text, id="path-title", markup=False)
            yield Input(self.initial, placeholder="a folder or file" if self.folders else "path of a .json file",
                        id="path-input")
            yield Static("", id="path-error")
            yield OptionList(id="path-files")
            yield Static("enter: accept · down: pick a file · escape: cancel", id="path-keys")

    def on_mount(self) -> None:
        self.query_one(Input).focus()
        self._refresh_files(self.initial)

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        self._refresh_files(event.value)
        self.query_one("#path-error", Static).update("")

    def _refresh_files(self, text: str) -> None:
        files = self.query_one("#path-files", OptionList)
        files.clear_options()
        files.add_options([Option(name, id=name) for name in json_files_near(self.root, text, self.folders)])

    def action_to_list(self) -> None:
        files = self.query_one("#path-files", OptionList)
        if files.option_count:
            files.focus()
            if files.highlighted is None:
                files.highlighted = 0

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        name = str(event.option.id)
        box = self.query_one(Input)
        box.value = name
        box.cursor_position = len(name)
        box.focus()
        if not name.endswith(os.sep):
            self._accept(name)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        self._accept(event.value)

    def _accept(self, text: str) -> None:
        text = text.strip()
        if not text:
            self._error("type a file name")
            return
        path = Path(text).expanduser()
        path = path if path.is_absolute() else self.root / path
        if path.is_dir() and not self.folders:
            self._error(f"{text} is a folder: add a file name")
            return
        if self.must_exist and not path.exists():
            self._error(f"{text}: no such file or folder")
            return
        if self.must_exist and not self.folders and not path.is_file():
            self._error(f"{text}: no such file")
            return
        self.dismiss(path)

    def _error(self, message: str) -> None:
        self.query_one("#path-error", Static).update(message)

    def action_cancel(self) -> None:
        self.dismiss(None)


def relative_text(path: Optional[Path], root: Path) -> str:
    """``path`` relative to ``root`` when it is below it, else absolute."""
    if path is None:
        return ""
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return str(path)
