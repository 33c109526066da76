"""A form generated from a pydantic model: one row per field, advanced fields folded away.

A form given a ``line_budget`` is built lazily: compose mounts the rows that fill about that many lines (the
first screenful; a section passes what is left of the budget to its own form) and :func:`build_step` mounts the
rest, one row a call in screen order, after the first frame (a config form has 200-400 widgets: mounting them
all took a second before anything showed). Every row object exists from the start, mounted or not, so
collecting, validating and listing fields never wait for the build.
"""

import asyncio
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Collapsible

from probe_tui.app.form import spec as S
from probe_tui.app.form.fields import FieldRow
from probe_tui.app.form.sections import make_row
from probe_tui.app.form.values import split_path

STEP_LINES = 30
"""About how many lines of rows one build step mounts (each step lays the whole form out again: not too many,
and not so many that a key waits long for a step to end)."""


class ModelForm(Vertical):
    """Edits one model's fields. ``data`` seeds the controls; :meth:`collect` gives the config dict back.

    Keys of ``data`` that are not fields of the model are kept as they are and returned by :meth:`collect`
    (so foreign msprobe keys still reach validation and are saved).
    """

    def __init__(self, model: type, data: Optional[Dict[str, Any]] = None, path: Tuple[str, ...] = (),
                 *, classes: Optional[str] = None, id: Optional[str] = None,
                 line_budget: Optional[int] = None) -> None:
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
        self.line_budget = line_budget
        """Lines this form may fill when it is composed (None: all its rows); set by the builder, or by the row
        whose section this form is."""
        self._pending: List[Widget] = []
        """Rows (then the fold) not mounted yet, in screen order: :meth:`build_more` mounts them."""
        self._composed = False

    def compose(self) -> ComposeResult:
        parts: List[Widget] = [self.rows[s.name] for s in self.specs if s.name in self.rows and not s.advanced]
        if self.advanced_names:
            self.fold = Collapsible(title=f"Advanced ({len(self.advanced_names)})", collapsed=True,
                                    classes="advanced-fold")
            parts.append(self.fold)
        self._composed = True
        budget = self.line_budget
        for n, part in enumerate(parts):
            if budget is not None:
                if budget <= 0:
                    self._pending = parts[n:]
                    break
                if isinstance(part, FieldRow):
                    part.grant_lines(budget)
                budget -= estimated_lines(part)
            yield part

    @property
    def building(self) -> bool:
        """Whether this form (not the forms nested in it) still has rows to mount or is yet to compose."""
        return bool(self._pending) or (self.line_budget is not None and not self._composed)

    async def build_more(self) -> bool:
        """Mount the next rows waiting, about ``STEP_LINES`` lines of them (a big section hands its own form what
        is left: it comes in several steps); answers whether more wait."""
        if self._pending and self.is_attached:
            parts: List[Widget] = []
            left = STEP_LINES
            while self._pending and left > 0:
                part = self._pending.pop(0)
                if isinstance(part, FieldRow):
                    part.grant_lines(left)
                left -= estimated_lines(part)
                parts.append(part)
            await self.mount_all(parts)
        return bool(self._pending)

    async def build_all(self) -> None:
        """Mount every row still waiting (a jump to a field, unfolding the advanced fields)."""
        parts, self._pending = self._pending, []
        if parts and self.is_attached:
            await self.mount_all(parts)

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
        await build_everything(self)
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


def next_to_build(form: ModelForm) -> Optional[ModelForm]:
    """The form (``form`` or one nested in it) whose next row comes first on screen among the rows not mounted
    yet; None when every row is mounted."""
    if form.line_budget is not None and not form._composed:
        owner = form.owner_row
        on_its_way = form.is_attached or (owner is not None and owner.is_attached and not owner.ready())
        return form if on_its_way else None
    for spec in form.specs:
        row = form.rows.get(spec.name)
        if row is None or spec.advanced or not row.is_attached:
            continue
        for child in row.child_forms():
            found = next_to_build(child)
            if found is not None:
                return found
    return form if form._pending else None


async def build_step(form: ModelForm) -> bool:
    """Mount the next row of ``form``'s tree still waiting, in screen order; answers whether rows still wait."""
    target = next_to_build(form)
    if target is not None and target._composed:
        await target.build_more()
    return next_to_build(form) is not None


async def build_everything(form: ModelForm) -> None:
    """Mount every row of ``form``'s tree still waiting (a jump to a field, unfolding the advanced fields)."""
    for _ in range(1000):
        target = next_to_build(form)
        if target is None or not target.is_attached:
            return
        if target._composed:
            await target.build_all()
        else:  # mounted a moment ago: its compose is on its way
            await asyncio.sleep(0.002)


def estimated_lines(part: Widget) -> int:
    """About how many lines a row (or the advanced fold) takes, without laying it out."""
    if isinstance(part, FieldRow):
        return part.estimated_lines()
    return 1


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
