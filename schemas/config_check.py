"""config_check: a training setup's fingerprint (a *pack*) and the job that captures one (docs/CONFIG_CHECK.md).

Two models: ``ConfigCheckJob``, the config of the ``config_check`` task (zero-code: run the target and pack what it
did), and ``ConfigCheckPack``, the pack file itself (``config_check.json``), which ``probe-tui config-check
compare`` reads back and validates.
"""

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .base import ConfigModel
from .common import CollectionJob, section_field
from .schema_rules import NON_BLANK, items_pattern
from .types import field

__all__ = ["ConfigCheckSection", "ConfigCheckJob", "ConfigCheckPack", "FileFingerprint", "PACK_FORMAT"]

PACK_FORMAT = "probe-tui config_check"


class ConfigCheckSection(ConfigModel):
    files: List[str] = field(
        default_factory=list,
        description="Config files of the training to fingerprint besides the script itself (YAML, JSON, shell, "
                    "any text): each file's SHA-256, and for JSON and YAML files of at most 1 MiB each value by "
                    "its dotted key, so a changed hyperparameter is named.",
        json_schema_extra=items_pattern(NON_BLANK))
    weight_steps: List[int] = field(
        default_factory=list,
        description="Steps (0-based optimizer steps) after whose update the weights' checksums are taken too. "
                    "The weights at init (before the first forward) are always taken.")
    data_batches: int = field(
        2, "How many of the first batches to fingerprint: the checksum of every sample (first dimension) of "
           "the tensors the model's first forward of each step receives.", ge=0, le=1000)


class ConfigCheckJob(CollectionJob):
    """Capture the fingerprint of a training setup: environment, packages, framework and device, the script's
    arguments and config files, seeds and deterministic flags, weight checksums, the first batches' checksums."""

    task: Literal["config_check"] = field("config_check", "Fingerprint a training setup (config_check).")
    config_check: ConfigCheckSection = section_field(ConfigCheckSection, "Options of config_check.")


class FileFingerprint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(description="SHA-256 of the file's bytes (\"\" when it could not be read).")
    size: int = Field(-1, description="Bytes (-1 when it could not be read).")
    values: Dict[str, str] = Field(default_factory=dict,
                                   description="JSON/YAML files: each scalar value by its dotted key, as text.")
    error: str = Field("", description="Why the file could not be read.")


class ConfigCheckPack(BaseModel):
    """One rank's fingerprint (``config_check.json``). Every section maps a key to text (or, for weights and data,
    to checksum text), so two packs compare key by key."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["probe-tui config_check"] = Field("probe-tui config_check", description="What this file is.")
    version: Literal[1] = Field(1, description="Pack format version.")
    created: str = Field("", description="When the pack was written (ISO 8601, UTC); not compared.")
    host: str = Field("", description="The host that wrote it; not compared.")
    rank: int = Field(0, description="The rank (process) the pack describes.")
    world_size: int = Field(1, description="Processes of the launch.")
    environment: Dict[str, str] = Field(default_factory=dict, description="Environment variables.")
    packages: Dict[str, str] = Field(default_factory=dict, description="Installed distributions: name -> version.")
    framework: Dict[str, str] = Field(default_factory=dict,
                                      description="Python, framework and device facts (versions, device name).")
    command: Dict[str, str] = Field(
        default_factory=dict,
        description="The script and its arguments: argv.<i> each word, args.<name> each --name value, script.sha256.")
    files: Dict[str, FileFingerprint] = Field(default_factory=dict, description="Config files, by path.")
    seeds: Dict[str, str] = Field(default_factory=dict,
                                  description="Random state: seeds set, generator state checksums at the start.")
    deterministic: Dict[str, str] = Field(default_factory=dict, description="Deterministic flags and settings.")
    hyperparameters: Dict[str, str] = Field(
        default_factory=dict, description="The optimizer's settings as the run used them (param_groups.<i>.lr...).")
    weights: Dict[str, Dict[str, str]] = Field(
        default_factory=dict, description="init / step<N> -> parameter name -> checksum (dtype, shape, CRC-32).")
    data: Dict[str, List[str]] = Field(
        default_factory=dict, description="batch<N> -> one checksum per sample of the model's inputs.")
    notes: List[str] = Field(default_factory=list, description="What could not be captured, and why.")
    extra: Optional[Dict[str, Any]] = Field(None, description="Anything a later version adds; not compared.")
