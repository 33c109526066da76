"""A form generated from a pydantic model: one row per field, advanced fields folded away."""

from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Collapsible

from probe_tui.app.form import spec as S
from probe_tui.app.form.fields import FieldRow, make_row
from probe_tui.app.form.values import split_path


class ModelForm(Vertical):
    """Edits one model's fields. ``data`` seeds the controls; :meth:`collect` gives the config dict back.

    Keys of ``data`` that are not fields of the model are kept as they are and returned by :meth:`collect`
    (so foreign msprobe keys still reach validation and are saved).
    """

    def __init__(self, model: type, data: Optional[Dict[str, Any]] = None, path: Tuple[str, ...] = (),
                 *, classes: Optional[str] = None, id: Optional[str] = None) -> None:
        super().__init__(classes=("model-form " + (classes or "")).strip(), id=id)
        self.model = model
        self.data = dict(data or {})
        self.path_parts = path
        self.specs = S.describe_model(model)
        names = {s.name for s in self.specs}
        self.extras = {k: v for k, v in self.data.items() if k not in names}
        self.rows: Dict[str, FieldRow] = {
            spec.name: make_row(spec, path + (spec.name,), self.data) for spec in self.specs if spec.kind != S.CONST
        }
        for row in self.rows.values():
            row.owner_form = self
        self.advanced_names = [s.name for s in self.specs if s.name in self.rows and s.advanced]
        self.owner_row: Optional[FieldRow] = None
        """The row this form is the section of (None for the top form)."""
        self.fold: Optional[Collapsible] = None
        """The folded section of advanced fields; its rows are mounted when it is first unfolded."""
        self._fold_filled = False

    def compose(self) -> ComposeResult:
        for spec in self.specs:
            if spec.name in self.rows and not spec.advanced:
                yield self.rows[spec.name]
        if self.advanced_names:
            self.fold = Collapsible(title=f"Advanced ({len(self.advanced_names)})", collapsed=True,
                                    classes="advanced-fold")
            yield self.fold

    async def on_collapsible_expanded(self, event: Collapsible.Expanded) -> None:
        if event.collapsible is self.fold:
            await self._fill_fold()

    async def _fill_fold(self) -> None:
        if self._fold_filled or self.fold is None:
            return
        self._fold_filled = True
        await self.fold.query_one(Collapsible.Contents).mount_all([self.rows[n] for n in self.advanced_names])

    async def unfold_advanced(self) -> None:
        """Show the advanced fields (mounting them the first time)."""
        if self.fold is not None:
            self.fold.collapsed = False
            await self._fill_fold()

    def collect(self) -> Dict[str, Any]:
        """The config dict of this form (only what is set; defaults apply to the rest)."""
        out: Dict[str, Any] = {}
        for spec in self.specs:
            if spec.kind == S.CONST:
                out[spec.name] = spec.choices[0]
                continue
            present, value = self.rows[spec.name].collect()
            if present:
                out[spec.name] = value
        out.update(self.extras)
        return out

    def walk_rows(self) -> Iterator[FieldRow]:
        """Every row of this form and of the forms nested in it, in screen order."""
        for spec in self.specs:
            row = self.rows.get(spec.name)
            if row is not None and not spec.advanced:
                yield from _walk(row)
        for spec in self.specs:
            row = self.rows.get(spec.name)
            if row is not None and spec.advanced:
                yield from _walk(row)

    def focus_first(self) -> None:
        for row in self.walk_rows():
            if row.ready():
                row.focus_control()
                return


def _walk(row: FieldRow) -> Iterator[FieldRow]:
    yield row
    for child in row.child_rows():
        yield from _walk(child)


def all_rows(form: ModelForm) -> List[FieldRow]:
    """Every field row of ``form`` in screen order."""
    return list(form.walk_rows())


def place_issues(rows: Sequence[FieldRow], issues: Iterable[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """Show each ``(path, text)`` issue at the row whose path is its longest prefix; clear the other rows.

    Returns the issues no row matched (shown by the caller in its summary).
    """
    index = {row.path_parts: row for row in rows}
    found: Dict[Tuple[str, ...], List[str]] = {}
    unplaced: List[Tuple[str, str]] = []
    for path, text in issues:
        parts = split_path(path) if path else ()
        row_key = None
        for cut in range(len(parts), 0, -1):
            if parts[:cut] in index:
                row_key = parts[:cut]
                break
        if row_key is None:
            unplaced.append((path, text))
            continue
        extra = parts[len(row_key):]
        found.setdefault(row_key, []).append((_join(extra) + ": " if extra else "") + text)
    for key, row in index.items():
        messages = found.get(key)
        row.set_error("; ".join(messages) if messages else None)
        if messages:
            _unfold_to(row)
    return unplaced


def _join(parts: Tuple[str, ...]) -> str:
    return "".join(p if p.startswith("[") else "." + p for p in parts).lstrip(".")


def folds_above(row: FieldRow) -> List[ModelForm]:
    """The forms whose advanced fold holds ``row`` or one of its enclosing rows, outermost first."""
    chain: List[ModelForm] = []
    node: Optional[FieldRow] = row
    while node is not None and node.owner_form is not None:
        if node.spec.advanced:
            chain.append(node.owner_form)
        node = node.owner_form.owner_row
    return list(reversed(chain))


async def _unfold_all(chain: List[ModelForm]) -> None:
    for form in chain:  # outermost first: each mounts the next
        await form.unfold_advanced()


def _unfold_to(row: FieldRow) -> None:
    """Unfold what hides ``row``: the advanced folds above it (mounting their rows) and collapsed sections."""
    chain = [f for f in folds_above(row) if f.fold is not None and (f.fold.collapsed or not f._fold_filled)]
    if chain and chain[0].is_mounted:
        chain[0].call_later(_unfold_all, chain)
    node = row.parent
    while node is not None:
        if isinstance(node, Collapsible) and node.collapsed and not node.has_class("advanced-fold"):
            node.collapsed = False
        node = node.parent
