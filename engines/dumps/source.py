"""The :class:`DumpSource` interface every dump reader implements (ours: ``probe_source``; msprobe's: ``msprobe``),
and the one way reading a damaged file fails (:class:`DumpSourceError`). ``engines.dumps.opener.open_dump`` picks
the reader for a path.

A source is a set of (rank, step) pieces. Each piece gives a :class:`~engines.dumps.rows.RowTable` and a
picklable tensor spec whose ``open()`` returns a reader with ``info(loc)`` and ``read(loc, start, stop)``, so that
worker processes stream full tensors without the parent holding them.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple, TypeVar, cast

import numpy as np

from engines.dumps.rows import RowTable
from engines.errors import BadInputError
from engines.safe_fs import PathLike

#: What reading a damaged or foreign file raises besides the readers' own errors: HDF5 and file errors
#: (OSError, and RuntimeError for some of h5py's), missing objects and keys (KeyError), values of the wrong type or size (ValueError, TypeError,
#: IndexError, OverflowError), nesting or sizes no real dump has (RecursionError, MemoryError), files cut short
#: (EOFError).
DAMAGE = (OSError, KeyError, ValueError, TypeError, IndexError, OverflowError, RecursionError, MemoryError,
          EOFError, RuntimeError)


class DumpSourceError(BadInputError, ValueError):
    """A path is not a readable dump. The message is one line naming the path."""


class TensorReader(Protocol):
    """Reads the full tensors of one piece: ``loc`` is a row's ``data`` locator."""

    def info(self, loc: int) -> Tuple[np.dtype, int, tuple]:
        """(dtype of the values :meth:`read` returns, element count, stored shape or ``()`` when not known)."""
        ...

    def read(self, loc: int, start: int, stop: int) -> np.ndarray:
        """Elements ``start:stop`` of the flattened tensor."""
        ...

    def close(self) -> None:
        ...


class TensorSpec(Protocol):
    """Picklable description of a piece's tensors; a worker process opens its own reader from it."""

    def open(self) -> TensorReader:
        ...


@contextmanager
def reading(path: PathLike) -> Iterator[None]:
    """Anything a damaged file makes the readers raise while reading the dump at ``path`` becomes a
    :class:`DumpSourceError` naming it (bad input, exit code 2), never a traceback."""
    try:
        yield
    except BadInputError:
        raise
    except DAMAGE as exc:
        raise DumpSourceError("{}: damaged or not a dump ({}: {})".format(path, type(exc).__name__, exc)) from None


_Method = TypeVar("_Method", bound=Callable[..., Any])


def guarded(method: _Method) -> _Method:
    """:func:`reading` around a :class:`DumpSource` method (``self.path`` names the dump)."""

    @functools.wraps(method)
    def wrapper(self: DumpSource, *args: Any, **kwargs: Any) -> Any:
        with reading(self.path):
            return method(self, *args, **kwargs)

    return cast(_Method, wrapper)  # the same signature: wrapper passes every argument through


class DumpSource:
    """Interface every dump reader implements."""

    origin = ""  # "probe-tui" or "msprobe"
    path: Path

    def ranks(self) -> List[int]:
        raise NotImplementedError

    def steps(self, rank: int) -> List[int]:
        raise NotImplementedError

    @property
    def framework(self) -> str:
        return ""

    def holds(self) -> Dict[str, bool]:
        """Which data the dump has: ``{"tensor": .., "statistics": .., "md5": ..}``."""
        raise NotImplementedError

    def rows(self, rank: int, step: int) -> RowTable:
        raise NotImplementedError

    def tensor_spec(self, rank: int, step: int) -> TensorSpec:
        raise NotImplementedError

    def record_args(self, rank: int, step: int) -> Dict[str, str]:
        """Record -> its full ``args`` JSON skeleton (docs/FORMAT.md ``records.args``) where the dump keeps one
        (ours); empty when it does not (msprobe's: the arguments are rebuilt from the rows)."""
        return {}

    def tree(self, rank: int, step: int) -> Dict[str, Optional[str]]:
        """Module hierarchy: record -> enclosing module record."""
        return {}

    def status(self, rank: int) -> str:
        """How the writer of a rank left it (``finished``, ``failed``, ``running``...; "" when not known)."""
        return ""

    def describe(self) -> str:
        return str(self.path)

    def notes(self) -> List[str]:
        """What a reader should know about the dump's completeness: a dump the disk stopped, a partial last step
        (docs/FORMAT.md, "Partial steps"), a rank without a complete step."""
        return []

    def release_others(self, rank: int) -> None:
        """Let go of what was read for ranks other than ``rank`` (open files, decoding caches): a reader walking
        the ranks one after the other (compare) keeps memory flat however many ranks the dump has. Reading a
        released rank again reopens it."""

    def close(self) -> None:
        pass


def require_steps(source: DumpSource) -> None:
    """Refuse a dump with no committed step at all (a store whose writer died or met a full disk before its
    first commit): reading it would list nothing and say nothing."""
    ranks = source.ranks()
    if any(source.steps(r) for r in ranks):
        return
    states = ["rank {}: writer {}".format(r, source.status(r)) for r in ranks[:4] if source.status(r)]
    raise DumpSourceError("{}: holds no committed step to read{}".format(
        source.path, " ({})".format(", ".join(states)) if states else ""))
