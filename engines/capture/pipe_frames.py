"""Length-prefixed pickled messages over a pipe: how the training process and its writer process talk.

A frame is 8 bytes (the body's length, little-endian) and the body, one ``pickle`` of protocol 5. Both ends
are this package's own code on the same machine and interpreter; the writer process reads only from the pipe its
parent opened for it (no file, socket or other process is read), so unpickling is not a way in from outside.

Only plain values cross: builtins, numpy's and this package's own classes (``PLAIN_MODULES``). ``dumps_plain``
refuses anything else before it is sent, and ``receive`` will not load it, so the writer process never imports a
framework (torch alone would add ~250 MB and a second of start-up to it).
"""

import io
import os
import pickle
import struct
from typing import Any, Optional

_HEADER = struct.Struct("<Q")
PLAIN_MODULES = ("builtins", "numpy", "engines", "collections", "copyreg", "_codecs")


def _plain(module: str) -> bool:
    return module.split(".", 1)[0] in PLAIN_MODULES


class NotPlain(TypeError):
    """A value of a class from elsewhere (a framework's) in a message."""


class _PlainPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:  # not called for exact builtins (str, int, list, dict, ...)
        module = getattr(type(obj), "__module__", None) or ""
        if not _plain(module):
            raise NotPlain("%s.%s" % (module, type(obj).__qualname__))
        return NotImplemented


def dumps_plain(message: Any) -> bytes:
    """``message`` pickled; ``NotPlain`` when it holds a value of a class outside ``PLAIN_MODULES``."""
    out = io.BytesIO()
    _PlainPickler(out, protocol=5).dump(message)
    return out.getvalue()


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if not _plain(module):
            raise pickle.UnpicklingError("%s.%s is not a plain value" % (module, name))
        return super().find_class(module, name)


def send(fd: int, message: Any) -> None:
    """Write one message to ``fd`` (blocking until the pipe took all of it)."""
    send_body(fd, dumps_plain(message))


def send_body(fd: int, body: bytes) -> None:
    """Write one message already pickled (``dumps_plain``)."""
    _write_all(fd, _HEADER.pack(len(body)))
    _write_all(fd, body)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def receive(fd: int) -> Optional[Any]:
    """The next message from ``fd``; None at the end of the pipe (the other end closed, or a frame cut short)."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    body = _read_exactly(fd, size)
    if body is None:
        return None
    return _PlainUnpickler(io.BytesIO(body)).load()


def _read_exactly(fd: int, size: int) -> Optional[bytearray]:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            return None
        got += n
    return buf


def widen(fd: int, size: int = 1 << 20) -> None:
    """Ask Linux for a pipe buffer of ``size`` bytes (a step's records go in without waiting for the reader);
    where that is refused the default buffer stays."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ImportError, ValueError):
        pass
