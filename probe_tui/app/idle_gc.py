"""The garbage collector's older generations run while the user reads, not in the key that happens to cross their
threshold.

Opening a view makes some 70,000 container objects (widgets, styles, segments, the view's rows): the young
generation's threshold is crossed several times an open, and every tenth young collection is a middle one, which
walks every object that survived the young ones since the last (the views opened and closed since): 25-45 ms of
CPU, in one open of two or three, at the key that opened it. Textual itself pauses the collector while a scroll
animates (``App.PAUSE_GC_ON_SCROLL``); this does the same for the keys: once no input has come for
:data:`QUIET_S` and no worker runs, the app collects the middle generation itself (the oldest every
:data:`FULL_EVERY` of those), so the automatic middle collection, due after ten young ones, is rarely reached
inside a key. Collecting earlier changes when garbage is freed, never what is kept.
"""

import gc
import time
from typing import Callable, Optional

QUIET_S = 0.25
"""No input for this long is a user reading: the collector may run. Longer than a key's own work takes to reach
the screen (a view's detail waits 80 ms for the cursor to rest, then is read and drawn), so that the collection
does not delay it."""
CHECK_S = 0.05
"""While a worker runs (a key's work still going), the app looks again after this long."""
MAX_WAIT_S = 1.0
"""How long a running worker may hold the collection back (a live view's worker runs for good)."""
MIN_YOUNG = 1_000
"""Fewer new objects than this since the last collection: nothing worth a middle collection (an idle app)."""
FULL_EVERY = 8
"""Every this many idle middle collections, the oldest generation too (Python's own threshold is ten middle
collections, and it then waits for a quarter more long-lived objects): the views closed since are freed there."""


class IdleCollector:
    """Decides, on each tick, whether the app is quiet and the young generations are worth collecting now. The app
    calls :meth:`input_seen` on each key or click and :meth:`tick` once it has been quiet for :data:`QUIET_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last_input = clock()
        self.middle_runs = 0
        """Middle collections this collector ran since its last full one."""
        self.collections = 0
        """All collections this collector ran (for tests and the benchmark)."""

    def input_seen(self) -> None:
        """A key, a click or a paste: the user is acting, not reading."""
        self.last_input = self.clock()

    def due(self) -> Optional[int]:
        """The generation to collect now (1 or 2), or None: not quiet long enough, or too little to collect."""
        if self.clock() - self.last_input < QUIET_S:
            return None
        young, middle, _old = gc.get_count()
        if young < MIN_YOUNG and middle == 0:
            return None
        return 2 if self.middle_runs + 1 >= FULL_EVERY else 1

    def waits_for_workers(self, busy: bool) -> bool:
        """Whether to look again later rather than collect now: a worker still runs (``busy``) and the quiet has
        not lasted :data:`MAX_WAIT_S` yet."""
        return busy and self.clock() - self.last_input < MAX_WAIT_S

    def tick(self, busy: bool = False) -> Optional[int]:
        """Collect if due and nothing is ``busy`` (a worker running); the generation collected, or None."""
        if busy or not gc.isenabled():
            return None
        generation = self.due()
        if generation is None:
            return None
        gc.collect(generation)
        self.collections += 1
        self.middle_runs = 0 if generation == 2 else self.middle_runs + 1
        return generation
