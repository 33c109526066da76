"""The compare browser's rank selector: which rank diverged first, each rank's first divergence, and the views of
one rank (its rows, its entries of the ranking, its pieces of the model tree).

The first-divergence ranking is one list across ranks (docs/COMPARE.md), so its head names the rank that diverged
first; each rank's first entry in it is that rank's own first divergence. Shown in the rank bar, the rank picker
and as a mark on the model tree's piece lines.
"""

from typing import Any, Dict, List, Optional, Tuple

from rich.text import Text

from probe_tui.app.data.compare_result import diverged, first_by_rank, first_rank
from probe_tui.app.ranks import RankSelector
from probe_tui.app.styles import themed
from probe_tui.formatting import number_text


def _suspect(table: Dict[str, Any], position: int) -> str:
    from engines.compare.suspects import suspect_record

    return suspect_record(table, position)


class CompareRanks(RankSelector):
    """Mixed into :class:`~probe_tui.app.screens.compare.CompareScreen` (which holds ``data``, ``divergence_all``,
    ``tree_ready`` and the widgets)."""

    data: Any
    divergence_all: Optional[Dict[str, Any]]

    # ---- what the ranking says about ranks -----------------------------------------------------------------
    _firsts_of: Tuple[Any, Dict[int, int]] = (None, {})

    def _firsts(self) -> Dict[int, int]:
        """Rank -> its first entry in the ranking (computed once per ranking: the picker asks for every rank)."""
        table = self.divergence_all
        if table is None:
            return {}
        if self._firsts_of[0] is not table:
            self._firsts_of = (table, first_by_rank(table))
        return self._firsts_of[1]

    def first_rank(self) -> Optional[int]:
        """The rank that diverged first (None: no divergence, or the ranking is not read yet)."""
        return first_rank(self.divergence_all) if self.divergence_all is not None else None

    def rank_first_text(self, rank: int) -> Text:
        """``✗ first divergence: <record> · step s · score x`` for one rank (``✓ no divergence``)."""
        table = self.divergence_all
        position = self._firsts().get(rank)
        if table is None:
            return Text("reading the ranking…", style="italic dim")
        if position is None or not diverged(table, position):
            return Text("✓ no divergence", style=themed("success"))
        head = ("◀ diverged first: ", themed("bold error")) if rank == self.first_rank() else ("✗ first divergence: ", themed("error"))
        return Text.assemble(head, (_suspect(table, position), "bold"),
                             (" · step {} · score {} · #{}".format(int(table["step"][position]),
                                                                  number_text(table["score"][position], 3),
                                                                  int(table["position"][position])), "dim"))

    def rank_entries(self) -> List[Tuple[int, Text]]:
        return [(r, self.rank_first_text(r)) for r in self.ranks]

    def every_rank_entry(self) -> Text:
        return Text("every rank's rows; the ranking across ranks", style="dim")

    def rank_note(self) -> Text:
        first = self.first_rank()
        if self.divergence_all is None:
            return Text("")
        if first is None:
            return Text("no rank diverges", style=themed("success"))
        if self.rank is None or self.rank == first:
            position = self._firsts()[first]
            return Text.assemble(("rank {} diverged first".format(first), themed("bold error")),
                                 (": " + _suspect(self.divergence_all, position), ""))
        return Text.assemble(self.rank_first_text(self.rank), ("  (rank {} diverged first)".format(first), themed("error")))

    def tree_marks(self) -> Dict[Tuple[int, int], Text]:
        """The model tree's piece notes: each rank's first divergence at its (rank, step)."""
        table = self.divergence_all
        if table is None or len(self.ranks) < 2:
            return {}
        first = self.first_rank()
        marks = {}
        for rank, position in self._firsts().items():
            if not diverged(table, position):
                continue
            head = ("◀ diverged first: ", themed("bold error")) if rank == first else ("✗ first divergence: ", themed("error"))
            marks[(rank, int(table["step"][position]))] = Text.assemble(head, _suspect(table, position))
        return marks
