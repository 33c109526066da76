"""What every full screen of the app shares: a failed background task is a notification, never a crash; a screen
that shows one result reads it off the UI thread."""

from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from probe_tui.app.styles import themed


class AppScreen(Screen):
    """Base of the app's full screens. Workers post their state to the screen that started them (the message
    does not bubble), so each screen reports its own failed workers."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.notify(f"{event.worker.name or 'a background task'} failed: {event.worker.error}",
                        severity="error", title="Error")


class ResultScreen(AppScreen):
    """A screen of one result at ``path``: mounted, it focuses ``FOCUS`` and reads the result in a thread worker
    (:meth:`read`); :meth:`show` fills the screen on the UI thread. A read that fails shows its one line
    (``READ_ERROR``) in the ``VERDICT`` widget, where the screen has one, and as a notification titled ``TITLE``."""

    FOCUS = ""
    VERDICT = ""
    TITLE = ""
    READ_ERROR = "{path}: cannot read the result: {exc}"

    class Loaded(Message):
        def __init__(self, result: Any, error: str = "") -> None:
            super().__init__()
            self.result, self.error = result, error

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)

    def read(self) -> Any:
        raise NotImplementedError

    def show(self, result: Any) -> None:
        raise NotImplementedError

    def on_mount(self) -> None:
        self.query_one(self.FOCUS).focus()
        self._load()

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def _load(self) -> None:
        try:
            self.post_message(self.Loaded(self.read()))
        except Exception as exc:
            self.post_message(self.Loaded(None, self.READ_ERROR.format(path=self.path, exc=exc)))

    @on(Loaded)
    def _loaded(self, message: "ResultScreen.Loaded") -> None:
        if message.result is None:
            if self.VERDICT:
                self.query_one(self.VERDICT, Static).update(Text(message.error, style=themed("error")))
            self.notify(message.error, severity="error", title=self.TITLE)
            return
        self.show(message.result)
