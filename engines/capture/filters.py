"""Which records a session keeps: rank, step, scope range, list substrings, data_mode axes and API allow/deny.

Each decision is cheap and made before any statistic is computed, so a filtered record costs a name and a counter.
"""

from typing import Iterable, Optional, Tuple

from engines.capture.naming import matches_any
from engines.capture.options import CaptureOptions

# Reasons a record was not written (keys of the missing-records summary).
REASON_SCOPE = "filtered: outside scope"
REASON_LIST = "filtered: not in list"
REASON_DATA_MODE = "filtered: data_mode"
REASON_API_DENIED = "filtered: apis allow/deny"


class DataMode:
    """msprobe's data_mode: axes {forward, backward} x {input, output}; an axis left out means both."""

    __slots__ = ("forward", "backward", "input", "output")

    def __init__(self, modes: Iterable[str]) -> None:
        modes = set(modes) or {"all"}
        if "all" in modes:
            modes = {"forward", "backward", "input", "output"}
        direction = modes & {"forward", "backward"} or {"forward", "backward"}
        io = modes & {"input", "output"} or {"input", "output"}
        self.forward = "forward" in direction
        self.backward = "backward" in direction
        self.input = "input" in io
        self.output = "output" in io

    def wants(self, forward: bool, is_input: bool) -> bool:
        return (self.forward if forward else self.backward) and (self.input if is_input else self.output)

    @property
    def param_grads(self) -> bool:
        """Parameter gradients are backward outputs (gradients w.r.t. forward inputs); forward-only skips them."""
        return self.backward and self.output


class ScopeRange:
    """A ``[start, end]`` range of record names: everything from the first ``start`` through ``end``, in call order."""

    __slots__ = ("start", "end", "state")

    BEFORE, INSIDE, AFTER = 0, 1, 2

    def __init__(self, scope: Tuple[str, ...]) -> None:
        self.start: Optional[str] = scope[0] if scope else None
        self.end: Optional[str] = scope[1] if scope else None
        self.state = self.INSIDE if not scope else self.BEFORE

    @property
    def active(self) -> bool:
        return self.start is not None

    @property
    def finished(self) -> bool:
        return self.state == self.AFTER

    def admit(self, name: str) -> bool:
        """Advance the range with the next record name; True when the record lies inside it."""
        if self.start is None:
            return True
        if self.state == self.BEFORE:
            if name != self.start:
                return False
            self.state = self.INSIDE
        if self.state == self.INSIDE:
            if name == self.end:
                self.state = self.AFTER
            return True
        return False

    def reset(self) -> None:
        """msprobe keeps the range open across steps only until it closes; a new step re-arms it."""
        if self.start is not None:
            self.state = self.BEFORE


class ApiSelector:
    """The config's ``apis`` allow/deny substring lists, applied to API base names such as ``Functional.gelu``."""

    __slots__ = ("allow", "deny")

    def __init__(self, allow: Iterable[str] = (), deny: Iterable[str] = ()) -> None:
        self.allow = tuple(allow)
        self.deny = tuple(deny)

    def admits(self, api_base_name: str) -> bool:
        if self.deny and matches_any(api_base_name, self.deny):
            return False
        if self.allow and not matches_any(api_base_name, self.allow):
            return False
        return True


class CaptureFilter:
    """All filters of one session. ``record_reason(name)`` is None when a record is kept."""

    def __init__(self, options: CaptureOptions) -> None:
        self.options = options
        self.ranks = frozenset(options.ranks)
        self.steps = frozenset(options.steps)
        self.last_step = max(options.steps) if options.steps else None
        self.data_mode = DataMode(options.data_mode)
        self.scope = ScopeRange(options.scope)
        self.list_patterns = tuple(options.list_patterns)
        self.apis = ApiSelector(options.api_allow, options.api_deny)
        self.tensor_list = tuple(options.tensor_list)
        # no scope and no list: ``record_reason`` is None for every record (the per-call path skips the call)
        self.plain = not self.scope.active and not self.list_patterns

    def rank_selected(self, rank: int) -> bool:
        return not self.ranks or rank in self.ranks

    def step_selected(self, step: int) -> bool:
        return not self.steps or step in self.steps

    def past_last_step(self, step: int) -> bool:
        return self.last_step is not None and step > self.last_step

    def record_reason(self, name: str, inside_listed_module: bool = False) -> Optional[str]:
        """Apply scope then list to a record about to be written (in call order: scope is stateful)."""
        if not self.scope.admit(name):
            return REASON_SCOPE
        if self.list_patterns and not inside_listed_module and not matches_any(name, self.list_patterns):
            return REASON_LIST
        return None

    def listed(self, name: str) -> bool:
        return bool(self.list_patterns) and matches_any(name, self.list_patterns)

    def saves_tensor_of(self, name: str) -> bool:
        """statistics + tensor_list: full tensors for records whose name contains an entry."""
        return bool(self.tensor_list) and matches_any(name, self.tensor_list)

    def new_step(self) -> None:
        self.scope.reset()
