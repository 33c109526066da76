"""Running the demo with an online check and reading what it judged (the api- and aten-level tests share these)."""

from engines.acc_check import online as oc
from engines.events import ListSink
from engines.runner import run_job
from schemas import load_config


def run_collecting(config):
    """Run the job ``config`` (exit 0 asserted): (summary, the steps' losses, the messages it printed)."""
    events = ListSink()
    outcome = run_job(load_config(config), events=events)
    assert outcome.exit_code == 0
    losses = [e.fields["loss"] for e in events.events if e.kind == "step"]
    messages = [e.fields["text"] for e in events.events if e.kind == "message"]
    return outcome.summary, losses, messages


def checked_rows(folder):
    """The online check's rows of the newest run under ``folder`` (rank 0)."""
    return oc.read_checks(folder / "latest" / "rank0")
