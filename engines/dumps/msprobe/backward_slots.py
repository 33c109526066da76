"""msprobe's backward slots brought to ours, so that one run captured by both tools compares clean.

Both tools write an API's backward record with ``input.*`` = gradients w.r.t. the forward outputs and
``output.*`` = gradients w.r.t. the forward inputs. They differ in how ``output.<i>`` is numbered:

- probe-tui: ``i`` is the forward argument's position (``F.linear(x, w, b)``: ``output.0`` = dx, ``output.1`` =
  dw, ``output.2`` = db; an argument without a gradient has no row);
- msprobe (PyTorch): the gradients its hook on the output's ``grad_fn`` receives, in that autograd node's order,
  None for an edge without a gradient. For most ops that is the argument order. It is not when the API runs
  through another op: ``F.linear`` on a 2-D input is ``addmm(b, x, w.t())``, whose node gives
  (db, dx, dwᵀ) (``mm(x, w.t())`` without a bias: (dx, dwᵀ)); ``F.cross_entropy`` is ``nll_loss(log_softmax(x))``,
  whose node gives the gradient w.r.t. the log-probabilities, not w.r.t. ``x``.

``map_backward_outputs`` renames msprobe's output slots of one backward record to ours, from the record's forward
inputs (their positions and shapes):
- when msprobe's order already agrees (every gradient has the shape of the argument at its position), nothing
  changes;
- ``linear``: the addmm/mm order above; dwᵀ is marked ``transposed`` (its shape is shown as w's, the tensor reader
  transposes it back, and its checksum is not comparable: it hashes other bytes);
- otherwise one gradient per tensor argument that can have one (not integer or bool), in argument order
  (``F.layer_norm(x, shape, w, b)``: (dx, dw, db) are our ``output.0``, ``output.2``, ``output.3``;
  ``F.embedding(ids, w)``: (dw) is our ``output.1``);
- else, when each gradient's shape fits exactly one tensor argument, it takes that argument's position;
- a gradient that is not one w.r.t. an argument (``cross_entropy``'s, or one whose shape fits no argument) keeps
  its row under ``output.grad_fn.<i>``, which pairs with nothing on our side: shown, never a false error.
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple

__all__ = ["TRANSPOSED", "Mapped", "agrees", "forward_tensor_inputs", "map_backward_outputs"]

#: Appended to a tensor file's name in the reader's file list: the array is transposed when read.
TRANSPOSED = "::T"

# APIs whose msprobe backward gradients are taken at an inner op, not w.r.t. the API's arguments.
_INNER_NODE = frozenset({"cross_entropy"})

Shape = Optional[Tuple[int, ...]]
# (our slot, the value, transposed)
Mapped = List[Tuple[str, Any, bool]]


def _shape(value: Any) -> Shape:
    if isinstance(value, dict) and "value" not in value and isinstance(value.get("shape"), list):
        shape = value["shape"]
        if all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            return tuple(shape)
    return None


_DIFFERENTIABLE: Dict[str, bool] = {}


def _differentiable(value: Any) -> bool:
    """A tensor that can have a gradient: not an integer or bool one (an unknown dtype counts as one that can)."""
    dtype = value.get("dtype") if isinstance(value, dict) else None
    if not isinstance(dtype, str):
        return True
    known = _DIFFERENTIABLE.get(dtype)
    if known is None:
        known = _DIFFERENTIABLE[dtype] = not any(w in dtype.lower() for w in ("int", "bool", "long"))
    return known


def agrees(api: str, outputs: Sequence[Any], forward: Dict[str, Any]) -> bool:
    """The fast path, on the raw forward record: msprobe's order already is ours (each gradient has the shape of
    the positional argument at its index, one that can have a gradient). Most records end here."""
    if api in _INNER_NODE:
        return False
    args = forward.get("input_args")
    if args is None:
        args = forward.get("input")
    if not isinstance(args, list):
        return False
    for i, value in enumerate(outputs):
        if value is None:
            continue
        if i >= len(args):
            return False
        arg = args[i]
        if not isinstance(arg, dict) or not isinstance(value, dict) or "value" in arg \
                or arg.get("shape") != value.get("shape") or not _differentiable(arg):
            return False
    return True


def forward_tensor_inputs(entry: Dict[str, Any]) -> List[Tuple[str, Shape]]:
    """(our backward slot, shape) of each argument of a forward record: positional then keyword; a shape of None
    for an argument that is not a tensor. A slot is marked ``~`` at its end when the tensor cannot have a gradient
    (integer or bool), so that it is left out of the argument order of the gradients."""
    args = entry.get("input_args")
    if args is None:
        args = entry.get("input")
    items: List[Tuple[str, Any]] = []
    if isinstance(args, list):
        items.extend((str(i), v) for i, v in enumerate(args))
    kwargs = entry.get("input_kwargs")
    if isinstance(kwargs, dict):
        items.extend((str(k), v) for k, v in kwargs.items())
    return [("output." + key + ("" if _differentiable(v) else "~"), _shape(v)) for key, v in items]


def _slot(slot: str) -> str:
    return slot[:-1] if slot.endswith("~") else slot


def _agrees(outputs: Sequence[Any], inputs: List[Tuple[str, Shape]]) -> bool:
    for i, value in enumerate(outputs):
        if value is None:
            continue
        if i >= len(inputs) or inputs[i][0] != "output.%d" % i or inputs[i][1] is None \
                or _shape(value) != inputs[i][1]:
            return False  # not a positional argument that can have a gradient, or not its shape
    return True


def _linear(outputs: Sequence[Any], inputs: List[Tuple[str, Shape]]) -> Optional[Mapped]:
    """addmm's (db, dx, dwᵀ) or mm's (dx, dwᵀ), checked against the shapes of x, w and b."""
    shapes = [s for _, s in inputs[:3]]
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None or len(shapes[0]) != 2 or len(shapes[1]) != 2:
        return None
    has_bias = len(shapes) == 3 and shapes[2] is not None
    if len(outputs) != (3 if has_bias else 2):
        return None
    order = (("output.2", False), ("output.0", False), ("output.1", True)) if has_bias else \
        (("output.0", False), ("output.1", True))
    want = {"output.0": shapes[0], "output.1": shapes[1], "output.2": shapes[2] if has_bias else None}
    mapped: Mapped = []
    for value, (slot, transposed) in zip(outputs, order):
        shape = _shape(value)
        if value is not None:
            expected = want[slot]
            if shape is None or expected is None or (tuple(reversed(shape)) if transposed else shape) != expected:
                return None
        mapped.append((slot, value, transposed and value is not None))
    return mapped


def _tensor_order(outputs: Sequence[Any], inputs: List[Tuple[str, Shape]]) -> Optional[Mapped]:
    """One gradient per tensor argument that can have one, in argument order (``F.layer_norm(x, shape, w, b)``:
    msprobe's (dx, dw, db) are our output.0, output.2, output.3)."""
    tensors = [(slot, shape) for slot, shape in inputs if shape is not None and not slot.endswith("~")]
    if len(outputs) != len(tensors):
        return None
    mapped: Mapped = []
    for value, (slot, shape) in zip(outputs, tensors):
        if value is not None and _shape(value) != shape:
            return None
        mapped.append((slot, value, False))
    return mapped


def _by_shape(outputs: Sequence[Any], inputs: List[Tuple[str, Shape]]) -> Optional[Mapped]:
    mapped: Mapped = []
    taken = set()
    for value in outputs:
        if value is None:
            continue
        fits = [_slot(slot) for slot, shape in inputs if shape is not None and shape == _shape(value)
                and not slot.endswith("~")]
        if len(fits) != 1 or fits[0] in taken:
            return None
        taken.add(fits[0])
        mapped.append((fits[0], value, False))
    return mapped


def _unpaired(outputs: Sequence[Any]) -> Mapped:
    return [("output.grad_fn." + str(i), value, False) for i, value in enumerate(outputs)]


def map_backward_outputs(api: str, outputs: Sequence[Any], inputs: Optional[List[Tuple[str, Shape]]]
                         ) -> Optional[Mapped]:
    """Our slots for msprobe's ``output`` list of one API backward record (``api``: ``linear``, ``relu``, ...);
    None when they stay as they are (msprobe's order agrees, or the forward record is unknown)."""
    if inputs is None:
        return None
    if api in _INNER_NODE:
        return _unpaired(outputs)
    if _agrees(outputs, inputs):
        return None
    if api == "linear":
        mapped = _linear(outputs, inputs)
        if mapped is not None:
            return mapped
    return _tensor_order(outputs, inputs) or _by_shape(outputs, inputs) or _unpaired(outputs)
