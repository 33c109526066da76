"""The footer of every screen: the screen's keys, and at any width the ones a person needs to get out and find help.

Textual's footer lists the keys in order and cuts the row at the terminal's edge, so at 80 columns ``q Quit`` and
``f1 Help`` (the app's keys come last) were cut off. This footer drops the least needed keys first (from the end
of the screen's list) until the row fits; the essential keys (help, back, quit, close) always stay, and the
command palette key shrinks to ``^p``. Every dropped key is still in the help screen (f1) and the palette.
"""

from typing import List, Optional, Tuple

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

ESSENTIAL_SUFFIXES = (".back", ".quit", ".close", ".cancel")
ESSENTIAL_IDS = ("app.help",)
PALETTE_WIDTH = 4
"""``^p`` and its margins, docked right."""


def is_essential(binding: Binding) -> bool:
    """Whether a binding stays in the footer at any width."""
    binding_id = binding.id or ""
    return binding_id in ESSENTIAL_IDS or binding_id.endswith(ESSENTIAL_SUFFIXES)


def key_width(key_display: str, description: str) -> int:
    """Columns one key takes in the compact footer: key, a space, the description, a margin."""
    return len(key_display) + (1 + len(description) if description else 0) + 1


def fit_keys(keys: List[Tuple[Binding, str]], width: int) -> List[Tuple[Binding, str]]:
    """``keys`` (binding, how its key shows) without the fewest non-essential ones, dropped from the end, so that
    they fit in ``width`` columns; the essential keys keep their place."""
    kept = list(keys)
    total = sum(key_width(display, b.description) for b, display in kept)
    for index in range(len(kept) - 1, -1, -1):
        if total <= width:
            break
        binding, display = kept[index]
        if is_essential(binding):
            continue
        total -= key_width(display, binding.description)
        del kept[index]
    return kept


class KeyFooter(Footer):
    """A compact footer that keeps the essential keys visible at any width (the width changes recompose it)."""

    def __init__(self) -> None:
        super().__init__(compact=True)
        self._shown: Optional[tuple] = None
        """What the last compose drew (keys and width): a focus change that keeps them recomposes nothing."""

    def on_resize(self) -> None:
        if self._bindings_ready:
            self.call_after_refresh(self._recompose_if_changed)

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            if not self.size.width:  # a screen that opens: its keys in its first frame, not a layout after it
                self.call_later(self._recompose_if_changed)
            else:
                self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        if self.is_attached and self._signature() != self._shown:
            await self.recompose()

    def _keys(self) -> Tuple[List[Tuple[Binding, str, bool, str]], Optional[tuple]]:
        active = self.screen.active_bindings
        seen = set()
        keys: List[Tuple[Binding, str, bool, str]] = []
        for _node, binding, enabled, tooltip in active.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            keys.append((binding, self.app.get_key_display(binding), enabled, tooltip))
        palette = None
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            palette = active.get(self.app.COMMAND_PALETTE_BINDING)
        return keys, palette

    def _signature(self) -> tuple:
        keys, palette = self._keys()
        # the width it fits the keys to: before its first layout (width 0) the terminal's, which is what it gets
        # (a screen that opens composes its footer before the layout; a recompose after it changed nothing)
        width = self.size.width or self.app.size.width
        return (width, tuple((b.key, d, b.description, e) for b, d, e, _ in keys), palette is None)

    def compose(self) -> ComposeResult:
        if not self._bindings_ready:
            return
        self._shown = self._signature()
        keys, palette = self._keys()
        width = (self.size.width or self.app.size.width) - (PALETTE_WIDTH if palette else 0)
        kept = {id(b) for b, _ in fit_keys([(b, d) for b, d, _, _ in keys], width)}
        for binding, display, enabled, tooltip in keys:
            if id(binding) in kept:
                # born compact (this footer always is): bound to the footer's ``compact`` as Textual's footer does,
                # each key gained the class after mounting and was styled a second time (~1 ms of an open each)
                yield FooterKey(binding.key, display, binding.description, binding.action, disabled=not enabled,
                                tooltip=tooltip or binding.description, classes="-compact")
        if palette is not None:
            _node, binding, enabled, tooltip = palette
            yield FooterKey(binding.key, self.app.get_key_display(binding), "", binding.action,
                            classes="-command-palette -compact", disabled=not enabled,
                            tooltip=binding.tooltip or binding.description)
