"""How numbers read, for the CLI and the app alike: sizes, durations, times, counts, metrics.

Engines return raw numbers (``run.json`` stores them); this module is the one place they become text, so the
headless summary, the progress line and every app screen show the same size the same way. Summary keys carry
their unit in a suffix (``size_bytes``, ``elapsed_s``): :func:`summary_field` turns such a key and its number into
the label and text both front ends show.
"""

import math
from datetime import datetime
from typing import Any, Optional, Tuple

NONE = "—"
BYTE_UNITS = ("B", "KB", "MB", "GB", "TB")
BYTE_BASE = 1000.0  # decimal units (KB = 1000 B), as ``ls --si`` and disk makers count


def _finite(value: Any) -> Optional[float]:
    """``value`` as a finite float; None for None, a bool, or anything that is not a finite number."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def format_bytes(size: Optional[float], none: str = NONE) -> str:
    """``512 B``, ``911.4 KB``, ``1.5 MB``; ``none`` for None or a value that is not a number."""
    value = _finite(size)
    if value is None:
        return none
    for unit in BYTE_UNITS:
        if abs(value) < BYTE_BASE or unit == BYTE_UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= BYTE_BASE
    return f"{value:.1f} {BYTE_UNITS[-1]}"  # pragma: no cover


def format_clock(seconds: Optional[float]) -> str:
    """Elapsed time as a clock: ``0:07``, ``12:05``, ``1:02:03``."""
    seconds_int = int(max(0.0, float(seconds or 0.0)))
    hours, rest = divmod(seconds_int, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_duration(seconds: Optional[float], none: str = NONE) -> str:
    """A duration in seconds: ``0.4s``, ``12.3s``, ``3:25`` from a minute on."""
    value = _finite(seconds)
    if value is None:
        return none
    if value >= 60:
        return format_clock(value)
    return f"{value:.1f}s"


def number_text(value: Optional[float], digits: int = 4) -> str:
    """A metric as people read it: ``3.142``, ``1.2e-05``, ``inf``; ``—`` where there is none (NaN)."""
    if value is None:
        return NONE
    v = float(value)
    if math.isnan(v):
        return NONE
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return "{:.{}g}".format(v, digits)


def count_text(n: Optional[int]) -> str:
    """``12,345``; ``—`` for None."""
    return NONE if n is None else "{:,}".format(int(n))


def format_loss(loss: Any) -> str:
    """A loss on the progress line: ``2.3026``; ``-`` when there is none."""
    if loss is None:
        return "-"
    try:
        value = float(loss)
    except (TypeError, ValueError):
        return str(loss)
    return f"{value:.4f}" if math.isfinite(value) else str(value)


def format_value(value: Any) -> str:
    """A summary value with no unit: floats to six significant digits, the rest as ``str``."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def summary_field(key: str, value: Any) -> Tuple[str, str]:
    """The name and text of one summary entry: ``("size", "1.5 MB")`` for ``("size_bytes", 1468006)``,
    ``("elapsed", "3.2s")`` for ``("elapsed_s", 3.214)``; other keys keep their name. The unit suffix goes with
    the number it describes; each front end dresses the name its own way (the CLI writes underscores as spaces)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and key.endswith("_bytes"):
        return key[: -len("_bytes")], format_bytes(value)
    if number and key.endswith("_s"):
        return key[: -len("_s")], format_duration(value)
    return key, format_value(value)


def format_time(value: Any) -> str:
    """A time as local ``YYYY-mm-dd HH:MM`` (ISO strings, datetimes and epoch seconds accepted)."""
    if value in (None, ""):
        return NONE
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M")
    if isinstance(value, datetime):
        moment = value
    else:
        try:
            moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return str(value)[:16]
    if moment.tzinfo is not None:
        moment = moment.astimezone()  # run.json keeps UTC; people read local time
    return moment.strftime("%Y-%m-%d %H:%M")
