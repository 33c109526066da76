"""What every full screen of the app shares: a failed background task is a notification, never a crash; a screen
that shows one result reads it off the UI thread, before it opens when that is quick (:func:`open_read_first`)."""

from pathlib import Path
from typing import Any, List, Optional

from rich.text import Text
from textual import events, on, work
from textual.geometry import Size
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from probe_tui.app.styles import themed


class AppScreen(Screen):
    """Base of the app's full screens. Workers post their state to the screen that started them (the message
    does not bubble), so each screen reports its own failed workers."""

    def _screen_resized(self, size: Size) -> None:
        # Textual lays a screen out again on each Resize it gets, and every screen under it: a screen that opens
        # gets one from its own first layout, at the size it was just laid out at (a layout and a paint of it
        # and of each screen below, 10-30 ms of CPU a key that opens a view). A layout at the same size is a
        # no-op; what changed inside a screen asks for its own layout.
        if self._compositor.size == size:
            return
        super()._screen_resized(size)

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
        self.preloaded: Optional["ResultScreen.Loaded"] = None
        """The result read before the screen opened (:func:`open_read_first`): shown as the screen mounts."""
        self.reading_elsewhere = False
        """:func:`open_read_first` is reading the result and posts it to the screen: mounting reads nothing."""
        self._shown_once = False
        self._resumed_once = False
        if self.FOCUS:  # focused as it composes: the footer's first keys are that widget's
            self.AUTO_FOCUS = self.FOCUS

    def read(self) -> Any:
        raise NotImplementedError

    def show(self, result: Any) -> None:
        raise NotImplementedError

    def load_result(self) -> "ResultScreen.Loaded":
        """Read the result (any thread): the message :meth:`show` takes it from, or its error."""
        try:
            return self.Loaded(self.read())
        except Exception as exc:
            return self.Loaded(None, self.READ_ERROR.format(path=self.path, exc=exc))

    async def _compose(self) -> None:
        await super()._compose()
        if self.preloaded is not None:
            # the first frame holds the result (one layout, not one per part filled), and so does the footer's
            # first list of keys, composed after this (a key a result enables: a layout less)
            message, self.preloaded = self.preloaded, None
            self._loaded(message)

    def _on_screen_resume(self, event: events.ScreenResume) -> None:
        # Textual restyles every node of a screen as it resumes; the first time, each node was styled a moment
        # ago as it mounted (10-20 ms of CPU at a key that opens a view): that restyle is skipped, as the
        # builder does (screens/builder_build.py)
        first = not self._resumed_once
        self._resumed_once = True
        event.prevent_default()  # Screen's handler runs here, once, with the event below
        Screen._on_screen_resume(self, events.ScreenResume(refresh_styles=False) if first else event)

    def on_mount(self) -> None:
        # at once, not on the next idle (focus()): the footer lists the focused widget's keys in the first frame
        self.set_focus(self.query_one(self.FOCUS))
        if self.result_pending():
            self._load()

    def result_pending(self) -> bool:
        """Nothing shown and nothing on its way: the screen reads its result as it mounts."""
        return not self.reading_elsewhere and not self._shown_once

    @work(thread=True, exclusive=True, group="load", exit_on_error=False)
    def _load(self) -> None:
        self.post_message(self.load_result())

    @on(Loaded)
    def _loaded(self, message: "ResultScreen.Loaded") -> None:
        self._shown_once = True
        if message.result is None:
            if self.VERDICT:
                self.query_one(self.VERDICT, Static).update(Text(message.error, style=themed("error")))
            self.notify(message.error, severity="error", title=self.TITLE)
            return
        self.show(message.result)


READ_FIRST_WAIT_S = 0.25
"""How long :func:`open_read_first` waits for the result before it opens the screen without it."""


def open_read_first(app: Any, screen: ResultScreen) -> None:
    """Push ``screen`` with its result already read, so that its first frame holds it. A screen that opens and
    then gets its data is laid out and painted again for each part the data fills (the title, the table, the
    detail, the scrollbars): 2-3 full frames, 100-200 ms of CPU at a key that opens a view. The result is read on
    a worker thread; one that takes longer than ``READ_FIRST_WAIT_S`` opens the screen at once ("Reading…") and
    arrives as it used to."""
    screen.reading_elsewhere = True
    timer: Optional[Timer] = None
    pushed: List[bool] = []

    def opened(message: Optional[ResultScreen.Loaded]) -> None:
        if timer is not None:
            timer.stop()
        if not pushed:  # not open yet: open it, with the result if read
            pushed.append(True)
            screen.preloaded = message
            if message is not None:
                screen.reading_elsewhere = False
            app.push_screen(screen)
        elif message is not None:  # opened without it (and maybe closed since): the result arrives as a message
            screen.reading_elsewhere = False
            screen.post_message(message)

    def read() -> None:
        message = screen.load_result()
        app.call_from_thread(opened, message)

    timer = app.set_timer(READ_FIRST_WAIT_S, lambda: opened(None))
    app.run_worker(read, thread=True, group="open-view", exit_on_error=False, name="reading " + screen.path.name)
