"""Where msprobe puts the gradients of a backward record, against where we put them.

Our backward ``output.<i>`` is the gradient with respect to the forward call's argument ``i`` (docs/CAPTURE.md).
msprobe 26.2 takes a backward record's outputs from the autograd node of the forward result, so for ops that
autograd runs as one fused node the order (and sometimes the layout) follows that node: ``F.linear(x, w, b)`` is
``addmm(b, x, wᵀ)`` there, so its backward outputs are the gradients of ``b``, ``x`` and ``wᵀ`` (shapes
``[out]``, ``[n, in]``, ``[in, out]``), measured on msprobe 26.2.0 (tests/data/msprobe/real/tensor_mix).

One table, read both ways: the exporter (``engines/export``) writes msprobe's order, compare maps msprobe's back
to ours when one side is msprobe's. Ops whose msprobe gradients are of another op altogether (``cross_entropy``
reports the inner ``nll_loss`` gradient) cannot be mapped and are not listed.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

#: API base name -> {count of our backward outputs: msprobe's outputs as (our position, transposed)}.
#: ``transposed``: msprobe holds the gradient of the 2-D transpose of our argument.
BACKWARD_OUTPUTS: Dict[str, Dict[int, Tuple[Tuple[int, bool], ...]]] = {
    "Functional.linear": {
        3: ((2, False), (0, False), (1, True)),  # addmm(bias, input, weightᵀ)
        2: ((0, False), (1, True)),  # mm(input, weightᵀ): no bias
    },
}


def msprobe_outputs(api_base: str, count: int) -> Optional[Tuple[Tuple[int, bool], ...]]:
    """msprobe's backward outputs of ``api_base`` (``Functional.linear``) as (our position, transposed) per
    msprobe position, when our record has ``count`` outputs; None when the two tools agree."""
    return BACKWARD_OUTPUTS.get(api_base, {}).get(count)


def ours_from_msprobe(api_base: str, count: int) -> Optional[List[Tuple[int, bool]]]:
    """The inverse: for each of our positions, (msprobe's position, transposed); None when the tools agree."""
    order = msprobe_outputs(api_base, count)
    if order is None:
        return None
    out: List[Tuple[int, bool]] = [(0, False)] * count
    for theirs, (ours, transposed) in enumerate(order):
        out[ours] = (theirs, transposed)
    return out


def backward_output_positions(api_base: str, heads: List[str]) -> Dict[str, Tuple[int, bool]]:
    """Where msprobe lists each of our backward output slots: ``heads`` are their first part after ``output``
    (``0``, ``2``, ``weight``) in our order; the answer maps each to (msprobe's list position, transposed).

    msprobe's backward outputs are one list: our positional slots keep their index, gradients of keyword
    arguments (``F.layer_norm`` gets ``weight``/``bias`` by keyword: our ``output.weight``) follow them in our
    order, then :data:`BACKWARD_OUTPUTS` reorders the fused ops. An index no gradient fills is a ``null``
    there."""
    positional = sorted({int(h) for h in heads if h.isdigit()})
    places: Dict[str, int] = {str(p): p for p in positional}
    nxt = positional[-1] + 1 if positional else 0
    for head in heads:
        if not head.isdigit() and head not in places:
            places[head] = nxt
            nxt += 1
    out = {head: (place, False) for head, place in places.items()}
    order = msprobe_outputs(api_base, nxt) if len(places) == nxt else None
    if order is not None:
        mine = {place: head for head, place in places.items()}
        for theirs, (ours, transposed) in enumerate(order):
            out[mine[ours]] = (theirs, transposed)
    return out


def transposed_shape(shape: List[int]) -> List[int]:
    """The shape of the transpose msprobe records (2-D; other ranks unchanged)."""
    return list(reversed(shape)) if len(shape) == 2 else list(shape)
