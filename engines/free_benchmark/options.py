"""What a free_benchmark session needs from its job, in one framework-neutral object."""

import dataclasses
from typing import Any, Tuple

from engines.capture.naming import matches_any
from engines.capture.options import field_of as _get

PERT_MODES = ("improve_precision", "add_noise", "bit_noise", "change_value", "no_change", "to_cpu")


@dataclasses.dataclass
class FreeBenchmarkOptions:
    pert_mode: str = "improve_precision"
    handler_type: str = "check"
    fuzz_stage: str = "forward"
    fuzz_device: str = "npu"
    scope: Tuple[str, ...] = ()
    list_patterns: Tuple[str, ...] = ()
    if_preheat: bool = False
    preheat_step: int = 15
    max_sample: int = 20

    def __post_init__(self) -> None:
        if self.pert_mode not in PERT_MODES:
            raise ValueError("pert_mode: expected one of %s, got %r" % (", ".join(PERT_MODES), self.pert_mode))
        if self.handler_type not in ("check", "fix"):
            raise ValueError("handler_type: expected check or fix, got %r" % (self.handler_type,))
        if self.fuzz_stage not in ("forward", "backward"):
            raise ValueError("fuzz_stage: expected forward or backward, got %r" % (self.fuzz_stage,))
        self.scope = tuple(self.scope)
        self.list_patterns = tuple(self.list_patterns)
        self._scope_set = frozenset(self.scope)

    @property
    def fix(self) -> bool:
        return self.handler_type == "fix"

    @property
    def backward(self) -> bool:
        return self.fuzz_stage == "backward"

    @property
    def preheat(self) -> bool:
        return self.if_preheat and not self.fix

    def selected(self, name: str) -> bool:
        """scope: exact call names; list: substrings of the name (msprobe's rule); neither: every call."""
        if self._scope_set:
            return name in self._scope_set
        if self.list_patterns:
            return matches_any(name, self.list_patterns)
        return True

    @classmethod
    def from_job(cls, job: Any) -> "FreeBenchmarkOptions":
        section = _get(job, "free_benchmark", None)
        return cls(
            pert_mode=_get(section, "pert_mode", "improve_precision"),
            handler_type=_get(section, "handler_type", "check"),
            fuzz_stage=_get(section, "fuzz_stage", "forward"),
            fuzz_device=_get(section, "fuzz_device", "npu"),
            scope=tuple(_get(section, "scope", ()) or ()),
            list_patterns=tuple(_get(section, "list", ()) or ()),
            if_preheat=bool(_get(section, "if_preheat", False)),
            preheat_step=int(_get(section, "preheat_step", 15)),
            max_sample=int(_get(section, "max_sample", 20)),
        )
