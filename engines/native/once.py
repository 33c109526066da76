"""A value decided once a process: the library's build and load, each kernel's binding and self-check."""

import threading
from typing import Callable, Generic, List, TypeVar

T = TypeVar("T")


class Once(Generic[T]):
    """``get()`` runs ``make`` at the first call (one thread does, the others wait) and returns its result from
    then on; ``reset()`` forgets it (tests)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._state: List[T] = []  # empty until the first get(); then [the value]

    def get(self) -> T:
        state = self._state
        if state:
            return state[0]
        with self._lock:
            if not state:
                state.append(self._make())
        return state[0]

    def reset(self) -> None:
        with self._lock:
            self._state.clear()
