"""Reading dumps, ours and msprobe's, as row tables: the rows (``rows``), record names (``names``), scalar
fields (``scalars``), the :class:`~engines.dumps.source.DumpSource` interface (``source``), our HDF5 dumps
(``probe_source``), msprobe's dump.json trees (``msprobe``) and ``opener.open_dump(path)``, the one entry that
picks the reader for a path.

Analyses (parse, compare, the app's dump browser) import this package; it imports none of them. Full tensors of a
PyTorch ``.pt`` file load through the torch adapter, by name (``engines.frameworks``).
"""
