"""Compare two runs (ours or msprobe's), row by row: match, measure, judge, rank the first divergence.

Entry point: ``engines.compare.engine.run_compare(job, events) -> CompareOutcome``. Rules: docs/COMPARE.md;
result tables: docs/FORMAT.md ("Compare results"). Framework-free: dumps are read through engines.dumps.
"""
