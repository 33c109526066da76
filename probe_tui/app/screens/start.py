"""Where a new config starts from: a task's starter (as ``probe-tui init``), a shipped sample, or a file."""

from pathlib import Path
from typing import List, Optional, Tuple

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from probe_tui.app.config_backend import sample_comment

# What the screen dismisses with: ("task", name) | ("sample", path) | ("file", "")
Choice = Tuple[str, str]


def _line(text: str) -> Text:
    """One line per option: long task descriptions end in an ellipsis instead of wrapping."""
    return Text(text, no_wrap=True, overflow="ellipsis")


class StartScreen(ModalScreen):
    """A list of starting points; enter picks one, escape cancels (dismisses with None)."""

    CSS_PATH = "start.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel", id="start.cancel")]

    def __init__(self, tasks: List[Tuple[str, str]], samples: List[Tuple[str, Path]]) -> None:
        super().__init__()
        self.tasks = tasks
        self.samples = samples

    def compose(self) -> ComposeResult:
        options: List[Optional[Option]] = []
        options.append(Option("New config for a task (as probe-tui init):", disabled=True))
        for name, doc in self.tasks:
            options.append(Option(_line(f"  {name:<16} {doc}"), id=f"task:{name}"))
        if self.samples:
            options.append(None)
            options.append(Option("Start from a sample config:", disabled=True))
            for name, path in self.samples:
                options.append(Option(_line(f"  {name:<26} {sample_comment(path)}"), id=f"sample:{path}"))
        options.append(None)
        options.append(Option("Load a config file… (ours, or msprobe's config.json)", id="file:"))
        with Vertical(id="start-box"):
            yield Static("Start a config", id="start-title")
            yield OptionList(*options, id="start-options")
            yield Static("up/down: choose · enter: start · escape: cancel", id="start-keys")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.focus()
        options.highlighted = 1 if options.option_count > 1 else 0

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        kind, _, value = str(event.option.id).partition(":")
        self.dismiss((kind, value))

    def action_cancel(self) -> None:
        self.dismiss(None)
