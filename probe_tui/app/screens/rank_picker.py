"""The rank picker (``R`` in a view of a multi-rank run): a list of the run's ranks, each with what the view knows
about it (the rank that diverged first, the latest value of a series, inf/nan rows), and the every-rank entry
where the view has one. Typing digits moves to that rank, so a run of thousands of ranks is one keystroke per
digit away."""

from typing import List, Optional, Tuple

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Key
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from probe_tui.app.actions import bindings_for
from probe_tui.app.styles import themed
from probe_tui.app.widgets.key_footer import KeyFooter

EVERY = "every"


class RankPicker(ModalScreen):
    """Dismisses with ``("rank", r)``, ``("every", None)`` or None (closed)."""

    SCOPE = "ranks"
    CSS_PATH = "rank_picker.tcss"
    BINDINGS = bindings_for("ranks")

    def __init__(self, entries: List[Tuple[int, Text]], current: Optional[int], every: Optional[Text] = None) -> None:
        super().__init__()
        self.entries = entries
        self.current = current
        self.every = every
        self.typed = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="ranks-box"):
            yield Label(Text.assemble(("Show rank", "bold"), ("  type a number · enter shows · esc closes", "dim")),
                        id="ranks-title")
            options: List[Option] = []
            if self.every is not None:
                options.append(Option(Text.assemble(("every rank", "bold"), "  ", self.every), id=EVERY))
            for rank, note in self.entries:
                label = Text.assemble(("rank {}".format(rank), "bold"))
                if note.plain:
                    label.append("  ")
                    label.append_text(note)
                options.append(Option(label, id=str(rank)))
            yield OptionList(*options, id="ranks-list")
        yield KeyFooter()

    def on_mount(self) -> None:
        listing = self.query_one("#ranks-list", OptionList)
        listing.focus()
        wanted = EVERY if self.current is None else str(self.current)
        try:
            listing.highlighted = listing.get_option_index(wanted)
        except Exception:
            listing.highlighted = 0

    def on_key(self, event: Key) -> None:
        """Digits find a rank: the first rank whose number starts with what was typed."""
        if event.character is not None and event.character.isdigit():
            self.typed += event.character
        elif event.key == "backspace" and self.typed:
            self.typed = self.typed[:-1]
        else:
            return
        event.stop()
        listing = self.query_one("#ranks-list", OptionList)
        for rank, _ in self.entries:
            if str(rank) == self.typed:
                listing.highlighted = listing.get_option_index(str(rank))
                break
        else:
            for rank, _ in self.entries:
                if str(rank).startswith(self.typed):
                    listing.highlighted = listing.get_option_index(str(rank))
                    break
        self.query_one("#ranks-title", Label).update(Text.assemble(("Show rank ", "bold"), (self.typed, themed("bold info"))))

    @on(OptionList.OptionSelected, "#ranks-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self._answer(event.option.id)

    def _answer(self, option_id: Optional[str]) -> None:
        if option_id == EVERY:
            self.dismiss(("every", None))
        elif option_id is not None:
            self.dismiss(("rank", int(option_id)))

    def action_choose(self) -> None:
        listing = self.query_one("#ranks-list", OptionList)
        if listing.highlighted is not None:
            self._answer(listing.get_option_at_index(listing.highlighted).id)

    def action_close(self) -> None:
        self.dismiss(None)
