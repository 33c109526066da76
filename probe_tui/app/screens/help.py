"""The help screen: generated from the action registry for the screen it was opened on."""

from typing import Dict, List, Optional

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from probe_tui.app.actions import SCOPE_TITLES, actions_by_group, bindings_for, keys_label
from probe_tui.app.widgets.key_footer import KeyFooter

TABLE_SCOPES = ("home", "monitor", "grad", "overflow", "freebench", "acccheck")
"""Screens whose tables are FindTables (/ searches, f filters)."""


def help_tables(scope: str, keymap: Optional[Dict[str, str]] = None) -> List[Table]:
    """One table per scope (the screen's, its tables' keys when it has searchable tables, then the app's), a row
    per action."""
    tables = []
    own = [scope] if scope and scope != "app" else []
    for sc in own + (["table"] if scope in TABLE_SCOPES else []) + ["app"]:
        table = Table(title=SCOPE_TITLES[sc], title_justify="left", title_style="bold", expand=True,
                      show_edge=False, box=None, padding=(0, 1))
        table.add_column("Keys", style="bold", no_wrap=True, min_width=12)
        table.add_column("Action", no_wrap=True)
        table.add_column("What it does", ratio=1)
        groups = actions_by_group(sc)
        for group, actions in groups.items():
            if len(groups) > 1:
                table.add_row(Text(group, style="italic"), "", "")
            for action in actions:
                table.add_row(keys_label(action, keymap), action.description, action.help)
        tables.append(table)
    return tables


class HelpScreen(ModalScreen):
    """Keys of the screen below and of the app."""

    SCOPE = "help"
    CSS_PATH = "help.tcss"
    BINDINGS = bindings_for("help")

    def __init__(self, scope: str, title: str) -> None:
        super().__init__()
        self.scope = scope
        self.screen_title = title

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(Text(f"Keys · {self.screen_title}", style="bold"), id="help-title")
            yield Static(Text("Tab / shift+tab move between fields and tables; enter opens or toggles; "
                              "ctrl+p finds any action by name.", style="italic"), id="help-intro")
            for table in help_tables(self.scope, getattr(self.app, "user_keymap", None)):
                yield Static(table, classes="help-table")
        yield KeyFooter()

    def action_close(self) -> None:
        self.dismiss()
