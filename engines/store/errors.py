"""Errors and warnings raised by the store."""

from engines.errors import BadInputError


class StoreError(BadInputError):
    """Bad input or an unreadable store; the message is one line naming the file or field."""


class StoreWarning(UserWarning):
    """Something the user should know once (NFS fallback, disk budget reached)."""
