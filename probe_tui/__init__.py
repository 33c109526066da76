"""probe-tui: a numerical-accuracy debugger for deep-learning training.

``import probe_tui`` is cheap: it imports neither Textual nor a framework. ``PrecisionDebugger`` and
``seed_all`` (the in-script API) load on first use, and import torch only when called.
"""

__version__ = "0.1.0"

__all__ = ["PrecisionDebugger", "seed_all", "start_monitor", "TrainingMonitor", "__version__"]


def __getattr__(name):
    # Lazy exports: importing probe_tui stays cheap (no torch, no Textual).
    if name in ("PrecisionDebugger", "seed_all"):
        from probe_tui import debugger

        return getattr(debugger, name)
    if name in ("start_monitor", "TrainingMonitor"):
        from probe_tui import monitor as _monitor

        return getattr(_monitor, name)
    raise AttributeError(f"module 'probe_tui' has no attribute {name!r}")
