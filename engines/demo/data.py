"""Synthetic token batches for the demo model, framework-neutral and deterministic.

The tokens follow a fixed random Markov chain: with probability ``FOLLOW_P`` the next token is ``successor[prev]``
(a seed-drawn permutation of the vocabulary), otherwise it is uniform. The model can learn the successor table,
so the loss falls from ln(vocab) within a few steps. Step ``i``'s batch depends only on ``(seed, i)``.
"""

from typing import Any, Iterator, Optional, Tuple

import numpy as np

from engines.demo.knobs import resolve_knobs

FOLLOW_P = 0.8
_SUCCESSOR_STREAM = 1
_BATCH_STREAM = 2


def _rng(*key: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(list(key))))


def successor_table(knobs: Any) -> np.ndarray:
    """The permutation the chain follows: ``successor[t]`` is the likely token after ``t``."""
    knobs = resolve_knobs(knobs)
    return _rng(knobs.seed, _SUCCESSOR_STREAM).permutation(knobs.vocab).astype(np.int64)


def make_batch(knobs: Any, step: int, successor: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
    """``(inputs, targets)``, both int64 ``(batch, seq)``; targets are the inputs shifted by one token."""
    knobs = resolve_knobs(knobs)
    if successor is None:
        successor = successor_table(knobs)
    rng = _rng(knobs.seed, _BATCH_STREAM, step)
    length = knobs.seq + 1
    tokens = np.empty((knobs.batch, length), dtype=np.int64)
    tokens[:, 0] = rng.integers(0, knobs.vocab, size=knobs.batch)
    follow = rng.random((knobs.batch, length)) < FOLLOW_P
    noise = rng.integers(0, knobs.vocab, size=(knobs.batch, length))
    for t in range(1, length):
        tokens[:, t] = np.where(follow[:, t], successor[tokens[:, t - 1]], noise[:, t])
    return tokens[:, :-1].copy(), tokens[:, 1:].copy()


def batches(knobs: Any) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    """The batches of steps ``0 .. knobs.steps - 1`` in order (knobs: dict or DemoKnobs)."""
    knobs = resolve_knobs(knobs)  # bad knobs fail here, not at the first next()
    successor = successor_table(knobs)
    return (make_batch(knobs, step, successor) for step in range(knobs.steps))
