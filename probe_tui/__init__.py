"""probe-tui: a numerical-accuracy debugger for deep-learning training.

``import probe_tui`` is cheap: it imports neither Textual nor a framework.
"""

__version__ = "0.1.0"


def __getattr__(name):
    # Lazy exports: importing probe_tui stays cheap (no torch, no Textual).
    if name in ("start_monitor", "TrainingMonitor"):
        from probe_tui import monitor as _monitor

        return getattr(_monitor, name)
    raise AttributeError(f"module 'probe_tui' has no attribute {name!r}")
