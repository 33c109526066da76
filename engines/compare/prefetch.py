"""Reading both sides at once when both are msprobe dumps.

A msprobe dump.json is parsed and flattened in Python, which is the slow part of comparing two of them (~15 us a
row). With two cores, one helper process reads the target's pieces while this process reads the golden's; small
dumps are read here (starting the helper costs more than it saves).
"""

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Optional

from engines.dumps.msprobe.source import MsprobeSource
from engines.dumps.source import DumpSource

#: The target's dump.json bytes from which a helper process pays off.
PREFETCH_MIN_BYTES = 32 << 20


def start_prefetch(target: DumpSource, golden: DumpSource) -> Optional[ProcessPoolExecutor]:
    """Start reading the target's pieces in a helper process when both sides are large msprobe dumps; the caller
    shuts the pool down (``shutdown(wait=False, cancel_futures=True)``) once the pieces are read."""
    if (os.cpu_count() or 1) < 2:
        return None
    if not (isinstance(target, MsprobeSource) and isinstance(golden, MsprobeSource)):
        return None
    if target.dump_bytes() < PREFETCH_MIN_BYTES:
        return None
    # fork where there is one (as the CSV writer): the helper starts at once and needs no importable __main__
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context(method))
    target.prefetch(pool)
    return pool
