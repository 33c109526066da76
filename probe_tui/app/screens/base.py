"""What every full screen of the app shares: a failed background task is a notification, never a crash."""

from textual.screen import Screen
from textual.worker import Worker, WorkerState


class AppScreen(Screen):
    """Base of the app's full screens. Workers post their state to the screen that started them (the message
    does not bubble), so each screen reports its own failed workers."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.notify(f"{event.worker.name or 'a background task'} failed: {event.worker.error}",
                        severity="error", title="Error")
