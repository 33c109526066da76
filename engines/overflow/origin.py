"""Where a non-finite value came from, decided per call from the finiteness of its tensors.

Every tensor version a capture sees gets a *state*: the kinds of non-finite values it holds (NaN, +inf, -inf),
whether it holds the dtype's extreme finite values (``finfo.max`` / ``finfo.min``, the fill of many attention
masks), and a *taint* for non-finite tensors: ``MASK`` when every non-finite value traces back to a deliberate
fill, ``BAD`` otherwise. A call is then:

- ``PRODUCED``: no input is ``BAD``, and an output holds a kind of non-finite value that no input, fill argument or
  extreme value explains (float16 ``exp`` giving +inf from finite inputs; NaN from ``-inf - -inf`` in a fully
  masked row). This is an overflow's origin.
- ``INPUTS``: some input is ``BAD``: the call only passes on (or consumes) values that were already bad.
- ``MASK``: non-finite values are present, but every one traces back to a fill (``masked_fill(mask, -inf)``,
  ``torch.full(..., -inf)``, an added ``finfo.min`` mask): not an overflow (docs/decisions/0016-masks-are-not-overflows.md). Outputs stay ``MASK``.
- ``RECEIVED``: a collective (``all_reduce``...) whose output is non-finite though this rank's inputs were not:
  the values came from another rank's input of the same collective (``engines.overflow.cross_rank`` follows the
  link to the rank and op that produced them, docs/OVERFLOW.md).
- ``CLEAN``: nothing non-finite anywhere.

A call that allocates without initialising (``torch.empty`` and its kin: the buffers FSDP all-gathers into and a
pipeline stage receives into) holds whatever the memory held, NaN under ``torch.use_deterministic_algorithms``'s
fill: it is ``MASK``, never an origin, and what is computed from its values before they are written (a pipeline
stage's shape inference) is not flagged either.

``PRODUCED``, ``INPUTS`` and ``RECEIVED`` calls are *flagged* (they count toward ``overflow_nums``); ``MASK`` and
``CLEAN`` are not.
"""

from typing import Iterable, List, Optional, Sequence, Tuple

# Kinds of non-finite values (bit flags).
NAN = 1
POSINF = 2
NEGINF = 4
NONFINITE = NAN | POSINF | NEGINF
# Extreme finite values of the tensor's dtype (bit flags).
EXTREME_MAX = 8
EXTREME_MIN = 16

# Taints of a non-finite tensor.
FINITE = 0
MASK = 1
BAD = 2

# Origins of a call.
CLEAN = 0
PRODUCED = 1
INPUTS = 2
MASKED = 3
RECEIVED = 4

ORIGIN_NAMES = {CLEAN: "clean", PRODUCED: "produced", INPUTS: "inputs", MASKED: "mask", RECEIVED: "received"}
FLAGGED = (PRODUCED, INPUTS, RECEIVED)


def uninitialised(outputs: Sequence["TensorFacts"]) -> "Verdict":
    """The verdict of an uninitialising allocation: its non-finite values are no overflow."""
    if any(f.kinds for f in outputs):
        return Verdict(MASKED, MASK, "uninitialised memory (its values are undefined until written)")
    return Verdict(CLEAN, FINITE, "")


def kinds_text(kinds: int) -> str:
    """``NAN|POSINF`` -> ``"nan, +inf"``."""
    parts = []
    if kinds & NAN:
        parts.append("nan")
    if kinds & POSINF:
        parts.append("+inf")
    if kinds & NEGINF:
        parts.append("-inf")
    return ", ".join(parts)


def kinds_of_value(value: float) -> int:
    if value != value:
        return NAN
    if value == float("inf"):
        return POSINF
    if value == float("-inf"):
        return NEGINF
    return 0


def kinds_from_minmax(lo: float, hi: float) -> int:
    """Kinds from a tensor's (min, max), both NaN-propagating: NaN hides whether infinities are present too."""
    if lo != lo or hi != hi:
        return NAN
    kinds = 0
    if hi == float("inf"):
        kinds |= POSINF
    if lo == float("-inf"):
        kinds |= NEGINF
    return kinds


def explained_by_extremes(extremes: int) -> int:
    """Which infinities arithmetic on ``finfo.max`` / ``finfo.min`` fills can produce without being an overflow."""
    kinds = 0
    if extremes & EXTREME_MAX:
        kinds |= POSINF
    if extremes & EXTREME_MIN:
        kinds |= NEGINF
    return kinds


def fill_kinds(args: object) -> int:
    """Kinds of the non-finite scalar arguments in a record's JSON skeleton (``{"type": "float", "value":
    "-inf"}`` is how capture writes a non-finite float)."""
    found = 0
    stack = [args]
    while stack:
        obj = stack.pop()
        if isinstance(obj, dict):
            if obj.get("type") == "float" and isinstance(obj.get("value"), str):
                found |= _kind_of_text(obj["value"])
                continue
            if "tensor" in obj and len(obj) == 1:
                continue
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, float):
            found |= kinds_of_value(obj)
    return found


def _kind_of_text(text: str) -> int:
    t = text.strip().lower()
    if t in ("nan", "-nan", "+nan"):
        return NAN
    if t in ("inf", "+inf", "infinity"):
        return POSINF
    if t in ("-inf", "-infinity"):
        return NEGINF
    return 0


class TensorFacts:
    """What the classifier needs to know about one tensor of a call."""

    __slots__ = ("slot", "kinds", "extremes", "taint")

    def __init__(self, slot: str, kinds: int = 0, extremes: int = 0, taint: int = FINITE) -> None:
        self.slot = slot
        self.kinds = kinds
        self.extremes = extremes
        self.taint = taint


class Verdict:
    """A call's origin, the output taint it implies, and a short human reason."""

    __slots__ = ("origin", "output_taint", "reason", "new_kinds")

    def __init__(self, origin: int, output_taint: int, reason: str, new_kinds: int = 0) -> None:
        self.origin = origin
        self.output_taint = output_taint
        self.reason = reason
        self.new_kinds = new_kinds

    @property
    def flagged(self) -> bool:
        return self.origin in FLAGGED

    @property
    def name(self) -> str:
        return ORIGIN_NAMES[self.origin]


def is_input_slot(slot: str) -> bool:
    """Forward records: ``input.*`` and ``parameters.*``. Backward records: ``input.*`` holds the gradients
    w.r.t. the forward outputs, which are what the backward computation starts from."""
    return slot.startswith("input") or slot.startswith("parameters")


def classify(inputs: Sequence[TensorFacts], outputs: Sequence[TensorFacts], fills: int = 0) -> Verdict:
    """The origin of one call (see the module docstring)."""
    in_kinds = 0
    in_extremes = 0
    bad: List[TensorFacts] = []
    for f in inputs:
        in_kinds |= f.kinds
        in_extremes |= f.extremes
        if f.kinds and f.taint == BAD:
            bad.append(f)
    out_kinds = 0
    for f in outputs:
        out_kinds |= f.kinds
    if bad:
        slots = ", ".join("%s (%s)" % (f.slot, kinds_text(f.kinds)) for f in bad[:3])
        more = " and %d more" % (len(bad) - 3) if len(bad) > 3 else ""
        return Verdict(INPUTS, BAD, "inputs already non-finite: %s%s" % (slots, more))
    explained = in_kinds | fills | explained_by_extremes(in_extremes)
    new = out_kinds & ~explained
    if new:
        if in_kinds or fills:
            source = "from masked (%s) inputs" % kinds_text(in_kinds | fills)
        elif in_extremes:
            source = "from finite inputs holding the dtype's extreme values"
        else:
            source = "from finite inputs"
        return Verdict(PRODUCED, BAD, "produced %s %s" % (kinds_text(new), source), new)
    if out_kinds or in_kinds:
        return Verdict(MASKED, MASK, "non-finite values come from a mask or fill")
    return Verdict(CLEAN, FINITE, "")


def received(verdict: Verdict, collective: object) -> Verdict:
    """A collective's verdict: values it "produced" came from another member of its group (``RECEIVED``)."""
    if verdict.origin != PRODUCED or not isinstance(collective, dict):
        return verdict
    text = "%s arrived through %s #%s on group %s: another rank's input held them" % (
        kinds_text(verdict.new_kinds), collective.get("op"), collective.get("group_seq"), collective.get("group"))
    return Verdict(RECEIVED, BAD, text, verdict.new_kinds)


def split_rows(rows: Iterable[TensorFacts]) -> Tuple[List[TensorFacts], List[TensorFacts]]:
    ins: List[TensorFacts] = []
    outs: List[TensorFacts] = []
    for f in rows:
        (ins if is_input_slot(f.slot) else outs).append(f)
    return ins, outs


def external_taint(kinds: int, requires_grad: Optional[bool]) -> int:
    """Taint of a non-finite tensor no captured call produced (a buffer made before the run, a batch of data).

    A constant that holds infinities of one sign and no NaN and does not require grad is a mask (a causal mask
    buffer filled with -inf at construction); anything else is bad data."""
    if not kinds:
        return FINITE
    one_sign = kinds in (POSINF, NEGINF)
    if one_sign and not requires_grad:
        return MASK
    return BAD
