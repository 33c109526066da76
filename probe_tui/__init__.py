"""probe-tui: a numerical-accuracy debugger for deep-learning training.

``import probe_tui`` is cheap: it imports neither Textual nor a framework.
"""

__version__ = "0.1.0"
