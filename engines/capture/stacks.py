"""Call sites, deduplicated: one id per distinct Python stack, frames formatted once.

Walking ``sys._getframe`` and keying on ``(code object, line)`` costs a few microseconds a call; the text of a
stack (file, line, function, source line) is produced only the first time that stack is seen.
"""

import inspect
import linecache
import os
import sys
from types import CodeType, FrameType
from typing import Dict, List, Optional, Sequence, Tuple  # noqa: F401

from engines.dumps.stack_frames import is_tool_path

_HERE = os.path.dirname(os.path.abspath(__file__))
# code flags of frames that can be suspended and resumed by another caller (generators, coroutines)
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE

# Frames of the tool itself and of torch's dispatch plumbing say nothing about the user's call site.
_DEFAULT_SKIP_SUFFIXES = (
    os.sep + os.path.join("torch", "overrides.py"),
    os.sep + os.path.join("torch", "utils", "_python_dispatch.py"),
    os.sep + os.path.join("torch", "nn", "modules", "module.py"),
    os.sep + os.path.join("torch", "utils", "hooks.py"),
)


def _is_tool_file(filename: str) -> bool:
    """probe-tui's own modules (the CLI, the runner, the target loader, capture, adapters; demo models are user
    code), runpy (engines/dumps/stack_frames.py) and torch's dispatch plumbing."""
    if filename.startswith(_HERE):
        return True
    return filename.endswith(_DEFAULT_SKIP_SUFFIXES) or is_tool_path(filename)


class StackTable:
    """Interns stacks of the calling thread. Ids are local to the table; ``drain_new()`` hands new ones over."""

    def __init__(self, depth: int = 48) -> None:
        self.depth = depth
        self._ids: Dict[Tuple, int] = {}
        self._frames: List[List[str]] = []
        self._new: List[int] = []
        # id(code) -> code object, of the tool's frames (skipped) and of the user's (kept); holding the code
        # objects keeps their ids theirs
        self._tool: Dict[int, CodeType] = {}
        self._codes: Dict[int, CodeType] = {}
        # the innermost user frame of the previous call, the key part of its callers, its line -> stack id
        self._last_frame: Optional[FrameType] = None
        self._last_outer: Tuple[int, ...] = ()
        self._last_sids: Dict[int, int] = {}
        # file -> its lines, for the source lines of the stacks first seen this step; let go at the step's end
        self._lines: Dict[str, List[str]] = {}

    def current(self, skip: int = 1, anchor: Optional[FrameType] = None, anchor_key: Tuple[int, ...] = ()) -> int:
        """Id of the caller's stack (innermost frame first), skipping tool frames.

        The key is the flat tuple (id of code, last instruction offset, ...): no per-frame objects and no
        line-number lookups on the hot path; line numbers are worked out only for a stack seen the first time.
        Code objects are keyed by ``id``: hashing a code object hashes its bytecode and constants (~0.5 us, twice
        a frame before); the table keeps every code object it has seen, so an id is never reused for another.

        Consecutive calls usually come from the same function run (a ``forward`` making ten operator calls):
        while the innermost user frame is the very frame object of the previous call, everything above it is
        unchanged (its callers are suspended in the call to it), so the stack is known from its current line
        alone. That frame is held until the next call comes from another one (or the step ends); generator and
        coroutine frames, which can be resumed from another caller, are never reused this way.

        ``anchor``, ``anchor_key``: the enclosing module call's (``module_key``): a walk above the innermost frame
        stops there and takes the key above it from ``anchor_key``, the same key.
        """
        frame: Optional[FrameType]
        try:
            frame = sys._getframe(skip + 1)
        except ValueError:
            return -1
        tool = self._tool
        user = self._codes
        while frame is not None:  # the tool's frames above the caller
            code = frame.f_code
            cid = id(code)
            if cid in tool:
                frame = frame.f_back
                continue
            if cid not in user:
                if _is_tool_file(code.co_filename):
                    tool[cid] = code
                    frame = frame.f_back
                    continue
                user[cid] = code
            break
        if frame is None or self.depth <= 0:
            return self._intern(())
        lasti = frame.f_lasti
        if frame is self._last_frame:
            sid = self._last_sids.get(lasti)
            if sid is None:
                sid = self._last_sids[lasti] = self._intern((cid, lasti) + self._last_outer)
            return sid
        if anchor is None:
            outer = self._walk(frame.f_back, self.depth - 1)
        else:
            outer = self._walk_to(frame.f_back, self.depth - 1, anchor, anchor_key)
        sid = self._intern((cid, lasti) + outer)
        if frame.f_code.co_flags & _RESUMABLE:
            self._last_frame = None
        else:
            self._last_frame = frame
            self._last_outer = outer
            self._last_sids = {lasti: sid}
        return sid

    def _walk(self, frame: Optional[FrameType], depth: int) -> Tuple[int, ...]:
        """The key part of ``frame`` and its callers: up to ``depth`` user frames."""
        key: list = []
        append = key.append
        tool = self._tool
        user = self._codes
        n = 0
        while frame is not None and n < depth:
            code = frame.f_code
            cid = id(code)
            if cid in tool:
                frame = frame.f_back
                continue
            if cid not in user:
                if _is_tool_file(code.co_filename):
                    tool[cid] = code
                    frame = frame.f_back
                    continue
                user[cid] = code
            append(cid)
            append(frame.f_lasti)
            n += 1
            frame = frame.f_back
        return tuple(key)

    def module_key(self, skip: int, anchor: Optional[FrameType], anchor_key: Tuple[int, ...]
                   ) -> Tuple[Optional[FrameType], Tuple[int, ...]]:
        """The key ``current(skip)`` interns for a module call's hook, walked only up to the enclosing module
        call's *anchor*, and the anchor this call hands its own children (with the key as their ``anchor_key``).

        A module call's anchor is the frame that called its hook (torch's ``Module._call_impl``, which goes on to
        call ``forward``): while the module runs, every call inside it passes through that frame, whose callers
        are suspended, so their part of the key is the module's own. A child's walk stops there and takes
        ``anchor_key`` (cut to the depth left): the same key as a walk to the top, a few frames walked instead of
        the whole stack. An anchor not on the stack (a call left on the stack by a hook that did not pop it, or
        another thread) is never met: the walk goes to the top as ``current`` does. The anchor is held by the
        caller while the module runs (a frame held cannot be reused by another call). None is handed on when
        the hook's own frame is not the tool's (its key would begin with it)."""
        try:
            frame = sys._getframe(skip + 1)
        except ValueError:
            return None, ()
        if self.depth <= 0:
            return None, ()
        key = self._walk_to(frame, self.depth, anchor, anchor_key)
        return (frame.f_back if id(frame.f_code) in self._tool else None), key

    def _walk_to(self, frame: Optional[FrameType], depth: int, anchor: Optional[FrameType],
                 anchor_key: Tuple[int, ...]) -> Tuple[int, ...]:
        """``_walk`` that stops at ``anchor`` and takes ``anchor_key`` for everything above it. (A copy of its loop
        with the anchor test, rather than ``_walk`` calling it with no anchor: ``_walk`` runs for every API call.)"""
        key: list = []
        append = key.append
        tool = self._tool
        user = self._codes
        n = 0
        while frame is not None and n < depth:
            if frame is anchor:
                return tuple(key) + anchor_key[:2 * (depth - n)]
            code = frame.f_code
            cid = id(code)
            if cid in tool:
                frame = frame.f_back
                continue
            if cid not in user:
                if _is_tool_file(code.co_filename):
                    tool[cid] = code
                    frame = frame.f_back
                    continue
                user[cid] = code
            append(cid)
            append(frame.f_lasti)
            n += 1
            frame = frame.f_back
        return tuple(key)

    def intern_key(self, tkey: Tuple[int, ...]) -> int:
        """The id of a key ``module_key`` gave (as ``current`` interns it)."""
        return self._intern(tkey)

    def _intern(self, tkey: Tuple[int, ...]) -> int:
        sid = self._ids.get(tkey)
        if sid is None:
            sid = len(self._frames)
            self._ids[tkey] = sid
            user = self._codes
            self._frames.append(_format(tuple(user[c] if i % 2 == 0 else c for i, c in enumerate(tkey)),
                                        self._lines))
            self._new.append(sid)
        return sid

    def frames(self, sid: int) -> List[str]:
        return self._frames[sid]

    def drain_new(self) -> List[Tuple[int, List[str]]]:
        """The stacks first seen since the last call (at step end: the frame held for reuse is let go too)."""
        new = [(sid, self._frames[sid]) for sid in self._new]
        self._new = []
        self._last_frame = None
        self._lines = {}
        return new

    def __len__(self) -> int:
        return len(self._frames)


def _line_of(code: CodeType, lasti: int) -> int:
    for start, end, line in code.co_lines() if hasattr(code, "co_lines") else ():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno


def _source_line(filename: str, line: int, lines: Dict[str, List[str]]) -> str:
    """``linecache.getline(filename, line)``, the file's lines kept in ``lines`` (the table's, for one step) rather
    than in ``linecache``'s process-wide cache, which kept every source file a stack passed through (torch's
    modules among them: ~0.5 MB on the reference workload) for the life of the process (issue 21). A file the
    cache already held stays there; one it did not is not added."""
    text = lines.get(filename)
    if text is None:
        held = filename in linecache.cache
        text = lines[filename] = linecache.getlines(filename)
        if not held:
            linecache.cache.pop(filename, None)
    return text[line - 1] if 1 <= line <= len(text) else ""


def _format(key: Sequence[object], lines: Optional[Dict[str, List[str]]] = None) -> List[str]:
    out = []
    if lines is None:
        lines = {}
    for i in range(0, len(key), 2):
        code, lasti = key[i], key[i + 1]
        filename = code.co_filename  # type: ignore[attr-defined]
        line = _line_of(code, lasti)  # type: ignore[arg-type]
        text = _source_line(filename, line, lines).strip()
        out.append("File %s, line %d, in %s,\n %s" % (filename, line, code.co_name, text))  # type: ignore[attr-defined]
    return out
