"""The model hierarchy of a compare result (table ``tree``) as a terminal tree: our answer to msprobe's
TensorBoard graph view, usable over SSH.

Each node is a module or an operator; its colour is its worst verdict (itself and everything below it), its label
names the largest rel_err below it, and nodes with no golden counterpart are marked ``∅ unmatched``. Children are
added when a node is first expanded, at most :data:`CHILD_PAGE` at a time, so a million-row result opens at once.
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from engines.compare.verdicts import ERROR, PASS, SKIPPED, UNMATCHED, WARNING
from engines.dumps.names import parse_record
from engines.dumps.rows import DIR_BACKWARD, KIND_MODULE, KIND_PARAM_GRAD
from probe_tui.app.data.compare_result import TreeIndex
from probe_tui.app.styles import themed
from probe_tui.formatting import number_text

CHILD_PAGE = 400
GLYPHS = {ERROR: ("✗", "bold error"), WARNING: ("!", "warning"), PASS: ("✓", "success"),
          UNMATCHED: ("∅", "muted"), SKIPPED: ("·", "dim")}


@dataclass
class NodeRef:
    """What a tree line stands for: a piece (``node`` -1) or a node of the index; ``more`` lines show the next
    page of ``parent``'s children from ``offset``."""

    piece: int
    node: int = -1
    loaded: bool = False
    more_parent: Optional[int] = None
    offset: int = 0


def short_name(record: str) -> str:
    """``Module.layers.0.attn.Attention.forward.0`` -> ``layers.0.attn (Attention)``; operators stay as named."""
    parsed = parse_record(record)
    if parsed.kind == KIND_PARAM_GRAD:
        return "{} ({}) parameters_grad".format(parsed.module_path, parsed.base.split(".")[-1])
    if parsed.kind != KIND_MODULE:
        return record
    cls = parsed.base.split(".")[-1]
    text = "{} ({})".format(parsed.module_path or parsed.base, cls)
    if parsed.direction == DIR_BACKWARD:
        text += " backward"
    if parsed.index:
        text += " #{}".format(parsed.index)
    return text


def node_label(index: TreeIndex, node: int) -> Text:
    cols = index.columns
    verdict = int(cols["worst_verdict"][node])
    n_rows, n_unmatched = int(cols["n_rows"][node]), int(cols["n_unmatched"][node])
    glyph, spec = GLYPHS.get(verdict, ("?", ""))
    unmatched = n_rows > 0 and n_unmatched == n_rows
    if unmatched:
        glyph, spec = GLYPHS[UNMATCHED]
    style = themed(spec)
    label = Text.assemble((glyph + " ", style), (short_name(index.name(node)), style if verdict != PASS else ""))
    notes = []
    if unmatched:
        notes.append("unmatched")
    else:
        if int(cols["n_error"][node]):
            notes.append("{} err".format(int(cols["n_error"][node])))
        if n_unmatched:
            notes.append("{} unmatched".format(n_unmatched))
        rel = float(cols["max_rel_err"][node])
        if rel == rel:
            notes.append("rel_err " + number_text(rel, 3))
    if notes:
        label.append("  " + " · ".join(notes), style="dim")
    return label


class ResultTree(Tree):
    """A :class:`TreeIndex` shown lazily; ``node.data`` is a :class:`NodeRef`."""

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__("model", id=id)
        self.show_root = False
        self.guide_depth = 2
        self.index: Optional[TreeIndex] = None

    def load(self, index: TreeIndex, rank: Optional[int] = None,
             marks: Optional[Dict[Tuple[int, int], Text]] = None) -> None:
        """The pieces of ``index`` (of ``rank`` only, unless None); ``marks``: a note after a (rank, step) piece's
        line (where that rank diverged first)."""
        self.index = index
        self.clear()
        kinds = index.columns.get("kind")
        flat = kinds is not None and len(kinds) > 0 and not bool((kinds == KIND_MODULE).any())
        first = True
        for p, (piece_rank, step) in enumerate(index.pieces):
            if rank is not None and piece_rank != rank:
                continue
            children = index.children(p)
            label = Text.assemble(("rank {} · step {}".format(piece_rank, step), "bold"),
                                  ("  {:,} top-level nodes".format(len(children)), "dim"))
            mark = (marks or {}).get((piece_rank, step))
            if mark is not None:
                label.append("  ")
                label.append_text(mark)
            if flat:
                label.append("  (no module records: capture at level mix or L0 for the hierarchy)", style="italic dim")
            node = self.root.add(label, data=NodeRef(p), allow_expand=len(children) > 0)
            if first:
                self._fill(node)
                node.expand()
                first = False
        self.root.expand()

    def _fill(self, node: TreeNode) -> None:
        ref: NodeRef = node.data
        if ref.loaded or self.index is None:
            return
        ref.loaded = True
        parent_code = -1 if ref.node < 0 else int(self.index.columns["node"][ref.node])
        self._add_page(node, ref.piece, parent_code, 0)

    def _add_page(self, node: TreeNode, piece: int, parent_code: int, offset: int) -> None:
        index = self.index
        children = index.children(piece, parent_code)
        for child in children[offset:offset + CHILD_PAGE].tolist():
            has = index.has_children(child)
            node.add(node_label(index, child), data=NodeRef(piece, child), allow_expand=has)
        rest = len(children) - offset - CHILD_PAGE
        if rest > 0:
            node.add_leaf(Text("… {:,} more (enter shows them)".format(rest), style="italic dim"),
                          data=NodeRef(piece, -1, True, parent_code, offset + CHILD_PAGE))

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        if isinstance(event.node.data, NodeRef):
            self._fill(event.node)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        ref = event.node.data
        if isinstance(ref, NodeRef) and ref.more_parent is not None and event.node.parent is not None:
            parent = event.node.parent
            event.node.remove()
            self._add_page(parent, ref.piece, ref.more_parent, ref.offset)
