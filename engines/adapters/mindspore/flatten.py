"""Walk MindSpore call arguments and results (``engines.capture.flatten``, the same skeleton the PyTorch adapter
writes, so replay, compare's scalar checks and the pre-check read both alike). What is MindSpore's own: its dtypes
get a typed skeleton that replay rebuilds."""

from typing import Any

from mindspore import Tensor
from mindspore.common import dtype as mstype

from engines.capture.flatten import MAX_DEPTH, Visitor, Walkers  # noqa: F401 (re-exported)


def describe(obj: Any) -> Any:
    """The skeleton of a MindSpore object the generic walk does not know (None: not one of those)."""
    if isinstance(obj, mstype.Type):
        return {"type": "mindspore.dtype", "value": str(obj)}
    return None


WALKERS = Walkers(Tensor, describe)
walk = WALKERS.walk
walk_call = WALKERS.walk_call
walk_output = WALKERS.walk_output
tensors_in = WALKERS.tensors_in
output_tensors = WALKERS.output_tensors
