"""A reader that closes its files at the end of a ``with`` block."""

from typing import Any, TypeVar

_Self = TypeVar("_Self", bound="Closing")


class Closing:
    """Mixin for readers: ``with Reader(path) as reader:`` calls ``reader.close()`` however the block ends."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
