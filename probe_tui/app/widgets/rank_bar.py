"""One line that says which rank a view shows, and how to change it; hidden on a run with one rank."""

from typing import Optional, Sequence

from rich.text import Text
from textual.widgets import Static

from probe_tui.app.ranks import rank_list
from probe_tui.app.widgets.line_label import same_text


class RankBar(Static):
    DEFAULT_CSS = """
    RankBar {
        height: 1;
        padding: 0 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
        display: none;
    }
    RankBar.multi {
        display: block;
    }
    """

    def __init__(self, *, id: Optional[str] = "rank-bar") -> None:
        super().__init__("", id=id)
        self.text = Text("")

    def show(self, ranks: Sequence[int], rank: Optional[int], note: Optional[Text] = None) -> None:
        multi = len(ranks) > 1
        self.set_class(multi, "multi")
        if not multi:
            self._set(Text(""))
            return
        if rank is None:
            head = Text.assemble(("every rank", "bold reverse"), " ({}: {})".format(len(ranks), rank_list(ranks)))
        else:
            head = Text.assemble(("rank {}".format(rank), "bold reverse"),
                                 " of {} ({})".format(len(ranks), rank_list(ranks)))
        text = Text.assemble(head)
        if note is not None and note.plain:
            text.append(" · ")
            text.append_text(note)
        text.append("  R picks · < > steps", style="dim")
        self._set(text)

    def _set(self, text: Text) -> None:
        """Show ``text``: one line, so no layout of the screen (a Static's update asks for one); nothing when it
        is already shown (the monitor shows the bar again with every snapshot of the run)."""
        self.text = text
        if not same_text(self.content, text):
            self.update(text, layout=False)
