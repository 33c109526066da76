"""Progress events a run emits, and the sinks that carry them.

Kinds and their fields (``?`` = optional):

- ``run_started{run_dir, task, total_steps}`` (``total_steps`` None when unknown, e.g. a script)
- ``step{step, total_steps, loss?, elapsed_s, records?, bytes?, unit?, online_failing?, online_failing_apis?}``
  after each training step (``step`` 0-based); an analysis counts its own units (``unit``: ``"pair"`` for compare's
  rank pairs, done across workers); a run with the online check adds how many APIs fail on the reference so far
  and the first 20 of them (docs/ACC_CHECK.md, "Online check")
- ``message{level, text}`` with level ``debug|info|warning|error``
- ``run_finished{status, exit_code, run_dir, summary}``

The CLI renders them with rich on stderr (``probe_tui.progress``); the app reads a child process's events as
JSON lines (``JsonlSink`` on one side, ``parse_event_line`` on the other). A sink never raises into training:
a broken stream is dropped silently.
"""

import json
import math
import threading
from dataclasses import dataclass, field
from typing import IO, Any, Dict, List, Optional, Protocol

KINDS: Dict[str, Dict[str, bool]] = {
    # field -> required
    "run_started": {"run_dir": True, "task": True, "total_steps": True},
    "step": {"step": True, "total_steps": True, "loss": False, "elapsed_s": True, "records": False,
             "bytes": False, "unit": False, "online_failing": False, "online_failing_apis": False},
    "message": {"level": True, "text": True},
    "run_finished": {"status": True, "exit_code": True, "run_dir": True, "summary": True},
}
LEVELS = ("debug", "info", "warning", "error")


class EventError(ValueError):
    """An event of an unknown kind or with missing/unknown fields (raised only by strict sinks)."""


def check_event(kind: str, fields: Dict[str, Any]) -> None:
    spec = KINDS.get(kind)
    if spec is None:
        raise EventError(f"event: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
    missing = [name for name, required in spec.items() if required and name not in fields]
    if missing:
        raise EventError(f"event {kind}: missing field {missing[0]!r}")
    unknown = sorted(set(fields) - set(spec))
    if unknown:
        raise EventError(f"event {kind}: unknown field {unknown[0]!r}")
    if kind == "message" and fields["level"] not in LEVELS:
        raise EventError(f"event message: level {fields['level']!r} is not one of {', '.join(LEVELS)}")


@dataclass
class Event:
    kind: str
    fields: Dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.fields[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def to_dict(self) -> Dict[str, Any]:
        return {"event": self.kind, **self.fields}


class EventSink(Protocol):
    def emit(self, kind: str, **fields: Any) -> None:
        ...


class NullSink:
    """Drops every event."""

    def emit(self, kind: str, **fields: Any) -> None:
        pass


class ListSink:
    """Keeps events in memory (tests). ``strict`` (default) checks each event against ``KINDS``."""

    def __init__(self, strict: bool = True) -> None:
        self.strict = strict
        self.events: List[Event] = []
        self._lock = threading.Lock()

    def emit(self, kind: str, **fields: Any) -> None:
        if self.strict:
            check_event(kind, fields)
        with self._lock:
            self.events.append(Event(kind, dict(fields)))

    def kinds(self) -> List[str]:
        return [event.kind for event in self.events]

    def of(self, kind: str) -> List[Event]:
        return [event for event in self.events if event.kind == kind]


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become the strings "nan", "inf", "-inf"; paths and others become str."""
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


_NON_FINITE = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class JsonlSink:
    """One JSON object a line, ``{"event": kind, ...fields}``, flushed at once. Strict JSON (no NaN tokens):
    a non-finite ``loss`` is written as the string "nan"/"inf"/"-inf" and read back as a float by
    ``parse_event_line``."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream: Optional[IO[str]] = stream
        self._lock = threading.Lock()

    def emit(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"event": kind, **_plain(fields)}, allow_nan=False, separators=(",", ":"))
        with self._lock:
            if self.stream is None:
                return
            try:
                self.stream.write(line + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # reader gone (broken pipe) or stream closed: stop, never crash
                self.stream = None


class TeeSink:
    """Sends every event to each sink in turn."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = sinks

    def emit(self, kind: str, **fields: Any) -> None:
        for sink in self.sinks:
            sink.emit(kind, **fields)


def parse_event_line(line: str) -> Optional[Event]:
    """The event on one ``JsonlSink`` line, or None for anything else (a script's own output, a torn line)."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    kind = data.pop("event", None)
    if kind not in KINDS:
        return None
    for name in ("loss", "elapsed_s"):
        if isinstance(data.get(name), str) and data[name] in _NON_FINITE:
            data[name] = _NON_FINITE[data[name]]
    return Event(kind, data)
