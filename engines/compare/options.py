"""Compare options read from a job: the ``compare`` section of a CompareJob (pydantic) or a plain dict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Union

from engines.compare.mapping import KeyOptions, MappingError, load_mapping_file, parse_api_mapping, string_map
from engines.compare.verdicts import Thresholds
from engines.errors import JobError
from schemas.layout import ParallelLayout, layout_from_text

FORMATS = ("hdf5", "csv", "xlsx")
DEFAULT_SMALL_VALUE = 0.0


class CompareError(JobError):
    """Bad compare input (a path, a mapping file, an option). One line naming what is wrong; exit code 2."""


@dataclass
class CompareOptions:
    target_path: Path
    golden_path: Path
    mode: str = "auto"
    fuzzy_match: bool = False
    data_mapping: Optional[str] = None
    api_mapping: Union[str, bool, None] = None
    cell_mapping: Union[str, bool, None] = None
    layer_mapping: Optional[str] = None
    rank: List[int] = field(default_factory=list)
    step: List[int] = field(default_factory=list)
    rel_eps: Optional[float] = None
    small_value: float = DEFAULT_SMALL_VALUE
    thresholds: Thresholds = field(default_factory=Thresholds.default)
    highlight: str = "none"
    first_divergence: bool = True
    formats: List[str] = field(default_factory=lambda: ["hdf5", "csv"])
    output_path: Optional[Path] = None  # results go here; unset: a new run folder under dump_path
    dump_path: Path = Path("./probe_dump")
    workers: Optional[int] = None
    top: int = 10
    target_layout: Optional[ParallelLayout] = None  # how the target's ranks map to shards and stages
    golden_layout: Optional[ParallelLayout] = None
    merge_ranks: str = "auto"  # merge the ranks of a side whose parallel layout differs (docs/COMPARE.md)

    @classmethod
    def from_job(cls, job: Any) -> "CompareOptions":
        section = _get(job, "compare", None)
        if section is None:
            section = job
        data = section.model_dump() if hasattr(section, "model_dump") else dict(section)
        for key in ("target_path", "golden_path"):
            if not data.get(key):
                raise CompareError("compare.{}: missing".format(key))
        out_path = data.get("output_path")
        opts = cls(
            target_path=Path(str(data["target_path"])).expanduser(),
            golden_path=Path(str(data["golden_path"])).expanduser(),
            mode=str(data.get("mode") or "auto"),
            fuzzy_match=bool(data.get("fuzzy_match", False)),
            data_mapping=_path_or_none(data.get("data_mapping")),
            api_mapping=_flag_or_path(data.get("api_mapping")),
            cell_mapping=_flag_or_path(data.get("cell_mapping")),
            layer_mapping=_path_or_none(data.get("layer_mapping")),
            rank=_int_list(data.get("rank")),
            step=_int_list(data.get("step")),
            rel_eps=data.get("rel_eps"),
            small_value=float(data["small_value"]) if data.get("small_value") is not None else DEFAULT_SMALL_VALUE,
            thresholds=Thresholds.from_config(data.get("thresholds")),
            highlight=str(data.get("highlight") or "none"),
            first_divergence=bool(data.get("first_divergence", True)),
            formats=list(data.get("formats") or ["hdf5", "csv"]),
            output_path=Path(str(out_path)).expanduser() if out_path else None,
            dump_path=Path(str(_get(job, "dump_path", None) or "./probe_dump")).expanduser(),
            workers=data.get("workers"),
            top=int(data.get("top") or 10),
            target_layout=_layout(data.get("target_layout"), "compare.target_layout"),
            golden_layout=_layout(data.get("golden_layout"), "compare.golden_layout"),
            merge_ranks=str(data.get("merge_ranks") or "auto"),
        )
        opts.validate()
        return opts

    def validate(self) -> None:
        if self.mode not in ("auto", "tensor", "statistics", "md5"):
            raise CompareError("compare.mode: {!r} is not one of auto, tensor, statistics, md5".format(self.mode))
        if self.merge_ranks not in ("auto", "on", "off"):
            raise CompareError("compare.merge_ranks: {!r} is not one of auto, on, off".format(self.merge_ranks))
        if self.highlight not in ("none", "classic"):
            raise CompareError("compare.highlight: {!r} is not one of none, classic".format(self.highlight))
        for fmt in self.formats:
            if fmt not in FORMATS:
                raise CompareError("compare.formats: {!r} is not one of {}".format(fmt, ", ".join(FORMATS)))
        if self.data_mapping and self.fuzzy_match:
            raise CompareError("compare.data_mapping: cannot be combined with fuzzy_match (the mapping names "
                               "every pair already)")

    def key_options(self, *, map_mindspore: bool, renumber_backward: bool) -> KeyOptions:
        try:
            dm = None
            if self.data_mapping:
                raw = load_mapping_file(self.data_mapping, "compare.data_mapping")
                dm = string_map(raw, "compare.data_mapping", self.data_mapping, "{target_row: golden_row}")
            api = None
            if isinstance(self.api_mapping, str):
                api = parse_api_mapping(load_mapping_file(self.api_mapping, "compare.api_mapping"),
                                        self.api_mapping, "compare.api_mapping")
            cell = None
            if isinstance(self.cell_mapping, str):
                raw = load_mapping_file(self.cell_mapping, "compare.cell_mapping")
                cell = string_map(raw, "compare.cell_mapping", self.cell_mapping, "{ms_cell: pt_module}")
            layer = None
            if self.layer_mapping:
                raw = load_mapping_file(self.layer_mapping, "compare.layer_mapping")
                if not isinstance(raw, dict) or not all(isinstance(v, dict) and all(
                        isinstance(x, (str, int, float)) for x in v.values()) for v in raw.values()):
                    raise MappingError("compare.layer_mapping {}: expected {{ParentClass: {{child: target}}}}"
                                       .format(self.layer_mapping))
                layer = {("TopLayer" if k == "Cell" else str(k)): {str(a): str(b) for a, b in v.items()}
                         for k, v in raw.items()}
        except MappingError as exc:
            raise CompareError(str(exc)) from None
        wants_ms = map_mindspore or bool(self.api_mapping) or bool(self.cell_mapping)
        return KeyOptions(data_mapping=dm, api_mapping=api, map_mindspore=wants_ms, cell_mapping=cell,
                          layer_mapping=layer, renumber_backward=renumber_backward and not self.fuzzy_match
                          and dm is None)


def _get(obj: Any, key: str, default: Any) -> Any:
    if isinstance(obj, dict):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _layout(value: Any, field_name: str) -> Optional[ParallelLayout]:
    if value is None or isinstance(value, ParallelLayout):
        return value
    try:
        if isinstance(value, str):
            value = layout_from_text(value)
        return ParallelLayout.model_validate(value)
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        lines = str(exc).splitlines()
        text = "; ".join(ln.strip() for ln in lines[1:3]) if "validation error" in str(exc) else lines[0]
        raise CompareError("{}: {}".format(field_name, text.split(" [type=")[0])) from None


def _path_or_none(value: object) -> Optional[str]:
    if value in (None, "", False):
        return None
    return str(value)


def _flag_or_path(value: object) -> Union[str, bool, None]:
    if value in (None, "", False):
        return None
    if value is True:
        return True
    return str(value)


def _int_list(value: Union[None, int, str, Iterable[Union[int, str]]]) -> List[int]:
    if value is None or value == "":
        return []
    if isinstance(value, int):
        return [value]
    return sorted({int(v) for v in value})


def summary_options(opts: CompareOptions) -> Dict[str, Any]:
    return {"mode": opts.mode, "fuzzy_match": opts.fuzzy_match, "highlight": opts.highlight,
            "rel_eps": opts.rel_eps, "small_value": opts.small_value, "thresholds": opts.thresholds.as_dict(),
            "formats": list(opts.formats), "merge_ranks": opts.merge_ranks,
            "target_layout": opts.target_layout.model_dump() if opts.target_layout else None,
            "golden_layout": opts.golden_layout.model_dump() if opts.golden_layout else None}
