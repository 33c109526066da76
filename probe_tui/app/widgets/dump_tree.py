"""The dump browser's tree: step → rank → module → operator → tensors, filled as it is opened.

Rank lines are filled once their piece has been read (the screen reads it in a worker and calls
:meth:`DumpTree.fill_piece`); record lines add their rows and child records when first expanded, at most
:data:`PAGE` children at a time. With a filter, only the kept records (and their ancestors) are shown.
"""

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Set

from rich.text import Text
from textual.visual import VisualType
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from engines.dumps.rows import DIR_NAMES, KIND_MODULE, KIND_NAMES, STAT_BITS
from probe_tui.app.data.dump_index import DumpIndex, Piece
from probe_tui.app.styles import themed
from probe_tui.app.widgets.result_tree import short_name
from probe_tui.formatting import number_text

PAGE = 400


@dataclass
class DumpRef:
    """What a tree line stands for. ``kind``: step, rank, record, row or more (the next page of ``names``)."""

    kind: str
    step: int
    rank: int = -1
    record: str = ""
    row: int = -1
    loaded: bool = False
    names: List[str] = field(default_factory=list)
    offset: int = 0


def record_label(piece: Piece, name: str) -> Text:
    node = piece.records[name]
    shown = short_name(name) if node.kind == KIND_MODULE else name
    label = Text(shown, style="bold" if node.kind == KIND_MODULE else "")
    notes = []
    if node.rows.size:
        notes.append("{} row{}".format(node.rows.size, "" if node.rows.size == 1 else "s"))
    if node.children:
        notes.append("{} inside".format(len(node.children)))
    if notes:
        label.append("  " + " · ".join(notes), style="dim")
    if node.nonfinite:
        label.append("  inf/nan", style=themed("bold error"))
    return label


def dtype_text(value: object) -> str:
    """A dtype as people read it: ``torch.float32`` -> ``float32``; a non-tensor argument's Python type, stored
    as msprobe writes it (``<class 'int'>``), -> ``int``."""
    text = str(value).replace("torch.", "")
    if text.startswith("<class '") and text.endswith("'>"):
        text = text[len("<class '"):-2].rpartition(".")[2]
    return text


def row_label(piece: Piece, i: int) -> Text:
    rows = piece.rows
    dtype = dtype_text(rows.dtype[i])
    label = Text.assemble((str(rows.slot[i]), themed("info")), " ", (dtype, "dim"))
    if rows.is_tensor[i]:
        label.append(" " + str(rows.shape[i]), style="dim")
    if rows.text[i] is not None:
        label.append(" = " + str(rows.text[i]))
    elif rows.valid[i] & STAT_BITS["max"]:
        if not rows.is_tensor[i]:
            label.append(" = " + number_text(rows.max[i]))
        else:
            label.append("  max {} min {}".format(number_text(rows.max[i], 3), number_text(rows.min[i], 3)),
                         style="dim")
    if piece.nonfinite[i]:
        label.append("  inf/nan", style=themed("bold error"))
    if rows.data[i] >= 0:
        label.append("  ▣", style=themed("success"))
    return label


class DumpTree(Tree):
    _holding = 0
    """Inside :meth:`held` (class attributes: Tree's constructor already invalidates)."""
    _held = False

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__("dump", id=id)
        self.show_root = False
        self.guide_depth = 2
        self.index: Optional[DumpIndex] = None
        self.keep: Optional[dict] = None  # (rank, step) -> kept record names, when a filter is on

    @contextmanager
    def held(self) -> Iterator[None]:
        """Add, fill and open many lines at once: Textual's Tree forgets its lines and asks for a layout on each
        node added or expanded (a refilled step of 400 records did it 400 times, ~100 ms of CPU); here once at
        the end."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._held:
                self._held = False
                super()._invalidate()

    def _invalidate(self) -> None:
        if self._holding:
            self._held = True
            return
        super()._invalidate()

    def notify_style_update(self) -> None:
        """A restyle (the tree losing the focus to the search field, a theme) draws the lines again; Tree also
        forgets its lines and asks for a layout of the screen (~20 ms of CPU at a ``/``), as if nodes had changed."""
        super(Tree, self).notify_style_update()
        self._line_cache.clear()
        self._updates += 1
        self.refresh()

    def process_label(self, label: VisualType) -> Text:  # type: ignore[override]
        """A one-line Text as it is (Tree splits every label into lines and keeps a copy of the first)."""
        if isinstance(label, Text) and "\n" not in label.plain:
            return label
        return super().process_label(label)  # type: ignore[arg-type]

    def load(self, index: DumpIndex, keep: Optional[dict] = None, rank: Optional[int] = None) -> None:
        """The steps and ranks of ``index``; with ``keep``, only the pieces and records it names; with ``rank``,
        only that rank's pieces."""
        self.index, self.keep = index, keep
        with self.held():
            self._load(index, keep, rank)

    def _load(self, index: DumpIndex, keep: Optional[dict], rank: Optional[int]) -> None:
        self.clear()
        first_rank: Optional[TreeNode] = None
        for step in index.steps():
            ranks = [r for r in index.ranks_at(step) if (keep is None or keep.get((r, step)))
                     and (rank is None or r == rank)]
            if not ranks:
                continue
            label = Text.assemble(("step {}".format(step), "bold"), ("  {} rank{}".format(
                len(ranks), "" if len(ranks) == 1 else "s"), "dim"))
            # filtered, every step that kept a record is open (not only the first)
            step_node = self.root.add(label, data=DumpRef("step", step), expand=first_rank is None or keep is not None)
            for rank in ranks:
                rank_node = step_node.add(Text("rank {}".format(rank), style="bold"), data=DumpRef("rank", step, rank))
                if first_rank is None:
                    first_rank = rank_node
        self.root.expand()

    def first_rank_line(self) -> Optional[TreeNode]:
        for step_node in self.root.children:
            if step_node.children:
                return step_node.children[0]
        return None

    def _kept(self, piece: Piece) -> Optional[Set[str]]:
        return None if self.keep is None else self.keep.get((piece.rank, piece.step), set())

    def label_piece(self, node: TreeNode, piece: Piece) -> None:
        """A rank line's label once its piece is read: its records, rows and inf/nan rows."""
        label = Text.assemble(("rank {}".format(piece.rank), "bold"),
                              ("  {:,} records · {:,} rows".format(len(piece.records), len(piece.rows)), "dim"))
        bad = int(piece.nonfinite.sum())
        if bad:
            label.append("  {:,} inf/nan rows".format(bad), style=themed("bold error"))
        node.set_label(label)

    def fill_piece(self, node: TreeNode, piece: Piece) -> None:
        """Fill a rank line with its top-level records (and, filtered, open the kept ones)."""
        ref: DumpRef = node.data
        if ref.loaded:
            return
        ref.loaded = True
        kept = self._kept(piece)
        names = [n for n in piece.top if kept is None or n in kept]
        with self.held():
            self.label_piece(node, piece)
            self._add_records(node, piece, names, 0)
            if kept is not None:
                self._open_kept(node, piece, kept, budget=[200])

    def _add_records(self, node: TreeNode, piece: Piece, names: List[str], offset: int) -> None:
        for name in names[offset:offset + PAGE]:
            rec = piece.records[name]
            node.add(record_label(piece, name), data=DumpRef("record", piece.step, piece.rank, name),
                     allow_expand=bool(rec.rows.size or rec.children))
        rest = len(names) - offset - PAGE
        if rest > 0:
            node.add_leaf(Text("… {:,} more (enter shows them)".format(rest), style="italic dim"),
                          data=DumpRef("more", piece.step, piece.rank, names=names, offset=offset + PAGE))

    def fill_record(self, node: TreeNode, piece: Piece) -> None:
        ref: DumpRef = node.data
        if ref.loaded:
            return
        ref.loaded = True
        rec = piece.records[ref.record]
        with self.held():
            for i in rec.rows.tolist():
                node.add_leaf(row_label(piece, i), data=DumpRef("row", piece.step, piece.rank, ref.record, i))
            kept = self._kept(piece)
            children = [c for c in rec.children if kept is None or c in kept]
            self._add_records(node, piece, children, 0)

    def _open_kept(self, node: TreeNode, piece: Piece, kept: Set[str], budget: List[int]) -> None:
        """Open the kept records under ``node`` with their rows (depth first, at most ``budget`` records)."""
        for child in list(node.children):
            ref = child.data
            if budget[0] <= 0:
                return
            if isinstance(ref, DumpRef) and ref.kind == "record" and ref.record in kept:
                budget[0] -= 1
                self.fill_record(child, piece)
                child.expand()
                self._open_kept(child, piece, kept, budget)

    def show_more(self, node: TreeNode) -> None:
        ref: DumpRef = node.data
        parent = node.parent
        if parent is None or self.index is None:
            return
        with self.held():
            node.remove()
            self._add_records(parent, self.index.piece(ref.rank, ref.step), ref.names, ref.offset)


def record_kind_text(piece: Piece, name: str) -> str:
    node = piece.records[name]
    rows = piece.rows
    direction = DIR_NAMES[int(rows.direction[node.rows[0]])] if node.rows.size else ""
    kind = KIND_NAMES[node.kind] if node.kind < len(KIND_NAMES) else str(node.kind)
    return " · ".join(x for x in (kind, direction) if x)
