"""Errors and warnings raised by the store."""

from engines.errors import BadInputError


class StoreError(BadInputError):
    """Bad input or an unreadable store; the message is one line naming the file or field. ``reason`` tells
    a writer's refusals apart: ``exists`` (the store was written already, or another process writes it) and
    ``disk_full`` (no room to create it)."""

    def __init__(self, message: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StoreWarning(UserWarning):
    """Something the user should know once (NFS fallback, disk budget reached)."""
