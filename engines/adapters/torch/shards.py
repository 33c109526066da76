"""The local view of a sharded tensor, for the hooks that measure tensors with torch arithmetic (the monitor,
grad_probe).

FSDP2 parameters, their gradients and optimizer state, and tensor-parallel activations are DTensors: arithmetic on
them runs through DTensor's dispatch, which inserts collectives (a redistribution) into the training's stream and
fails for placements it cannot convert (``P(max)`` to ``P(sum)``). A hook measures the rank's own shard instead:
``to_local()`` is a view of the data this rank holds, with no communication, so ranks never wait on each other
for a metric and a hook that fails on one rank cannot hang the others.
"""

from typing import Any


def local_shard(t: Any) -> Any:
    """A DTensor's local shard (a plain tensor); anything else as it is."""
    if type(t).__name__ == "DTensor" and hasattr(t, "to_local"):
        return t.to_local()
    return t
