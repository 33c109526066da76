"""Optional exports of the metrics, written beside the store: msprobe-style CSV and TensorBoard event files.

CSV (docs/reference/msprobe-tasks.md §10.4): ``<rank dir>/monitor_csv/{prefix}_{s}-{e}.csv`` with ``s = floor(step / k) * k`` and
``e = s + k - 1`` (k = ``step_count_per_record``), header ``vpp_stage,name,step,<metrics...>``, values rounded to
``ndigits``, NaN written as ``nan``. The prefix is the series tag (``mg_direction`` goes to msprobe's ``other``).

TensorBoard: scalars tagged ``{name}/rank{R}/{tag}_{metric}`` (msprobe's form) in ``<rank dir>/tensorboard/``,
written with the ``tensorboard`` package alone (no torch, no TensorFlow); an optional dependency (the ``report``
extra): without it the export is skipped with one warning.
"""

import csv
import math
import time
from collections import OrderedDict
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from engines import safe_fs
from engines.safe_fs import PathLike

CSV_PREFIX = {"mg_direction": "other"}


class CsvExporter:
    def __init__(self, directory: PathLike, *, step_count_per_record: int = 1, ndigits: int = 6) -> None:
        self.directory = Path(directory)
        self.k = max(1, int(step_count_per_record))
        self.ndigits = int(ndigits)
        self._headers: Dict[Path, List[str]] = {}

    def _path(self, tag: str, step: int) -> Path:
        start = (step // self.k) * self.k
        return self.directory / f"{CSV_PREFIX.get(tag, tag)}_{start}-{start + self.k - 1}.csv"

    def _cell(self, value: float) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "nan"
        return repr(round(float(value), self.ndigits))

    def write_step(self, step: int, entries: Sequence[Tuple[str, str, str, float]]) -> None:
        """``entries``: ``(tag, name, metric, value)`` of one step."""
        by_tag: "OrderedDict[str, OrderedDict[str, Dict[str, float]]]" = OrderedDict()
        for tag, name, metric, value in entries:
            by_tag.setdefault(tag, OrderedDict()).setdefault(name, {})[metric] = value
        safe_fs.make_dirs(self.directory)
        for tag, names in by_tag.items():
            path = self._path(tag, step)
            header = self._headers.get(path)
            new_file = header is None and not path.exists()
            if header is None:
                metrics: List[str] = []
                for values in names.values():
                    metrics += [m for m in values if m not in metrics]
                header = ["vpp_stage", "name", "step", *metrics]
                self._headers[path] = header
            with safe_fs.append_file(path, "a", newline="", encoding="utf-8") as handle:
                writer = csv.writer(handle)
                if new_file:
                    writer.writerow(header)
                for name, values in names.items():
                    writer.writerow(["0", name, str(step), *[self._cell(values.get(m, float("nan"))) for m in header[3:]]])


class TensorBoardExporter:
    """Scalar event files; ``available`` is False (and nothing is written) when tensorboard is not installed."""

    def __init__(self, directory: PathLike, rank: int = 0) -> None:
        self.rank = rank
        self.available = False
        self._writer = None
        try:
            from tensorboard.compat.proto.event_pb2 import Event
            from tensorboard.compat.proto.summary_pb2 import Summary
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            return
        self._Event, self._Summary = Event, Summary
        safe_fs.make_dirs(directory)
        self._writer = EventFileWriter(str(directory))
        safe_fs.restrict_files(directory)  # the event file TensorBoard just created with the umask's mode
        self.available = True

    def write_step(self, step: int, entries: Sequence[Tuple[str, str, str, float]]) -> None:
        if self._writer is None:
            return
        values = [
            self._Summary.Value(tag=f"{name}/rank{self.rank}/{tag}_{metric}", simple_value=float(value))
            for tag, name, metric, value in entries
        ]
        event = self._Event(wall_time=time.time(), step=int(step), summary=self._Summary(value=values))
        self._writer.add_event(event)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
