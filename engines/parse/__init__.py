"""Open any dump (ours or msprobe's) as row tables; list, filter and inspect its records.

``engines.parse.sources.open_dump(path)`` is the entry every analysis uses; ``engines.parse.inspect`` holds the
functions behind ``probe-tui parse``.
"""
