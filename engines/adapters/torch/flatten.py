"""Walk torch call arguments and results (``engines.capture.flatten``): tensors to a visitor under their slot,
everything else to JSON. What is torch's own: ``torch.Size`` is a shape, not an argument list; dtypes, devices,
memory formats, layouts, process groups and reduce ops get a typed skeleton that replay rebuilds."""

from typing import Any

import torch

from engines.capture.flatten import MAX_DEPTH, Visitor, Walkers  # noqa: F401 (re-exported)


def describe(obj: Any) -> Any:
    """The skeleton of a torch object the generic walk does not know (None: not one of those)."""
    if isinstance(obj, torch.Size):
        return {"type": "torch.Size", "value": list(obj)}
    if isinstance(obj, torch.dtype):
        return {"type": "torch.dtype", "value": str(obj)}
    if isinstance(obj, torch.device):
        return {"type": "torch.device", "value": str(obj)}
    if isinstance(obj, (torch.memory_format, torch.layout)):
        return {"type": type(obj).__module__ + "." + type(obj).__name__, "value": str(obj)}
    name = type(obj).__name__
    if name == "ProcessGroup" or name.endswith("ProcessGroup"):
        try:
            import torch.distributed as dist

            return {"type": "torch.ProcessGroup", "group_ranks": list(dist.get_process_group_ranks(obj))}
        except Exception:
            return {"type": "torch.ProcessGroup"}
    if name in ("ReduceOp", "RedOpType"):
        return {"type": "torch.distributed.ReduceOp", "value": str(obj)}
    return None


WALKERS = Walkers(torch.Tensor, describe, sizes=(torch.Size,))
walk = WALKERS.walk
walk_call = WALKERS.walk_call
walk_output = WALKERS.walk_output
tensors_in = WALKERS.tensors_in
output_tensors = WALKERS.output_tensors
