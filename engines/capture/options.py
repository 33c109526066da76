"""What a capture session needs from a job config, in one framework-neutral object.

The pydantic job models (``schemas``) are read once here; the adapters never look at the config shape.
"""

import dataclasses
from typing import Any, List, Optional, Tuple

TASKS = ("statistics", "tensor")
LEVELS = ("L0", "L1", "mix", "debug")
SUMMARY_MODES = ("statistics", "md5", "xor", "hash")
DATA_MODES = ("all", "forward", "backward", "input", "output")
#: Bytes of full-tensor host copies a step holds before they are written into the store (``output.memory_budget``).
DEFAULT_MEMORY_BUDGET = 16 << 20


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
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    store_mode: str = "auto"
    dump_path: str = "./probe_dump"
    stack_depth: int = 48

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError("task: capture handles %s, not %r" % ("/".join(TASKS), self.task))
        if self.level == "L2":  # msprobe configs load with L2; the in-script API says the same as a run
            from schemas.common import l2_message

            raise ValueError("level: " + l2_message())
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
        task = field_of(job, "task", "statistics")
        section = field_of(job, task, None)
        output = field_of(job, "output", None)
        apis = field_of(section, "apis", None)
        return cls(
            task=task,
            level=field_of(job, "level", "L1"),
            ranks=tuple(field_of(job, "rank", ()) or ()),
            steps=tuple(field_of(job, "step", ()) or ()),
            async_dump=bool(field_of(job, "async_dump", False)),
            precision=field_of(job, "precision", "low") or "low",
            seed=field_of(job, "seed", None),
            scope=tuple(field_of(section, "scope", ()) or ()),
            list_patterns=tuple(field_of(section, "list", ()) or ()),
            data_mode=tuple(field_of(section, "data_mode", ("all",)) or ("all",)),
            summary_mode=field_of(section, "summary_mode", "statistics") or "statistics",
            tensor_list=tuple(field_of(section, "tensor_list", ()) or ()),
            api_allow=tuple(field_of(apis, "allow", ()) or ()),
            api_deny=tuple(field_of(apis, "deny", ()) or ()),
            compression=field_of(output, "compression", "none") or "none",
            compression_level=field_of(output, "compression_level", None),
            disk_budget=field_of(output, "disk_budget", None),
            memory_budget=int(field_of(output, "memory_budget", None) or DEFAULT_MEMORY_BUDGET),
            store_mode=field_of(output, "store_mode", "auto") or "auto",
            dump_path=str(field_of(job, "dump_path", "./probe_dump") or "./probe_dump"),
        )

    def replace(self, **changes: Any) -> "CaptureOptions":
        return dataclasses.replace(self, **changes)


def field_of(obj: Any, name: str, default: Any) -> Any:
    """``obj.name`` of a config model, or ``obj[name]`` of a dict; ``default`` when missing or ``obj`` is None."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def as_list(value: Any) -> List[Any]:
    return list(value) if value else []
