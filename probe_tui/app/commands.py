"""The command palette's one provider, fed by the action registry (``probe_tui.app.actions``), then what the
screen adds (``palette_entries()``: the builder's fields), then Textual's system commands (one provider keeps the
order: the app's commands first)."""

from functools import partial
from typing import Any, Callable, List, Tuple

from textual.command import DiscoveryHit, Hit, Hits, Provider

from probe_tui.app.actions import AppAction, actions_for, keys_label


def palette_actions(screen) -> List[AppAction]:
    """The actions offered on ``screen``: its own scope first, then the app's; only those that apply now."""
    scope = getattr(screen, "SCOPE", None)
    out: List[AppAction] = []
    for action in (actions_for(scope) if scope else []) + actions_for("app"):
        if not action.palette:
            continue
        target = screen if action.scope != "app" else screen.app
        name = action.action.split("(")[0].split(".")[-1]
        if target.check_action(name, ()) is False:
            continue
        out.append(action)
    return out


class ActionCommands(Provider):
    """Every registry action that applies on the current screen, with its keys as help."""

    def _run(self, action: AppAction) -> None:
        target = self.screen if action.scope != "app" else self.app
        self.app.call_later(target.run_action, action.action)

    def _title(self, action: AppAction) -> str:
        return f"{action.description} ({keys_label(action, getattr(self.app, 'user_keymap', None))})"

    def _commands(self) -> List[Tuple[str, str, Callable[[], Any]]]:
        """``(title, help, callback)``: the screen's and the app's actions first, then Textual's system commands
        (theme, screenshot...; ``ProbeApp.get_system_commands``), so the app's own commands lead the list."""
        out: List[Tuple[str, str, Callable[[], Any]]] = [
            (self._title(action), action.help, partial(self._run, action)) for action in palette_actions(self.screen)]
        entries = getattr(self.screen, "palette_entries", None)
        if callable(entries):  # the builder's fields: jump to one
            out.extend(entries())
        for command in self.app.get_system_commands(self.screen):
            out.append((command.title, command.help, command.callback))
        return out

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands():
            yield DiscoveryHit(title, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands():
            score = max(matcher.match(title), matcher.match(help_text) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, text=title, help=help_text)
