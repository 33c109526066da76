"""msprobe's finer in-script controls over a capture session, framework-neutral.

- ``TokenWindow``: ``start(model, token_range=[a, b])``. An inference loop calls the root model once per generated
  token; counting those calls from 0 at each ``start()``, recording is on from call ``a`` through call ``b``
  (both included) and off from call ``b + 1`` (docs/MSPROBE.md). The count is a forward pre-hook on the root, so
  everything the root's call does is inside or outside the window as a whole.
- ``CustomApis``: ``register_custom_api(module, api, api_prefix)`` puts a wrapper at ``module.api`` that records
  each call as one API record ``{api_prefix}.{api}.{N}.forward`` (and its backward); what the call does inside is
  not recorded again (only the outermost API is, as for the built-in ones). ``restore_custom_api`` puts the
  original back; ``close()`` restores every wrapper that is still in place.

Both work through duck typing (``register_forward_pre_hook`` exists on torch's ``nn.Module`` and MindSpore's
``Cell``; the session's ``api_capture`` records the call), so no framework is imported here.
"""

import functools
from typing import Any, Callable, Dict, List, Optional, Tuple


def check_token_range(token_range: Any) -> Optional[Tuple[int, int]]:
    """``[a, b]`` with ints ``0 <= a <= b`` (None stays None); ValueError naming the argument otherwise."""
    if token_range is None:
        return None
    if (not isinstance(token_range, (list, tuple)) or len(token_range) != 2
            or any(isinstance(v, bool) or not isinstance(v, int) for v in token_range)):
        raise ValueError("token_range: expected [start, end], two integers, got %r" % (token_range,))
    first, last = int(token_range[0]), int(token_range[1])
    if first < 0 or first > last:
        raise ValueError("token_range: expected 0 <= start <= end, got [%d, %d]" % (first, last))
    return first, last


def check_rank_id(rank_id: Any) -> Optional[int]:
    """An integer >= 0 (None stays None); ValueError otherwise."""
    if rank_id is None:
        return None
    if isinstance(rank_id, bool) or not isinstance(rank_id, int) or rank_id < 0:
        raise ValueError("rank_id: expected an integer >= 0, got %r" % (rank_id,))
    return int(rank_id)


class TokenWindow:
    """Recording on for the root model's calls ``first``..``last`` (counted from 0 at each ``start()``)."""

    def __init__(self, session: Any, root: Any, first: int, last: int) -> None:
        if isinstance(root, (list, tuple)):  # msprobe: one model counts the tokens, the first one
            root = root[0] if root else None
        hook = getattr(root, "register_forward_pre_hook", None)
        if hook is None:
            raise ValueError("token_range: start(model=..., token_range=...) needs the model whose calls count the "
                             "tokens")
        self.session = session
        self.root = root
        self.first = first
        self.last = last
        self.count = 0
        self.handle: Any = hook(self._pre)

    def restart(self, first: int, last: int) -> None:
        """A new ``start()``: count from 0 again; recording waits for call ``first``."""
        self.first, self.last, self.count = first, last, 0
        self.session.running = False

    def _may_record(self) -> bool:
        s = self.session
        return bool(s.step_open and not s.closed and not s.finished)

    def _pre(self, *args: Any) -> None:
        index = self.count
        self.count += 1
        if index == self.first:
            self.session.running = self._may_record()
        elif index == self.last + 1:
            self.session.running = False
        return None

    def remove(self) -> None:
        try:
            self.handle.remove()
        except Exception:
            pass


class CustomApis:
    """The wrappers ``register_custom_api`` put in place (``info_class``: the adapter's ``ApiInfo``)."""

    def __init__(self, session: Any, info_class: Callable[..., Any]) -> None:
        self.session = session
        self.info_class = info_class
        self.originals: Dict[Tuple[int, str], Tuple[Any, Any, Any]] = {}  # (id(module), api) -> (module, orig, wrapper)

    def register(self, module: Any, api: str, prefix: Optional[str] = None) -> None:
        if not isinstance(api, str) or not api:
            raise ValueError("register_custom_api: api must be the name of a callable of the module, got %r"
                             % (api,))
        key = (id(module), api)
        if key in self.originals:
            return
        original = getattr(module, api, None)
        if not callable(original):
            raise ValueError("register_custom_api: %s has no callable %r"
                             % (getattr(module, "__name__", type(module).__name__), api))
        if prefix is None:
            prefix = getattr(module, "__name__", None) or type(module).__name__
        session = self.session
        info = self.info_class(str(prefix), api, session.filter.apis.admits("%s.%s" % (prefix, api)))

        def inside(*args: Any, **kwargs: Any) -> Any:
            session.busy_depth += 1  # what the call does is not recorded again
            try:
                return original(*args, **kwargs)
            finally:
                session.busy_depth -= 1

        @functools.wraps(original)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if session.busy_depth or not session.running or not info.captured or session.closed:
                return original(*args, **kwargs)
            return session.api_capture.call(info, inside, args, kwargs)

        setattr(module, api, wrapper)
        self.originals[key] = (module, original, wrapper)

    def restore(self, module: Any, api: str) -> None:
        entry = self.originals.pop((id(module), api), None)
        if entry is None:
            return
        mod, original, wrapper = entry
        if getattr(mod, api, None) is wrapper:  # someone else's wrapper on top stays
            setattr(mod, api, original)

    def restore_all(self) -> None:
        for (_, api), (module, _, _) in list(self.originals.items()):
            self.restore(module, api)

    def names(self) -> List[str]:
        return sorted(api for _, api in self.originals)
