"""The command palette's provider, fed by the action registry (``probe_tui.app.actions``)."""

from functools import partial
from typing import List

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

    async def discover(self) -> Hits:
        for action in palette_actions(self.screen):
            yield DiscoveryHit(self._title(action), partial(self._run, action), help=action.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for action in palette_actions(self.screen):
            text = self._title(action)
            score = max(matcher.match(text), matcher.match(action.help) * 0.5)
            if score > 0:
                yield Hit(score, matcher.highlight(text), partial(self._run, action), text=text, help=action.help)
