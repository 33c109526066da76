"""The garbage collector's older generations run while the user reads, not in the key that happens to cross their
threshold.

Opening a view makes some 70,000 container objects (widgets, styles, segments, the view's rows): the young
generation's threshold is crossed several times an open, and every tenth young collection is a middle one, which
walks every object that survived the young ones since the last (the views opened and closed since): 25-45 ms of
CPU, in one open of two or three, at the key that opened it. Textual itself pauses the collector while a scroll
animates (``App.PAUSE_GC_ON_SCROLL``); this does the same for the keys: once no input has come for
:data:`QUIET_S` (and no worker runs), the app collects the middle generation itself once Python would have
(:data:`MIDDLE_AFTER`), and the oldest once :data:`FULL_EVERY` middle collections ran and the user has been quiet
for :data:`FULL_QUIET_S`; the automatic thresholds (:data:`THRESHOLDS`) are raised so that the automatic middle
and full collections, which fell inside keys, become a bound rather than the rule. Collecting earlier changes when garbage is freed, never what is kept.
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
MIDDLE_AFTER = 10
"""Young collections since the last middle one (``gc.get_count()[1]``) before a quiet collects the middle
generation: Python's own rate (its threshold is ten), moved from the key that reaches it to the quiet after."""
FULL_EVERY = 10
"""Middle collections since the last full one (``gc.get_count()[2]``) before a long quiet (:data:`FULL_QUIET_S`)
collects the oldest generation too: the views closed since are freed there (24,000-34,000 objects each, 25-90 ms
of CPU). Python's own rate, moved out of the keys."""
FULL_QUIET_S = 1.0
"""The quiet a full collection waits for: longer than the gaps between keys of someone working through a view."""
FULL_ANYWAY = 40
"""Middle collections after which the full one runs at the next short quiet (a user who never pauses a second)."""
THRESHOLDS = (10_000, 50, 100)
"""The app's automatic thresholds (``gc.set_threshold``; Python's 700, 10, 10): a young collection every 10,000
new objects (building a screen makes tens of thousands of short-lived ones: with 700 the collector walked every live
object several times while the config builder opened); the middle and oldest generations' automatic collections
five and ten times rarer than the quiets above collect them, a bound for a user who never stops typing."""


class IdleCollector:
    """Decides whether the app is quiet and which generation is worth collecting now. The app calls
    :meth:`input_seen` on each key or click, :meth:`tick` once it has been quiet for :data:`QUIET_S`, and again
    after :meth:`next_tick` seconds when that says so."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last_input = clock()
        self.collections = 0
        """All collections this collector ran (for tests and the benchmark)."""

    def input_seen(self) -> None:
        """A key, a click or a paste: the user is acting, not reading."""
        self.last_input = self.clock()

    def quiet(self) -> float:
        return self.clock() - self.last_input

    def due(self) -> Optional[int]:
        """The generation to collect now (1 or 2), or None: not quiet long enough, or too little to collect."""
        quiet = self.quiet()
        if quiet < QUIET_S:
            return None
        _young, middle, old = gc.get_count()
        if old >= FULL_ANYWAY or (old >= FULL_EVERY and quiet >= FULL_QUIET_S):
            return 2
        return 1 if middle >= MIDDLE_AFTER else None

    def next_tick(self) -> Optional[float]:
        """Seconds until a full collection may run, when one is pending and the quiet is not long enough yet."""
        if gc.get_count()[2] < FULL_EVERY:
            return None
        wait = FULL_QUIET_S - self.quiet()
        return wait if wait > 0 else None

    def waits_for_workers(self, busy: bool) -> bool:
        """Whether to look again later rather than collect now: a worker still runs (``busy``) and the quiet has
        not lasted :data:`MAX_WAIT_S` yet."""
        return busy and self.quiet() < MAX_WAIT_S

    def tick(self, busy: bool = False) -> Optional[int]:
        """Collect if due and nothing is ``busy`` (a worker running); the generation collected, or None."""
        if busy or not gc.isenabled():
            return None
        generation = self.due()
        if generation is None:
            return None
        gc.collect(generation)
        self.collections += 1
        return generation
