"""List, filter and inspect the records of any dump: the functions behind ``probe-tui parse``
(``engines.parse.inspect``). Dumps are read through ``engines.dumps.opener.open_dump``.
"""
