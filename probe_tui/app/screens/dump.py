"""The dump browser: step → rank → module → operator → tensors of one dump (ours or msprobe's), with
statistics, tensor values and a histogram; a name search and an inf/nan filter.

The dump is opened, its pieces read and its tensors sliced in thread workers that post typed messages; the tree
is filled on the UI thread from what they return.
"""

from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input, Static, Tree

from probe_tui.app.actions import bindings_for
from probe_tui.app.data.dump_index import DumpIndex, Piece
from probe_tui.app.data.tensor_preview import Preview, PreviewError, histogram, read_slice
from probe_tui.app.ranks import RankSelector
from probe_tui.app.screens.base import AppScreen
from probe_tui.app.screens.dump_detail import dump_detail, piece_detail, record_detail, tensor_detail
from probe_tui.app.screens.path_prompt import relative_text
from probe_tui.app.styles import themed
from probe_tui.app.widgets.detail_pane import DetailPane
from probe_tui.app.widgets.dump_tree import DumpRef, DumpTree
from probe_tui.app.widgets.key_footer import KeyFooter
from probe_tui.app.widgets.line_label import LineLabel
from probe_tui.app.widgets.rank_bar import RankBar

DETAIL_DELAY_S = 0.08


class DumpScreen(RankSelector, AppScreen):
    SCOPE = "dump"
    CSS_PATH = "dump.tcss"
    BINDINGS = bindings_for("dump")

    class Opened(Message):
        def __init__(self, index: Optional[DumpIndex], error: str = "") -> None:
            super().__init__()
            self.index, self.error = index, error

    class PieceReady(Message):
        def __init__(self, rank: int, step: int, piece: Optional[Piece], error: str = "") -> None:
            super().__init__()
            self.rank, self.step, self.piece, self.error = rank, step, piece, error

    class Filtered(Message):
        def __init__(self, keep: Optional[dict], matches: int, error: str = "") -> None:
            super().__init__()
            self.keep, self.matches, self.error = keep, matches, error

    class PreviewReady(Message):
        def __init__(self, key: Tuple, preview: Optional[Preview], error: str = "") -> None:
            super().__init__()
            self.key, self.preview, self.error = key, preview, error

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.index: Optional[DumpIndex] = None
        self.search = ""
        self.nonfinite_only = False
        self.log_scale = False
        self.slice_index = ""
        self.matches = 0
        self._selected: Optional[DumpRef] = None
        self._timer: Optional[Timer] = None
        self._preview_key: Optional[Tuple] = None
        self._preview: Optional[Preview] = None
        self.detail_renderable: Any = None
        """What the detail pane shows (a rich renderable)."""
        self._asking = "search"
        self.keep: Optional[dict] = None
        """(rank, step) -> the records the filters keep; None when nothing is filtered."""
        self.init_ranks()

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("Dump", "bold"), " · " + relative_text(self.path, self.app.root)), id="dump-title")
        yield RankBar()
        with Horizontal(id="dump-body"):
            yield DumpTree(id="dump-tree")
            with VerticalScroll(id="dump-detail"):
                yield DetailPane(Text("Reading the dump…", style="italic"), id="dump-detail-body")
        yield LineLabel("", id="dump-status")
        yield Input(id="dump-input")
        yield KeyFooter()

    @property
    def dump_tree(self) -> DumpTree:
        return self.query_one("#dump-tree", DumpTree)

    def on_mount(self) -> None:
        self.query_one("#dump-input", Input).display = False
        self.dump_tree.focus()
        self._open()

    def on_unmount(self) -> None:
        if self.index is not None:
            self.index.close()

    # ---- opening ------------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="dump-open", exit_on_error=False)
    def _open(self) -> None:
        try:
            index = DumpIndex(self.path)
        except Exception as exc:
            self.post_message(self.Opened(None, str(exc)))
            return
        self.post_message(self.Opened(index))

    @on(Opened)
    def _opened(self, message: "DumpScreen.Opened") -> None:
        if message.index is None:
            self._detail(Text(message.error, style=themed("error")))
            self.notify(message.error, severity="error", title="Dump")
            return
        self.index = message.index
        self.setup_ranks(self.index.ranks)
        self.dump_tree.load(self.index, rank=self.rank)
        self._detail(dump_detail(self.index))
        self._show_status()
        first = self.dump_tree.first_rank_line()
        if first is not None:
            first.expand()

    def rank_changed(self) -> None:
        """Show the chosen rank's pieces (every rank's for None), with the filters as they are."""
        if self.index is None:
            return
        if self.search or self.nonfinite_only:  # the filters read the rank shown only
            self._refilter()
            return
        self._reload_tree()

    def rank_entries(self) -> List[Tuple[int, Text]]:
        """Per rank: its steps, and for the pieces already read their records and inf/nan rows."""
        entries = []
        index = self.index
        for rank in self.ranks:
            note = Text("", style="dim")
            if index is not None:
                steps = index.steps_of.get(rank, [])
                note.append("{} step{}".format(len(steps), "" if len(steps) == 1 else "s"))
                read = [index.piece(rank, s) for s in steps if index.loaded(rank, s)]
                if read:
                    note.append(" · {:,} records read".format(sum(len(p.records) for p in read)))
                    bad = sum(int(p.nonfinite.sum()) for p in read)
                    if bad:
                        note.append(" · {:,} inf/nan rows".format(bad), style=themed("bold error"))
            entries.append((rank, note))
        return entries

    def every_rank_entry(self) -> Text:
        return Text("each step lists every rank", style="dim")

    @on(Tree.NodeExpanded, "#dump-tree")
    def _expanded(self, event: Tree.NodeExpanded) -> None:
        ref = event.node.data
        if not isinstance(ref, DumpRef) or self.index is None:
            return
        if ref.kind == "rank" and not ref.loaded:
            if self.index.loaded(ref.rank, ref.step):
                self.dump_tree.fill_piece(event.node, self.index.piece(ref.rank, ref.step))
            else:
                self._read_piece(ref.rank, ref.step)
        elif ref.kind == "record":
            self.dump_tree.fill_record(event.node, self.index.piece(ref.rank, ref.step))

    @work(thread=True, group="dump-piece", exit_on_error=False)
    def _read_piece(self, rank: int, step: int) -> None:
        try:
            piece = self.index.piece(rank, step)
        except Exception as exc:
            self.post_message(self.PieceReady(rank, step, None, f"rank {rank} step {step}: {exc}"))
            return
        self.post_message(self.PieceReady(rank, step, piece))

    @on(PieceReady)
    def _piece_ready(self, message: "DumpScreen.PieceReady") -> None:
        if message.piece is None:
            self.notify(message.error, severity="error", title="Dump")
            return
        for step_node in self.dump_tree.root.children:
            for rank_node in step_node.children:
                ref = rank_node.data
                if ref.rank == message.rank and ref.step == message.step:
                    self.dump_tree.fill_piece(rank_node, message.piece)
                    if self._selected is ref:
                        self._detail(piece_detail(message.piece))

    # ---- filters ------------------------------------------------------------------------------------------
    def _show_status(self) -> None:
        parts = []
        if self.search:
            parts.append("search: " + self.search)
        if self.nonfinite_only:
            parts.append("inf/nan only")
        if parts:
            parts.append("{:,} matching records · n next".format(self.matches))
        else:
            parts.append("/ searches names · f keeps records with inf/nan · v slices a tensor")
        self.query_one("#dump-status", LineLabel).update(Text("  ·  ".join(parts), style="dim"))

    def _refilter(self) -> None:
        if self.index is None:
            return
        self.query_one("#dump-status", LineLabel).update(Text("filtering (reading every step of {})…".format(
            "every rank" if self.rank is None else "rank {}".format(self.rank)),
                                                          style="italic"))
        self._filter(self.search, self.nonfinite_only, self.rank)

    @work(thread=True, exclusive=True, group="dump-filter", exit_on_error=False)
    def _filter(self, search: str, nonfinite: bool, only_rank: Optional[int] = None) -> None:
        if not search and not nonfinite:
            self.post_message(self.Filtered(None, 0))
            return
        from engines.parse.inspect import name_matcher

        try:
            match = name_matcher(search) if search else None
        except Exception as exc:
            self.post_message(self.Filtered(None, 0, str(exc).replace("--name ", "search ")))
            return
        keep: Dict[Tuple[int, int], set] = {}
        matches = 0
        for step in self.index.steps():
            for rank in self.index.ranks_at(step):
                if only_rank is not None and rank != only_rank:
                    continue
                piece = self.index.piece(rank, step)
                kept = piece.keep(match, nonfinite)
                if kept:
                    keep[(rank, step)] = kept
                    matches += sum(1 for n in kept if self._direct(piece, n, match, nonfinite))
        self.post_message(self.Filtered(keep, matches))

    @staticmethod
    def _direct(piece: Piece, name: str, match, nonfinite: bool) -> bool:
        node = piece.records[name]
        if not node.rows.size or (nonfinite and not node.nonfinite):
            return False
        return match is None or bool(match(name) or (node.parent and match(node.parent)))

    @on(Filtered)
    def _filtered(self, message: "DumpScreen.Filtered") -> None:
        if message.error:
            self.notify(message.error, severity="error", title="Search")
            self._show_status()
            return
        self.matches = message.matches
        self.keep = message.keep
        self._reload_tree()
        if message.keep is not None and not message.keep:
            self.notify("No record matches.", timeout=3)
        elif message.keep is not None:
            self.action_next_match()

    def _reload_tree(self) -> None:
        """The tree for the filters and the rank shown; pieces already read are filled at once."""
        tree = self.dump_tree
        with self.app.batch_update(), tree.held():
            tree.load(self.index, self.keep, self.rank)
            first = tree.first_rank_line()
            for step_node in tree.root.children:
                for rank_node in step_node.children:
                    ref = rank_node.data
                    if self.keep is not None or (rank_node is first and self.index.loaded(ref.rank, ref.step)):
                        tree.fill_piece(rank_node, self.index.piece(ref.rank, ref.step))
                        rank_node.expand()
                    elif self.index.loaded(ref.rank, ref.step):  # shut: its records are added as it opens
                        tree.label_piece(rank_node, self.index.piece(ref.rank, ref.step))
            if self.keep is None and first is not None and not first.is_expanded:
                first.expand()  # not read yet: expanding it reads it
            self._show_status()

    def _matches(self, ref: Any) -> bool:
        if not isinstance(ref, DumpRef) or ref.kind != "record" or self.index is None:
            return False
        piece = self.index.piece(ref.rank, ref.step)
        if not self.search and not self.nonfinite_only:
            return piece.records[ref.record].nonfinite
        from engines.parse.inspect import name_matcher

        match = name_matcher(self.search) if self.search else None
        return self._direct(piece, ref.record, match, self.nonfinite_only)

    def action_next_match(self) -> None:
        tree = self.dump_tree
        start = tree.cursor_line
        for line in range(start + 1, tree.last_line + 1):
            node = tree.get_node_at_line(line)
            if node is not None and self._matches(node.data):
                tree.move_cursor(node)
                tree.scroll_to_node(node)
                return
        self.notify("No further match among the lines shown (expand more, or press n again from the top).",
                    timeout=3)
        tree.move_cursor_to_line(0)

    def action_toggle_nonfinite(self) -> None:
        self.nonfinite_only = not self.nonfinite_only
        self._refilter()

    def action_search(self) -> None:
        self._ask("search", self.search, "search names: text, a glob (*softmax*) or re:regex; empty clears")

    def action_slice(self) -> None:
        ref = self._selected
        if ref is None or ref.kind != "row":
            self.notify("Select a tensor first (a line under a record).", timeout=3)
            return
        self._ask("slice", self.slice_index, "index like 0, :8 or ..., -1 (empty: the first values)")

    def _ask(self, purpose: str, value: str, placeholder: str) -> None:
        field = self.query_one("#dump-input", Input)
        field.placeholder = placeholder
        field.value = value
        self._asking = purpose
        field.display = True
        field.focus()

    @on(Input.Submitted, "#dump-input")
    def _submitted(self, event: Input.Submitted) -> None:
        field = event.input
        field.display = False
        self.dump_tree.focus()
        if self._asking == "search":
            self.search = event.value.strip()
            self._refilter()
        else:
            self.slice_index = event.value.strip()
            self._preview_key = None
            self._show_selected()

    def action_toggle_log(self) -> None:
        self.log_scale = not self.log_scale
        self._preview_key = None
        self._show_selected()

    # ---- detail -------------------------------------------------------------------------------------------
    def _detail(self, renderable: Any) -> None:
        self.detail_renderable = renderable
        self.query_one("#dump-detail-body", DetailPane).show(renderable)

    @on(Tree.NodeHighlighted, "#dump-tree")
    def _highlighted(self, event: Tree.NodeHighlighted) -> None:
        self._selected = event.node.data if isinstance(event.node.data, DumpRef) else None
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(DETAIL_DELAY_S, self._show_selected)

    @on(Tree.NodeSelected, "#dump-tree")
    def _selected_line(self, event: Tree.NodeSelected) -> None:
        ref = event.node.data
        if isinstance(ref, DumpRef) and ref.kind == "more":
            self.dump_tree.show_more(event.node)

    def _show_selected(self) -> None:
        ref, index = self._selected, self.index
        if ref is None or index is None:
            return
        if ref.kind == "step":
            self._detail(dump_detail(index))
        elif ref.kind == "rank":
            if index.loaded(ref.rank, ref.step):
                self._detail(piece_detail(index.piece(ref.rank, ref.step)))
            else:
                self._detail(Text("rank {} · step {} (enter reads it)".format(ref.rank, ref.step)))
        elif ref.kind == "record" and index.loaded(ref.rank, ref.step):
            self._detail(record_detail(index.piece(ref.rank, ref.step), ref.record))
        elif ref.kind == "row" and index.loaded(ref.rank, ref.step):
            piece = index.piece(ref.rank, ref.step)
            key = (ref.rank, ref.step, ref.row, self.slice_index, self.log_scale)
            if key == self._preview_key and self._preview is not None:
                return
            self._detail(tensor_detail(piece, ref.row, width=self._pane_width()))
            if piece.rows.data[ref.row] >= 0:
                self._preview_key = key
                self._preview = None
                self._read_preview(key, piece)

    def _pane_width(self) -> int:
        return max(20, self.query_one("#dump-detail").scrollable_content_region.width - 2)

    @work(thread=True, exclusive=True, group="dump-preview", exit_on_error=False)
    def _read_preview(self, key: Tuple, piece: Piece) -> None:
        rank, step, row, index, log = key
        reader = None
        try:
            reader = self.index.tensor_reader(rank, step)
            shape, values = read_slice(reader, piece.rows, row, index)
            hist = histogram(reader, piece.rows, row, bins=min(48, max(8, self._pane_width() // 2)), log=log)
            self.post_message(self.PreviewReady(key, Preview(shape, index, values, hist)))
        except (PreviewError, ValueError, OSError) as exc:
            self.post_message(self.PreviewReady(key, None, str(exc)))
        finally:
            if reader is not None:
                reader.close()

    @on(PreviewReady)
    def _preview_ready(self, message: "DumpScreen.PreviewReady") -> None:
        if message.key != self._preview_key:
            return
        self._preview = message.preview
        rank, step, row = message.key[:3]
        piece = self.index.piece(rank, step)
        self._detail(tensor_detail(piece, row, message.preview, message.error, width=self._pane_width()))
        if message.error:
            self.notify(message.error, severity="warning", title="Tensor")

    # ---- leaving ------------------------------------------------------------------------------------------
    def action_files(self) -> None:
        self.app.open_path(self.path, kind="run")

    def action_back(self) -> None:
        field = self.query_one("#dump-input", Input)
        if field.display:
            field.display = False
            self.dump_tree.focus()
            return
        self.dismiss()
