"""A form generated from a pydantic model: one row per field, advanced fields folded away."""

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

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

    def compose(self) -> ComposeResult:
        basic = [s for s in self.specs if s.kind != S.CONST and not s.advanced]
        advanced = [s for s in self.specs if s.kind != S.CONST and s.advanced]
        for spec in basic:
            yield make_row(spec, self.path_parts + (spec.name,), self.data)
        if advanced:
            with Collapsible(title=f"Advanced ({len(advanced)})", collapsed=True, classes="advanced-fold"):
                for spec in advanced:
                    yield make_row(spec, self.path_parts + (spec.name,), self.data)

    def own_rows(self) -> List[FieldRow]:
        """The rows of this form's own fields (not those of nested forms)."""
        return [row for row in self.query(FieldRow) if _form_of(row) is self]

    def collect(self) -> Dict[str, Any]:
        """The config dict of this form (only what is set). Before the form is composed: the data it was
        given."""
        out: Dict[str, Any] = {}
        rows = {row.spec.name: row for row in self.own_rows()}
        for spec in self.specs:
            if spec.kind == S.CONST:
                out[spec.name] = spec.choices[0]
                continue
            row = rows.get(spec.name)
            if row is None:  # not mounted yet: the value it was given
                present, value = spec.name in self.data and self.data[spec.name] is not None, self.data.get(spec.name)
            else:
                present, value = row.collect()
            if present:
                out[spec.name] = value
        out.update(self.extras)
        return out


def _form_of(row: FieldRow) -> Optional[ModelForm]:
    node = row.parent
    while node is not None and not isinstance(node, ModelForm):
        node = node.parent
    return node


def all_rows(root: Any) -> List[FieldRow]:
    """Every field row under ``root`` in screen order."""
    return list(root.query(FieldRow))


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


def _unfold_to(widget: Any) -> None:
    node = widget.parent
    while node is not None:
        if isinstance(node, Collapsible) and node.collapsed:
            node.collapsed = False
        node = node.parent
