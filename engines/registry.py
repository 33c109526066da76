"""Which code runs which task.

Collection tasks map to their task class (``engines/<task>/task.py``, the object both ``--run`` and the in-script
``PrecisionDebugger`` drive: ``engines.task``); analysis tasks to their engine function. Both are named by import
strings, so that looking one up imports nothing else: a job imports only its own task's modules, and those import
their framework adapter lazily. Every task ``schemas.TASKS`` validates has an entry (``tests/test_task_assembly.py``).
"""

import importlib
from typing import Any, Callable, Optional

TASK_CLASSES = {
    "statistics": "engines.acc_check.online_task:CheckedCaptureTask",
    "tensor": "engines.acc_check.online_task:CheckedCaptureTask",
    "overflow_check": "engines.overflow.task:OverflowTask",
    "free_benchmark": "engines.free_benchmark.task:FreeBenchmarkTask",
    "grad_probe": "engines.grad_probe.task:GradProbeTask",
    "monitor": "engines.monitor.task:MonitorTask",
    "config_check": "engines.config_check.task:ConfigCheckTask",
}

# Level L2 (MindSpore graph-mode kernels, under --run: engines.task.check_level says where it runs)
L2_TASK_CLASSES = {
    "statistics": "engines.capture.graph_task:GraphCaptureTask",
    "tensor": "engines.capture.graph_task:GraphCaptureTask",
    "overflow_check": "engines.overflow.graph_task:GraphOverflowTask",
}

ANALYSIS_ENGINES = {
    "compare": "engines.compare.engine:run_compare",
    "grad_compare": "engines.grad_compare.engine:run_grad_compare",
    "analyze_overflow": "engines.overflow.analyze:run_analyze_overflow",
    "diagnose": "engines.diagnose.engine:run_diagnose",
    "acc_check": "engines.acc_check.engine:run_acc_check",
}

ESTIMATORS = {
    "statistics": "engines.capture.engine:estimate_step_bytes",
    "tensor": "engines.capture.engine:estimate_step_bytes",
}


def _load(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def task_class(task: str, level: Optional[str] = None) -> Any:
    """The task object's class of a collection task (at ``level``: L2 has its own)."""
    if level == "L2" and task in L2_TASK_CLASSES:
        return _load(L2_TASK_CLASSES[task])
    return _load(TASK_CLASSES[task])


def collection_engine(task: str) -> Callable:
    """The ``--run`` driver of a collection task, ``(context, run, events) -> CollectionResult``: the same for
    every task (``engines.collection.run_collection``), which builds the task's object."""
    TASK_CLASSES[task]  # a KeyError for a task that is not a collection task
    return _load("engines.collection:run_collection")


def analysis_engine(task: str) -> Callable:
    return _load(ANALYSIS_ENGINES[task])


def estimator(task: str) -> Optional[Callable]:
    spec = ESTIMATORS.get(task)
    return _load(spec) if spec else None
