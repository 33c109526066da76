"""Pydantic models for every probe-tui job. No framework, no engine, no UI imports here.

Public API (others code against these names):
    load_config(source, *, on_warning=None) -> JobConfig      path, JSON string or dict; raises ConfigError
    dump_config(job) -> dict                                  normalised, JSON-ready; load_config(dump) == job
    starter_config(task) -> dict                              minimal valid config for `probe-tui init`
    json_schema(task) -> dict, export_json_schemas(dir)       the committed JSON Schemas (schemas/json/)
    ConfigError(.errors: list[ConfigIssue]), ConfigIssue(path, message, hint), ConfigWarning
    JobConfig (discriminated union on `task`), TASKS, COLLECTION_TASKS, ANALYSIS_TASKS
"""

from .acc_check import AccCheckJob, AccCheckSection
from .analysis import (
    AnalyzeOverflowJob,
    AnalyzeOverflowSection,
    CompareJob,
    CompareSection,
    CompareThresholds,
    GradCompareJob,
    GradCompareSection,
    MetricLimits,
)
from .common import ALL_LEVELS, LEVEL_NOTES, CollectionJob, DumpJob, JobBase, RunJob
from .diagnose import DiagnoseJob, DiagnoseSection, DiagnoseSide
from .dump_jobs import OverflowCheckJob, OverflowCheckSection, StatisticsJob, TensorJob
from .dump_sections import ApiFilter, StatisticsSection, TensorSection
from .errors import ConfigError, ConfigIssue, ConfigWarning
from .foreign import FOREIGN_KEYS, FOREIGN_SECTIONS, FOREIGN_TASKS
from .free_benchmark import FreeBenchmarkJob, FreeBenchmarkSection
from .grad_probe import GradProbeJob, GradProbeSection
from .jobs import ANALYSIS_TASKS, COLLECTION_TASKS, TASKS, JobConfig
from .json_schemas import export_json_schemas, json_schema
from .loader import config_source, dump_config, load_config, starter_config
from .monitor import AlertArgs, AlertConfig, AlertRule, MonitorJob, MonitorSection, MonitorTarget
from .output import OutputSpec
from .target import DEMO_PRESETS, DemoFaults, DemoKnobs, TargetSpec
from .types import compact_ranks, parse_rank_item, parse_size

__all__ = [
    "load_config", "dump_config", "starter_config", "config_source", "json_schema", "export_json_schemas",
    "ConfigError", "ConfigIssue", "ConfigWarning",
    "JobConfig", "TASKS", "COLLECTION_TASKS", "ANALYSIS_TASKS",
    "JobBase", "RunJob", "CollectionJob", "DumpJob", "ALL_LEVELS", "LEVEL_NOTES",
    "StatisticsJob", "TensorJob", "OverflowCheckJob", "FreeBenchmarkJob", "GradProbeJob", "MonitorJob",
    "AccCheckJob", "AccCheckSection", "CompareJob", "GradCompareJob", "AnalyzeOverflowJob", "AnalyzeOverflowSection",
    "DiagnoseJob", "DiagnoseSection", "DiagnoseSide",
    "StatisticsSection", "TensorSection", "ApiFilter", "OverflowCheckSection", "FreeBenchmarkSection",
    "GradProbeSection", "MonitorSection", "MonitorTarget", "AlertConfig", "AlertRule", "AlertArgs",
    "CompareSection", "CompareThresholds", "MetricLimits", "GradCompareSection",
    "TargetSpec", "DemoKnobs", "DemoFaults", "DEMO_PRESETS", "OutputSpec",
    "FOREIGN_KEYS", "FOREIGN_SECTIONS", "FOREIGN_TASKS",
    "parse_rank_item", "parse_size", "compact_ranks",
]
