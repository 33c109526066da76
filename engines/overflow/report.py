"""What one checked step found: the flagged calls in the order they ran, and the first origin of the step."""

from typing import Any, Dict, List, Optional

from engines.overflow import origin as og

KIND_NAMES = {0: "api", 1: "module", 2: "parameters_grad", 3: "save"}
DIRECTION_NAMES = {0: "forward", 1: "backward", 2: ""}


class FlaggedCall:
    """A call whose tensors hold non-finite values that are not a mask's."""

    __slots__ = ("order", "name", "kind", "direction", "origin", "reason", "parent", "kept", "slots", "lost", "where",
                 "collective", "clock")

    def __init__(self, order: int, name: str, kind: int, direction: int, origin: int, reason: str, parent: str,
                 kept: bool, slots: Dict[str, str], lost: Optional[Dict[str, str]] = None, where: str = "") -> None:
        self.order = order
        self.name = name
        self.kind = kind
        self.direction = direction
        self.origin = origin
        self.reason = reason
        self.parent = parent
        self.kept = kept
        self.slots = slots  # slot -> "nan, +inf" for each non-finite tensor
        self.lost = lost or {}  # slot -> why its tensor was not saved
        self.where = where  # the user's code line that made the call ("model.py:52 forward: y = x.exp()")
        self.collective: Optional[Dict[str, Any]] = None  # args["collective"] of a collective call
        self.clock: Dict[str, int] = {}  # group key -> collectives this rank had issued on it when the call ended

    @property
    def origin_name(self) -> str:
        return og.ORIGIN_NAMES[self.origin]

    def as_dict(self) -> Dict[str, Any]:
        return {"order": self.order, "name": self.name, "kind": KIND_NAMES.get(self.kind, str(self.kind)),
                "direction": DIRECTION_NAMES.get(self.direction, ""), "origin": self.origin_name,
                "reason": self.reason, "parent": self.parent, "kept": self.kept, "nonfinite": dict(self.slots),
                "not_saved": dict(self.lost), "where": self.where, "collective": self.collective,
                "clock": dict(self.clock)}


class StepFindings:
    """Flagged calls of one step, in the order they finished. ``first`` is where the step's first non-finite value
    came from: a ``produced`` call, or an ``inputs`` call when the step started from values already bad."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.calls: List[FlaggedCall] = []
        self.flagged = 0
        self.masks = 0
        self.checked = 0
        self.stopped = False  # overflow_nums was reached in this step
        self.syncs = 0  # host transfers of finiteness results (batches + tensors read one by one)

    def add(self, call: FlaggedCall) -> None:
        self.calls.append(call)

    @property
    def first(self) -> Optional[FlaggedCall]:
        # Calls are in the order they finished: an API call before the module that contains it.
        return self.calls[0] if self.calls else None

    def line(self) -> str:
        first = self.first
        if first is None:
            return "step %d: no overflow" % self.step
        where = " at %s" % first.where if first.where else (" in %s" % first.parent if first.parent else "")
        return "step %d: %s%s: %s" % (self.step, first.name, where, first.reason)

    def as_dict(self) -> Dict[str, Any]:
        first = self.first
        return {"step": self.step, "flagged": self.flagged, "masks": self.masks, "checked": self.checked,
                "first": first.as_dict() if first is not None else None,
                "calls": [c.as_dict() for c in self.calls], "stopped": self.stopped, "syncs": self.syncs}


def code_line(frame_text: str) -> str:
    """``File /a/b/model.py, line 52, in forward,\n y = x.exp()`` -> ``model.py:52 forward: y = x.exp()``."""
    head, _, source = frame_text.partition("\n")
    parts = [p.strip() for p in head.split(",")]
    if len(parts) < 3 or not parts[0].startswith("File "):
        return frame_text.strip()
    path = parts[0][len("File "):]
    line = parts[1].replace("line ", "")
    func = parts[2].replace("in ", "")
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    text = "%s:%s %s" % (base, line, func)
    return text + (": " + source.strip() if source.strip() else "")

