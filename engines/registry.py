"""Which engine runs which task.

Engines are named by import strings so that looking one up imports nothing else: a job imports only its own
engine, and that engine imports its framework adapter lazily.
"""

import importlib
from typing import Callable, Optional

COLLECTION_ENGINES = {
    "statistics": "engines.capture.engine:run_collection",
    "tensor": "engines.capture.engine:run_collection",
    "overflow_check": "engines.overflow.engine:run_collection",
    "free_benchmark": "engines.free_benchmark.engine:run_collection",
    "grad_probe": "engines.grad_probe.engine:run_collection",
    "monitor": "engines.monitor.engine:run_collection",
}

ANALYSIS_ENGINES = {
    "compare": "engines.compare.engine:run_compare",
    "grad_compare": "engines.grad_compare.engine:run_grad_compare",
    "analyze_overflow": "engines.overflow.analyze:run_analyze_overflow",
}


def _load(spec: str) -> Optional[Callable]:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only "this engine does not exist (yet)" is soft; a missing dependency inside it is a real error.
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            return None
        raise
    return getattr(module, attr, None)


def collection_engine(task: str) -> Optional[Callable]:
    spec = COLLECTION_ENGINES.get(task)
    return _load(spec) if spec else None


def analysis_engine(task: str) -> Optional[Callable]:
    spec = ANALYSIS_ENGINES.get(task)
    return _load(spec) if spec else None


ESTIMATORS = {
    "statistics": "engines.capture.engine:estimate_step_bytes",
    "tensor": "engines.capture.engine:estimate_step_bytes",
}


def estimator(task: str) -> Optional[Callable]:
    spec = ESTIMATORS.get(task)
    return _load(spec) if spec else None
