"""The rank selector every view of one rank's data shares (dump browser, compare browser, live monitor, overflow
and grad views).

A view calls :meth:`RankSelector.setup_ranks` once it knows the run's ranks; ``R`` (``<scope>.rank``) opens the
:class:`~probe_tui.app.screens.rank_picker.RankPicker`, ``<`` / ``>`` step through the ranks, and the view's
:meth:`RankSelector.rank_changed` redraws. The choice is remembered per run (``ProbeApp.ranks_chosen``, keyed by
:func:`run_key`), so the dump browser, the monitor and the run summary of one run show the same rank. A run with
one rank shows neither the bar nor the keys (``check_action`` hides them from the footer).
"""

from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from rich.text import Text

RANK_ACTIONS = ("pick_rank", "step_rank")


def run_key(path: Path) -> str:
    """The run a path belongs to: the folder holding ``run.json`` at or above it (a rank folder, a store file), else
    the path's own folder (a rank folder stands for its parent)."""
    path = Path(path).resolve()
    folder = path if path.is_dir() else path.parent
    for candidate in (folder, *list(folder.parents)[:3]):
        if (candidate / "run.json").is_file():
            return str(candidate)
    if folder.name.startswith("rank") and folder.name[4:].isdigit():
        return str(folder.parent)
    return str(folder)


def rank_list(ranks: Sequence[int]) -> str:
    """``0-3`` for consecutive ranks, else the first few: ``0, 2, 5 … (8 ranks)``."""
    ranks = sorted(int(r) for r in ranks)
    if not ranks:
        return "none"
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return str(ranks[0]) if len(ranks) == 1 else "{}-{}".format(ranks[0], ranks[-1])
    shown = ", ".join(str(r) for r in ranks[:4])
    return shown + (" … ({} ranks)".format(len(ranks)) if len(ranks) > 4 else "")


class RankSelector:
    """Mixed into a view screen (before ``AppScreen``). ``ALL_RANKS``: the view has an every-rank mode (the value
    ``None``), else it always shows one rank. Screens give the bar (a ``RankBar`` with id ``rank-bar``), override
    :meth:`rank_changed` and may override :meth:`rank_entries` (the picker's per-rank notes) and :meth:`rank_note`
    (the bar's note)."""

    ALL_RANKS = True
    path: Path

    def init_ranks(self) -> None:
        self.ranks: List[int] = []
        self.rank: Optional[int] = None
        """The rank shown; None: every rank (only where ``ALL_RANKS``)."""

    @property
    def multi_rank(self) -> bool:
        return len(getattr(self, "ranks", ())) > 1

    def setup_ranks(self, ranks: Sequence[int], default: Optional[int] = None) -> None:
        """The run's ranks, and the rank shown: the one chosen earlier for this run, else ``default`` (else every
        rank, or the lowest where the view shows one rank at a time). Does not call :meth:`rank_changed`."""
        self.ranks = sorted({int(r) for r in ranks})
        remembered = self._memory()
        key = run_key(self.path)
        if key in remembered and (remembered[key] is None and self.ALL_RANKS or remembered[key] in self.ranks):
            self.rank = remembered[key]
        elif default is not None and default in self.ranks:
            self.rank = default
        else:
            self.rank = None if self.ALL_RANKS or not self.ranks else self.ranks[0]
        self.show_rank_bar()
        self.refresh_bindings()  # type: ignore[attr-defined]

    def _memory(self) -> dict:
        app: Any = self.app  # type: ignore[attr-defined]
        memory = getattr(app, "ranks_chosen", None)
        if memory is None:
            memory = {}
            try:
                app.ranks_chosen = memory
            except Exception:
                pass
        return memory

    def choose_rank(self, rank: Optional[int]) -> None:
        """Show ``rank`` (None: every rank), remember it for the run, and redraw the view."""
        if rank is None and not self.ALL_RANKS:
            return
        if rank is not None and rank not in self.ranks:
            return
        self.rank = rank
        self._memory()[run_key(self.path)] = rank
        self.show_rank_bar()
        self.rank_changed()

    # ---- keys ----------------------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: Tuple[object, ...]) -> Optional[bool]:
        if action in RANK_ACTIONS and not self.multi_rank:
            return False  # a one-rank run: no rank keys in the footer
        return True

    def action_step_rank(self, delta: int) -> None:
        if not self.multi_rank:
            return
        cycle: List[Optional[int]] = ([None] if self.ALL_RANKS else []) + list(self.ranks)
        position = cycle.index(self.rank) if self.rank in cycle else 0
        self.choose_rank(cycle[(position + int(delta)) % len(cycle)])

    def action_pick_rank(self) -> None:
        if not self.multi_rank:
            return
        from probe_tui.app.screens.rank_picker import RankPicker

        def chosen(answer: Optional[Tuple[str, Optional[int]]]) -> None:
            if answer is not None:
                self.choose_rank(answer[1])

        entries = self.rank_entries()
        every = self.every_rank_entry() if self.ALL_RANKS else None
        self.app.push_screen(RankPicker(entries, self.rank, every), chosen)  # type: ignore[attr-defined]

    # ---- what a view says about its ranks ------------------------------------------------------------------
    def rank_entries(self) -> List[Tuple[int, Text]]:
        """(rank, note) per rank for the picker."""
        return [(r, Text("")) for r in self.ranks]

    def every_rank_entry(self) -> Text:
        return Text("every rank")

    def rank_note(self) -> Text:
        """What the bar adds after the rank (the view's own news about its ranks)."""
        return Text("")

    def rank_changed(self) -> None:
        """Redraw the view for ``self.rank``."""

    def show_rank_bar(self) -> None:
        from probe_tui.app.widgets.rank_bar import RankBar

        try:
            bar = self.query_one("#rank-bar", RankBar)  # type: ignore[attr-defined]
        except Exception:
            return
        bar.show(self.ranks, self.rank, self.rank_note())
