"""The metrics store (kind ``metrics``) on the generic table layer (docs/FORMAT.md, "monitor tables").

Long format, so that new series can appear at any step without changing a schema fixed before SWMR starts:

- ``series``: one row per series when it first appears: ``id`` (0, 1, ...), ``tag``, ``name``, ``metric``,
  ``module``, ``shape`` and ``dtype`` of the tensor when first seen.
- ``values``: one row per series per collected step: ``step``, ``series`` (the id), ``value`` (float64).
  A step's rows are contiguous (one commit), so a step window is one contiguous row range.
- ``alerts``: one row per alert: ``step``, ``series``, ``tag``, ``name``, ``module``, ``metric``, ``value``,
  ``baseline`` (the history mean it was compared with), ``rule``, ``kind`` (up/down/nan/inf/count/threshold),
  ``message``.
"""

from typing import List

KIND = "metrics"
SCHEMA_VERSION = 1
SERIES, VALUES, ALERTS = "series", "values", "alerts"


def table_specs() -> List:
    from engines.store import Column, TableSpec

    return [
        TableSpec(SERIES, (
            Column("id", "int64"),
            Column("tag", "str"),
            Column("name", "str"),
            Column("metric", "str"),
            Column("module", "str"),
            Column("shape", "str", default=""),
            Column("dtype", "str", default=""),
        )),
        TableSpec(VALUES, (
            Column("step", "int64"),
            Column("series", "int64"),
            Column("value", "float64"),
        )),
        TableSpec(ALERTS, (
            Column("step", "int64"),
            Column("series", "int64"),
            Column("tag", "str"),
            Column("name", "str"),
            Column("module", "str"),
            Column("metric", "str"),
            Column("value", "float64"),
            Column("baseline", "float64"),
            Column("rule", "str"),
            Column("kind", "str"),
            Column("message", "json"),
        )),
    ]
