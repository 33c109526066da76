"""How a run writes its HDF5 store: compression, a disk budget, a memory budget for full tensors, and the store
mode (docs/FORMAT.md)."""

from typing import Any, Dict, Literal, Optional

from pydantic import model_validator

from .base import ConfigModel
from .errors import RuleCollector
from .schema_rules import add_rules, given, inside, note, when
from .types import SizeBytes, field

__all__ = ["OutputSpec"]


class OutputSpec(ConfigModel):
    compression: Literal["none", "lzf", "gzip"] = field(
        "none", "Compression of tensor data in the HDF5 store: none (fastest), lzf (fast, ~1.5-2x smaller), "
                "gzip (slower, smallest; level in compression_level).")
    compression_level: Optional[int] = field(
        None, "gzip level 1-9 (default 4). Only with compression gzip.", ge=1, le=9, advanced=True)
    disk_budget: SizeBytes = field(
        None, 'The most bytes each rank\'s store files may take on disk: a number, or a string such as "20GB" '
              '(powers of 1000) or "512MiB" (powers of 1024). Checked before each step is written: a step whose '
              'tensors would pass it keeps its statistics and drops its tensors (the run says so); when even '
              'statistics no longer fit, the dump stops and training goes on. Unset: unlimited.')
    memory_budget: SizeBytes = field(
        None, 'The most bytes of full-tensor host copies (the tensor task, tensor_list) a rank holds before they '
              'are written: a step whose copies pass it writes them into the store as it goes (visible at the '
              'step\'s end, as always), so peak extra memory stays near this budget. A number or a string such '
              'as "64MiB". Unset: 16 MiB.', advanced=True)
    store_mode: Literal["auto", "swmr", "per_step"] = field(
        "auto", "How the store is written while the run goes on: swmr (one file, readable live), per_step (one "
                "file a step, closed then announced; for NFS/Lustre where HDF5 locking fails), auto (swmr, or "
                "per_step on a shared file system).", advanced=True)

    @classmethod
    def json_schema_rules(cls, schema: Dict[str, Any]) -> None:
        add_rules(schema, when(given("compression_level"),
                               {"required": ["compression"], **inside(["compression"], {"const": "gzip"})}))
        note(schema, 'a disk_budget string must come to at least one byte ("0.1B" does not).')

    @model_validator(mode="after")
    def _level_needs_gzip(self) -> "OutputSpec":
        rules = RuleCollector()
        if self.compression_level is not None and self.compression != "gzip":
            rules.add("compression_level", f"only applies to gzip compression (compression is {self.compression!r})",
                      'set "compression": "gzip" or remove compression_level')
        rules.raise_if_any()
        return self
