"""Scalar arguments in msprobe's terms, for both readers: its "md5" of a scalar (a CRC-32) and the
(dtype, value, text, crc) a scalar row holds (docs/FORMAT.md)."""

from __future__ import annotations

import zlib
from typing import Any, Optional, Tuple


def scalar_crc32(value: Any) -> str:
    """msprobe's "md5" of a scalar argument: CRC-32 of ``str(value)`` as 8 hex digits."""
    return "{:08x}".format(zlib.crc32(str(value).encode()))


def scalar_fields(value: Any) -> Tuple[str, Optional[float], Optional[str], str]:
    """(dtype, numeric value, text, crc32) of a scalar argument, in msprobe's terms."""
    if isinstance(value, dict):
        kind = str(value.get("type"))
        inner = value.get("value")
        if kind == "float" and isinstance(inner, str):  # non-finite floats are kept as text
            return "<class 'float'>", float(inner), None, scalar_crc32(float(inner))
        return kind, None, str(inner if "value" in value else value), scalar_crc32(inner)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return str(type(value)), None, str(value), scalar_crc32(value)
    return str(type(value)), float(value), None, scalar_crc32(value)
