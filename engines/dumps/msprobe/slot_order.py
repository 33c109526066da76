"""Where msprobe puts the gradients of a backward record, against where we put them.

Our backward ``output.<i>`` is the gradient with respect to the forward call's argument ``i`` (``output.<kw>`` for
a keyword argument; docs/CAPTURE.md), ``input.<i>`` the gradient of its output ``i``, and a gradient that does not
exist has no row. msprobe 26.2 takes a backward record's outputs from the autograd node that produced the forward
result: one entry per edge of that node, ``null`` where the input needs no gradient. Measured on
mindstudio-probe 26.2.0 with torch 2.13 (CPU; tests/data/msprobe/real and tests/test_export_msprobe.py):

- most ops: one entry per floating-point tensor argument, positional first, then keyword ones (integer tensors
  such as embedding indices have no edge): ``F.layer_norm(x, shape, weight=w, bias=b)`` gives ``[x, w, b]``,
  ``F.embedding(ids, w)`` gives ``[w]``;
- ``F.linear`` as torch decomposes it: a 2-D input runs as ``addmm(b, x, wᵀ)`` (``mm(x, wᵀ)`` without bias), so
  the entries are the gradients of ``b``, ``x`` and ``wᵀ`` (``[out]``, ``[n, in]`` or ``null``, ``[in, out]``); an
  input of more dimensions is flattened first, so the only entry is the gradient of the flattened result
  (``[n*t, out]``: our ``input.0`` reshaped); a 1-D input with bias gives our ``input.0`` as a row ``[1, out]``.
  (A non-contiguous input of 3 or more dimensions runs as ``matmul`` + ``add``, giving ``[grad, b]``; a dump does
  not say whether the input was contiguous, so the contiguous case is assumed.)
- ops whose msprobe gradients are an inner op's (``cross_entropy`` reports the inner ``nll_loss`` gradient) cannot
  be mapped and are left as they are.

The exporter (``engines/export``) writes msprobe's layout from this table; the reader's way back (msprobe's slots to
ours, when one side of a compare is msprobe's) is ``backward_slots``, which works from the dump alone (shapes and
dtypes of the forward inputs) and leaves unpaired what it cannot place (the flattened >2-D ``linear`` gradient).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

#: transforms of a gradient on its way to msprobe's slot; none changes a value, so statistics carry over
SAME, TRANSPOSE, FLAT_2D, ROW = "", "T", "flat2d", "row"
#: (our slot or None for msprobe's ``null``, transform) of each msprobe backward output, in msprobe's order
Sources = List[Tuple[Optional[str], str]]
#: the forward call's top-level tensor arguments: (head: ``0``, ``weight``..., floating point?)
Inputs = Sequence[Tuple[str, bool]]


def _grad(head: str, grads: Sequence[str]) -> Optional[str]:
    return "output." + head if head in grads else None


def _linear(inputs: Inputs, grads: Sequence[str], output_ndim: int) -> Optional[Sources]:
    """``F.linear(input, weight, bias)``: argument ``0`` input, ``1``/``weight`` weight, ``2``/``bias`` bias."""
    heads = [h for h, _ in inputs] or list(grads)
    bias = next((h for h in ("2", "bias") if h in heads), "")
    weight = next((h for h in ("1", "weight") if h in heads), "")
    if output_ndim > 2:
        return [("input.0", FLAT_2D)]
    if output_ndim == 1:
        return [("input.0", ROW)] if bias else None
    if output_ndim != 2 or not weight:
        return None
    out: Sources = [(_grad(bias, grads), SAME)] if bias else []
    out.append((_grad("0", grads), SAME))
    out.append((_grad(weight, grads), TRANSPOSE))
    return out


#: API base name -> its rule, or None (then the general rule)
FUSED = {"Functional.linear": _linear}


def msprobe_backward_outputs(api_base: str, inputs: Optional[Inputs], grads: Sequence[str],
                             output_ndim: int) -> Sources:
    """msprobe's backward outputs of a record of ``api_base`` (``Functional.linear``), as (our slot or None,
    transform) each. ``inputs``: the forward record's top-level tensor arguments (None when the dump has no forward
    record); ``grads``: our output slots' first part after ``output`` (``0``, ``weight``); ``output_ndim``: the rank
    of our ``input.0`` (the forward result's gradient)."""
    rule = FUSED.get(api_base)
    if rule is not None:
        sources = rule(inputs or [], grads, output_ndim)
        if sources is not None:
            return sources
    if inputs is None:
        order = sorted((h for h in grads if h.isdigit()), key=int) + [h for h in grads if not h.isdigit()]
        return [("output." + h, SAME) for h in order]
    positional = [(h, f) for h, f in inputs if h.isdigit()]
    keywords = [(h, f) for h, f in inputs if not h.isdigit()]
    out: Sources = [(_grad(h, grads), SAME) for h, floating in positional + keywords if floating]
    listed = {h for h, f in inputs if f}
    out.extend(("output." + h, SAME) for h in grads if h not in listed)  # a gradient of no listed argument
    return out


def backward_output_positions(api_base: str, inputs: Optional[Inputs], grads: Sequence[str],
                              output_ndim: int = 2) -> Dict[str, Tuple[int, str]]:
    """Our gradient heads that msprobe keeps -> (msprobe's position, transform)."""
    out: Dict[str, Tuple[int, str]] = {}
    for place, (slot, transform) in enumerate(msprobe_backward_outputs(api_base, inputs, grads, output_ndim)):
        if slot is not None and slot.startswith("output."):
            out[slot[len("output."):]] = (place, transform)
    return out


def transformed_shape(shape: List[int], transform: str) -> List[int]:
    """The shape msprobe records for a gradient of ``shape`` after ``transform``."""
    if transform == TRANSPOSE and len(shape) == 2:
        return list(reversed(shape))
    if transform == FLAT_2D and len(shape) > 2:
        n = 1
        for d in shape[:-1]:
            n *= d
        return [n, shape[-1]]
    if transform == ROW:
        n = 1
        for d in shape:
            n *= d
        return [1, n]
    return list(shape)
