"""Reading a config's raw JSON safely: bounded size, regular files only, bounded nesting and number length.

The limits (ARCHITECTURE.md, "Config") are far above any real config; they exist so that a hostile or broken
file gives one `ConfigError` line instead of a hang (a FIFO, `/dev/zero`), a `RecursionError` (deep nesting) or
a `ValueError` (an integer of thousands of digits, which Python refuses to convert).
"""

import json
import os
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple, Union

from .errors import ConfigError, ConfigIssue, WarnFn, echo, format_path

__all__ = ["MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_INT_DIGITS", "read_config_text", "parse_config_json",
           "check_raw_config"]

MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A config file (or JSON string, or dict counted by its keys and strings) holds at most 4 MiB."""
MAX_DEPTH = 64
"""Objects and lists nest at most 64 levels (the deepest native config needs 6)."""
MAX_INT_DIGITS = 100
"""An integer has at most 100 digits (the largest config number, a seed, has 10)."""

_INT_LIMIT = 10 ** MAX_INT_DIGITS
_O_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _fail(where: str, message: str, hint: str = "") -> ConfigError:
    return ConfigError([ConfigIssue(where, message, hint)])


def read_config_text(path: Union[str, Path]) -> str:
    """The text of a config file; refuses what is not a regular file and files over MAX_CONFIG_BYTES.

    Opened non-blocking, then checked on the open descriptor, so a FIFO (or a file swapped for one) is refused
    instead of waiting for a writer; a device such as /dev/zero is refused before anything is read.
    """
    where = str(path)
    try:
        fd = os.open(where, _O_FLAGS)
    except FileNotFoundError:
        raise _fail(where, "no such file") from None
    except IsADirectoryError:
        raise _fail(where, "is a directory, not a config file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise _fail(where, f"cannot open the file: {_reason(exc)}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise _fail(where, "is a directory, not a config file")
        if not stat.S_ISREG(info.st_mode):
            raise _fail(where, f"is not a regular file (it is a {_kind(info.st_mode)})", "give a JSON config file")
        if info.st_size > MAX_CONFIG_BYTES:
            raise _too_big(where)
        chunks: List[bytes] = []
        size = 0
        while size <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, MAX_CONFIG_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_CONFIG_BYTES:  # grew while being read
            raise _too_big(where)
    except OSError as exc:
        raise _fail(where, f"cannot read the file: {_reason(exc)}") from None
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail(where, f"is not UTF-8 text (byte {exc.start} cannot be decoded)") from None


def _too_big(where: str) -> ConfigError:
    return _fail(where, f"is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, the most a config may be",
                 "a config holds options, not data")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


class _NumberTooLong(Exception):
    def __init__(self, digits: int):
        self.digits = digits


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _NumberTooLong(digits)
    return int(text)


def _object_pairs(duplicates: List[str]) -> Callable[[List[Tuple[str, Any]]], Dict[str, Any]]:
    def hook(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                duplicates.append(key)
            out[key] = value
        return out
    return hook


def parse_config_json(text: str, where: str, warn: WarnFn) -> Any:
    """JSON text -> the raw value; malformed, too large, too deep or too-long numbers as ConfigError."""
    if len(text) > MAX_CONFIG_BYTES:
        raise _too_big(where)
    duplicates: List[str] = []
    try:
        data = json.loads(text, object_pairs_hook=_object_pairs(duplicates), parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise _fail(where, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except _NumberTooLong as exc:
        raise _fail(where, f"holds an integer of {exc.digits} digits; config numbers have at most "
                           f"{MAX_INT_DIGITS}") from None
    except RecursionError:
        raise _too_deep(where) from None
    except ValueError as exc:  # anything else json refuses to convert
        raise _fail(where, f"invalid JSON: {str(exc)[:100]}") from None
    for key in duplicates:
        warn(key, f"key {echo(key)} appears more than once in {where}; the last value is used")
    return data


def _too_deep(path: str) -> ConfigError:
    return _fail(path, f"nests objects and lists more than {MAX_DEPTH} levels deep", "a config is a few levels deep")


def check_raw_config(data: Any, where: str) -> None:
    """Walk a raw config without recursion: nesting depth, integer length and total size (dict sources included,
    so the in-script API gets the same limits as a file). Raises ConfigError naming the offending key."""
    stack: List[Tuple[Any, Tuple[Any, ...]]] = [(data, ())]
    size = 0
    while stack:
        value, loc = stack.pop()
        if isinstance(value, (dict, list, tuple)):
            if len(loc) >= MAX_DEPTH:
                raise _too_deep(format_path(loc[:1]) or where)
            if isinstance(value, dict):
                size += sum(len(k) if isinstance(k, str) else 8 for k in value)
                stack.extend((v, loc + (k,)) for k, v in value.items())
            else:
                stack.extend((v, loc + (i,)) for i, v in enumerate(value))
            size += 2
        elif isinstance(value, str):
            size += len(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            if abs(value) >= _INT_LIMIT:  # compared, not printed: str() of a huge int raises ValueError
                raise _fail(format_path(loc) or where, f"is an integer of more than {MAX_INT_DIGITS} digits")
            size += 8
        else:
            size += 8
        if size > MAX_CONFIG_BYTES:
            raise _fail(where, f"is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, the most a config may be",
                        "a config holds options, not data")
