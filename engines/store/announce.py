"""``segments.jsonl``: the rank folder's list of stores and of the segment files readers may open.

Each line is one JSON object, written with a single ``write()`` on an ``O_APPEND`` descriptor after the file it
names is complete (renamed from ``.partial``). Readers take only lines that end with a newline, so a writer killed
mid-line leaves nothing half-announced. Events: ``open`` (a store starts), ``segment`` (a per-step file was
closed), ``close`` (the writer finished, with its status).
"""

import json
import os
import threading
from pathlib import Path
from typing import Any, Dict, List, Tuple

from engines import safe_fs

SEGMENTS_FILE = "segments.jsonl"
_lock = threading.Lock()


def announce(directory: Path, event: Dict[str, Any]) -> None:
    line = (json.dumps(event, separators=(",", ":")) + "\n").encode("utf-8")
    with _lock:
        fd = safe_fs.append_fd(Path(directory) / SEGMENTS_FILE, what=SEGMENTS_FILE)  # never through a link
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def read_events(directory: Path, offset: int = 0) -> Tuple[List[Dict[str, Any]], int]:
    """Complete lines from byte ``offset`` on; returns the events and the offset to continue from."""
    path = Path(directory) / SEGMENTS_FILE
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    events = []
    for raw in data[:end].splitlines():
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except (ValueError, RecursionError):  # a torn line from a crashed writer on a file system without
            continue                          # atomic appends
        if isinstance(event, dict):  # anything else is no line a writer wrote
            events.append(event)
    return events, offset + end


def kinds_in(directory: Path) -> List[str]:
    """Kinds of store announced in ``directory``, in the order they were opened; falls back to ``<kind>.h5``
    files when there is no ``segments.jsonl`` (a store copied without it)."""
    events, _ = read_events(directory)
    kinds: List[str] = []
    for ev in events:
        if ev.get("event") == "open" and isinstance(ev.get("kind"), str) and ev["kind"] not in kinds:
            kinds.append(ev["kind"])
    if not kinds:
        d = Path(directory)
        if d.is_dir():
            kinds = sorted(p.stem for p in d.glob("*.h5") if "-" not in p.stem)
    return kinds
