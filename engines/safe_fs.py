"""Creating files and folders safely on shared file systems (docs/SECURITY.md "Files probe-tui writes").

Every file and folder probe-tui writes goes through here, so that:

- modes are exact whatever the umask: files ``0o640``, folders ``0o750`` (set on the open descriptor before any
  data is written, so no file is ever world-writable, not even for a moment);
- nothing is written through a symbolic link planted where probe-tui creates something: new files are opened
  with ``O_CREAT | O_EXCL | O_NOFOLLOW``, appends with ``O_NOFOLLOW``, and folders below a user-named path are
  refused when they are a link or belong to another user. A path the user names (``dump_path``, an
  ``output_path``, an export folder) may itself be or contain a link: that is the user's choice.
- refusals are :class:`UnsafePathError`, an ``OSError`` whose message is one line naming the path, so callers that
  already turn ``OSError`` into a one-line error keep doing so.

Standard library only: the store, the run folders, the analysis engines and the CLI all import it.
"""

import errno
import fcntl
import os
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator, Optional, Union

FILE_MODE = 0o640
DIR_MODE = 0o750

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

PathLike = Union[str, "os.PathLike[str]"]


class UnsafePathError(OSError):
    """A path probe-tui refuses to write through (a planted link, a folder of another user, a non-regular file).
    ``str()`` is one line naming the path."""

    def __init__(self, message: str):
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0])


def describe_os_error(path: PathLike, exc: BaseException) -> str:
    """One line for an OSError met at ``path``: a symlink loop is named as one, not as "File exists"."""
    if isinstance(exc, UnsafePathError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP or _is_loop(path):
        return f"{path}: a symbolic link loop (too many levels of symbolic links)"
    if isinstance(exc, ValueError):  # "embedded null byte" from os functions
        return f"{str(path)!r}: {exc}"
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"{path}: {text}"


def _is_loop(path: PathLike) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    except ValueError:
        return False
    return False


def _owned(st: os.stat_result) -> bool:
    return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()


def _link_refused(path: PathLike, what: str) -> UnsafePathError:
    return UnsafePathError(f"{path}: is a symbolic link where probe-tui creates its {what}; refused "
                           "(probe-tui never writes through a link below dump_path)")


# -- folders -----------------------------------------------------------------------------------------------------
def _fix_dir_mode(path: Path) -> None:
    """Set DIR_MODE on the folder just created, through a descriptor that does not follow a link."""
    fd = os.open(str(path), os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    try:
        os.fchmod(fd, DIR_MODE)
    finally:
        os.close(fd)


def make_private_dir(path: PathLike, *, exist_ok: bool = True, what: str = "folder") -> Path:
    """Create ``path`` (its parent must exist) with mode DIR_MODE. An existing one is accepted only when
    ``exist_ok`` and it is a real folder (not a link) owned by this user; else :class:`UnsafePathError`.
    For the folders probe-tui makes inside a user-named one: run folders, rank folders, result sub-folders."""
    path = Path(path)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        if not exist_ok:
            raise
        check_private_dir(path, what)
        return path
    _fix_dir_mode(path)
    return path


def check_private_dir(path: PathLike, what: str = "folder") -> None:
    """Refuse ``path`` unless it is a real folder (not a link) owned by this user."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _link_refused(path, what)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(f"{path}: exists and is not a folder")
    if not _owned(st):
        raise UnsafePathError(f"{path}: belongs to another user; probe-tui does not write into it")


def check_regular_or_absent(path: PathLike) -> None:
    """Refuse ``path`` when it exists as anything but a regular file (a link, a FIFO, a folder)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _link_refused(path, Path(path).name)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafePathError(f"{path}: is not a regular file; refused")


def make_dirs(path: PathLike) -> Path:
    """``mkdir -p`` for a path the user named: existing components are taken as they are (links followed: the
    user's choice); each component created gets DIR_MODE exactly. Errors are OSError (ELOOP for a link loop)."""
    path = Path(path)
    missing = []
    probe = path
    while True:
        try:
            st = os.stat(probe)
        except FileNotFoundError:
            if os.path.islink(probe):  # a dangling link: creating through it would create its target
                raise UnsafePathError(f"{probe}: a symbolic link to a missing folder; create the folder or "
                                      "remove the link") from None
            missing.append(probe)
            parent = probe.parent
            if parent == probe:
                break
            probe = parent
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a folder", str(probe))
        break
    made = []
    try:
        for folder in reversed(missing):
            try:
                os.mkdir(folder, DIR_MODE)
            except FileExistsError:
                if not os.path.isdir(folder):  # a file, a dangling link or a loop appeared in between
                    raise
                continue
            made.append(folder)
            _fix_dir_mode(folder)
    except BaseException:
        for folder in reversed(made):  # nothing half-made: the folders this call created go again
            try:
                os.rmdir(folder)
            except OSError:
                break
        raise
    return path


# -- files -------------------------------------------------------------------------------------------------------
def _open_fd(path: PathLike, flags: int, what: str) -> int:
    try:
        fd = os.open(str(path), flags | _NOFOLLOW | _CLOEXEC | _NONBLOCK, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise _link_refused(path, what) from None
        if exc.errno == errno.ENXIO:  # a FIFO without a reader
            raise UnsafePathError(f"{path}: is not a regular file; refused") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path}: is not a regular file; refused")
        if _NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_fd(path: PathLike, *, replace: bool = False, what: str = "file") -> int:
    """A new file opened for writing with mode FILE_MODE; never through a link. ``replace``: an existing
    ``path`` (a stale temporary file, or a planted link: the link itself, never its target) is removed first.
    Without ``replace`` an existing path raises FileExistsError."""
    if replace:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    fd = _open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, what)
    os.fchmod(fd, FILE_MODE)
    return fd


def append_fd(path: PathLike, *, what: str = "file") -> int:
    """``path`` opened for appending (created with FILE_MODE if missing); refused when it is a link or not a
    regular file."""
    try:
        fd = _open_fd(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, what)
    except FileExistsError:
        return _open_fd(path, os.O_WRONLY | os.O_APPEND, what)
    os.fchmod(fd, FILE_MODE)
    return fd


def create_file(path: PathLike, mode: str = "w", *, replace: bool = False, what: str = "file",
                **kwargs: Any) -> IO[Any]:
    """:func:`create_fd` as a file object (``mode`` "w" or "wb"; ``kwargs`` as for :func:`open`)."""
    return os.fdopen(create_fd(path, replace=replace, what=what), mode, **kwargs)


def append_file(path: PathLike, mode: str = "a", *, what: str = "file", **kwargs: Any) -> IO[Any]:
    """:func:`append_fd` as a file object (``mode`` "a" or "ab")."""
    return os.fdopen(append_fd(path, what=what), mode, **kwargs)


def temp_name(path: PathLike) -> Path:
    """A hidden, unique temporary name beside ``path``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


@contextmanager
def atomic_file(path: PathLike, mode: str = "w", *, tmp: Optional[PathLike] = None, **kwargs: Any) -> Iterator[IO[Any]]:
    """Write ``path`` through a fresh temporary file renamed over it at the end (readers see the old or the new
    file; a planted link at ``path`` is replaced, never written through). ``tmp`` names the temporary file
    (replaced if present); by default a hidden unique name. On an exception the temporary file is removed."""
    path = Path(path)
    tmp = Path(tmp) if tmp is not None else temp_name(path)
    fh = create_file(tmp, mode, replace=True, **kwargs)
    try:
        with fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def write_atomic(path: PathLike, data: Union[str, bytes], *, tmp: Optional[PathLike] = None, encoding: str = "utf-8") -> Path:
    """Replace ``path`` with ``data`` in one step (see :func:`atomic_file`)."""
    if isinstance(data, bytes):
        with atomic_file(path, "wb", tmp=tmp) as fh:
            fh.write(data)
    else:
        with atomic_file(path, "w", tmp=tmp, encoding=encoding) as fh:
            fh.write(data)
    return Path(path)


def restrict_fd(fd: int) -> None:
    """Set FILE_MODE on a file a library just created exclusively (h5py's ``"w-"``: ``O_EXCL``, so never a
    link), before any data goes into it."""
    os.fchmod(fd, FILE_MODE)


def restrict_files(folder: PathLike) -> None:
    """Set FILE_MODE on the regular files directly in ``folder`` (links skipped), for files a library created
    itself with the umask's mode (TensorBoard event files)."""
    for entry in os.scandir(folder):
        if entry.is_file(follow_symlinks=False):
            fd = _open_fd(entry.path, os.O_RDONLY, "file")
            try:
                os.fchmod(fd, FILE_MODE)
            finally:
                os.close(fd)


def _unlink_quietly(path: PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
