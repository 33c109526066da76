"""A small question with a few answers, each a button (tab/arrows and enter, or the answer's first letter)."""

from typing import List, Tuple

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static


class ConfirmScreen(ModalScreen):
    """Dismisses with the chosen answer's value, or ``cancel_value`` on escape."""

    CSS_PATH = "confirm.tcss"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="confirm.cancel"),
        Binding("left", "app.focus_previous", show=False),
        Binding("right", "app.focus_next", show=False),
    ]

    def __init__(self, question: str, answers: List[Tuple[str, str]], cancel_value: str = "cancel") -> None:
        super().__init__()
        self.question = question
        self.answers = answers
        self.cancel_value = cancel_value

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Static(self.question, id="confirm-question", markup=False)
            with Horizontal(id="confirm-buttons"):
                for n, (label, value) in enumerate(self.answers):
                    yield Button(label, id=f"answer-{value}", variant="primary" if n == 0 else "default",
                                 compact=True)

    def on_mount(self) -> None:
        self.query(Button).first().focus()

    @on(Button.Pressed)
    def answered(self, event: Button.Pressed) -> None:
        self.dismiss(str(event.button.id)[len("answer-"):])

    def action_cancel(self) -> None:
        self.dismiss(self.cancel_value)
