"""What describing a collective costs (``args["collective"]``: op, group, dtype, bytes, group_seq), against the
collective itself, in one process (a 1-rank gloo group: the cheapest real collective there is).

    python benchmarks/collective_records.py [--calls 20000]

Prints microseconds per call: ``CollectiveTracker.note`` of ``dist.all_reduce`` and of the functional
``torch.ops._c10d_functional.all_reduce`` (what DTensor issues), and the 1-rank ``dist.all_reduce`` of 4 KB.
"""

import argparse
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from engines.adapters.torch.collectives import CollectiveTracker  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    calls = parser.parse_args().calls
    torch.set_num_threads(1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        t = torch.ones(1024)
        tracker = CollectiveTracker()
        functional = torch.ops._c10d_functional.all_reduce
        group = dist.group.WORLD.group_name
        figures = {
            "note(dist.all_reduce)": per_call_us(lambda: tracker.note("all_reduce", dist.all_reduce, (t,), {}),
                                                 calls),
            "note(functional all_reduce)": per_call_us(
                lambda: tracker.note("all_reduce", functional, (t, "sum", group), {}), calls),
            "dist.all_reduce, 1 rank, 4 KB": per_call_us(lambda: dist.all_reduce(t), calls),
        }
    finally:
        dist.destroy_process_group()
    for name, us in figures.items():
        print("%-32s %8.2f us" % (name, us))
    print("describing / the collective: %.2f" % (figures["note(dist.all_reduce)"]
                                                 / figures["dist.all_reduce, 1 rank, 4 KB"]))


if __name__ == "__main__":
    main()
