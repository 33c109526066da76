"""What a capture session needs from a job config, in one framework-neutral object.

The pydantic job models (``schemas``) are read once here; the adapters never look at the config shape.
"""

import dataclasses
from typing import Any, List, Optional, Tuple

TASKS = ("statistics", "tensor")
LEVELS = ("L0", "L1", "mix", "debug")
SUMMARY_MODES = ("statistics", "md5", "xor", "hash")
DATA_MODES = ("all", "forward", "backward", "input", "output")


@dataclasses.dataclass
class CaptureOptions:
    task: str = "statistics"
    level: str = "L1"
    ranks: Tuple[int, ...] = ()
    steps: Tuple[int, ...] = ()
    async_dump: bool = False
    precision: str = "low"
    seed: Optional[int] = None
    scope: Tuple[str, ...] = ()
    list_patterns: Tuple[str, ...] = ()
    data_mode: Tuple[str, ...] = ("all",)
    summary_mode: str = "statistics"
    tensor_list: Tuple[str, ...] = ()
    api_allow: Tuple[str, ...] = ()
    api_deny: Tuple[str, ...] = ()
    compression: str = "none"
    compression_level: Optional[int] = None
    disk_budget: Optional[int] = None
    store_mode: str = "auto"
    dump_path: str = "./probe_dump"
    stack_depth: int = 48

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError("task: capture handles %s, not %r" % ("/".join(TASKS), self.task))
        if self.level not in LEVELS:
            raise ValueError("level: capture handles %s, not %r" % ("/".join(LEVELS), self.level))
        if self.summary_mode not in SUMMARY_MODES:
            raise ValueError("summary_mode: expected one of %s, got %r" % ("/".join(SUMMARY_MODES), self.summary_mode))
        if self.precision not in ("low", "high"):
            raise ValueError("precision: expected low or high, got %r" % (self.precision,))
        if self.scope and len(self.scope) != 2:
            raise ValueError("scope: give exactly two names [start, end], got %d" % len(self.scope))
        for m in self.data_mode:
            if m not in DATA_MODES:
                raise ValueError("data_mode: %r is not one of %s" % (m, "/".join(DATA_MODES)))
        self.ranks = tuple(sorted(set(int(r) for r in self.ranks)))
        self.steps = tuple(sorted(set(int(s) for s in self.steps)))

    # -- derived switches -------------------------------------------------------------------------------------
    @property
    def api_level(self) -> bool:
        return self.level in ("L1", "mix")

    @property
    def module_level(self) -> bool:
        return self.level in ("L0", "mix")

    @property
    def wants_crc32(self) -> bool:
        return self.summary_mode in ("md5", "hash")

    @property
    def wants_xhash(self) -> bool:
        return self.summary_mode in ("xor", "hash")

    @property
    def saves_tensors(self) -> bool:
        return self.task == "tensor"

    # -- construction from a validated job --------------------------------------------------------------------
    @classmethod
    def from_job(cls, job: Any) -> "CaptureOptions":
        """Build from a ``schemas`` job model (or any object with the same attributes)."""
        task = _get(job, "task", "statistics")
        section = _get(job, task, None)
        output = _get(job, "output", None)
        apis = _get(section, "apis", None)
        return cls(
            task=task,
            level=_get(job, "level", "L1"),
            ranks=tuple(_get(job, "rank", ()) or ()),
            steps=tuple(_get(job, "step", ()) or ()),
            async_dump=bool(_get(job, "async_dump", False)),
            precision=_get(job, "precision", "low") or "low",
            seed=_get(job, "seed", None),
            scope=tuple(_get(section, "scope", ()) or ()),
            list_patterns=tuple(_get(section, "list", ()) or ()),
            data_mode=tuple(_get(section, "data_mode", ("all",)) or ("all",)),
            summary_mode=_get(section, "summary_mode", "statistics") or "statistics",
            tensor_list=tuple(_get(section, "tensor_list", ()) or ()),
            api_allow=tuple(_get(apis, "allow", ()) or ()),
            api_deny=tuple(_get(apis, "deny", ()) or ()),
            compression=_get(output, "compression", "none") or "none",
            compression_level=_get(output, "compression_level", None),
            disk_budget=_get(output, "disk_budget", None),
            store_mode=_get(output, "store_mode", "auto") or "auto",
            dump_path=str(_get(job, "dump_path", "./probe_dump") or "./probe_dump"),
        )

    def replace(self, **changes: Any) -> "CaptureOptions":
        return dataclasses.replace(self, **changes)


def _get(obj: Any, name: str, default: Any) -> Any:
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def as_list(value: Any) -> List[Any]:
    return list(value) if value else []
