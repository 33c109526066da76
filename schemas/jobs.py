"""The job union: one model per task, joined on `task`."""

from typing import Annotated, Any, Dict, Tuple, Type, Union

from pydantic import Field, TypeAdapter

from .acc_check import AccCheckJob
from .analysis import AnalyzeOverflowJob, CompareJob, GradCompareJob
from .common import JobBase
from .config_check import ConfigCheckJob
from .diagnose import DiagnoseJob
from .dump_jobs import OverflowCheckJob, StatisticsJob, TensorJob
from .free_benchmark import FreeBenchmarkJob
from .grad_probe import GradProbeJob
from .monitor import MonitorJob

__all__ = ["JobConfig", "job_adapter", "TASKS", "COLLECTION_TASKS", "ANALYSIS_TASKS"]

JobConfig = Annotated[
    Union[StatisticsJob, TensorJob, OverflowCheckJob, FreeBenchmarkJob, GradProbeJob, MonitorJob, CompareJob,
          GradCompareJob, AnalyzeOverflowJob, DiagnoseJob, ConfigCheckJob, AccCheckJob],
    Field(discriminator="task"),
]

_MODELS = (StatisticsJob, TensorJob, OverflowCheckJob, FreeBenchmarkJob, GradProbeJob, MonitorJob, CompareJob,
           GradCompareJob, AnalyzeOverflowJob, DiagnoseJob, ConfigCheckJob, AccCheckJob)
TASKS: Dict[str, Type[JobBase]] = {model.task_name(): model for model in _MODELS}
COLLECTION_TASKS: Tuple[str, ...] = ("statistics", "tensor", "overflow_check", "free_benchmark", "grad_probe",
                                     "monitor", "config_check")
ANALYSIS_TASKS: Tuple[str, ...] = ("compare", "grad_compare", "analyze_overflow", "diagnose", "acc_check")

_ADAPTER: Dict[str, "TypeAdapter[JobBase]"] = {}


def job_adapter() -> "TypeAdapter[JobBase]":
    """The union's ``TypeAdapter``, built at first use (the JSON Schema export): building it builds every job
    model, which ``load_config`` (one model per task) never needs."""
    adapter = _ADAPTER.get("job")
    if adapter is None:
        adapter = _ADAPTER["job"] = TypeAdapter(JobConfig)
    return adapter


def __getattr__(name: str) -> Any:
    """``JOB_ADAPTER``: ``job_adapter()`` under its former module-level name."""
    if name == "JOB_ADAPTER":
        return job_adapter()
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
