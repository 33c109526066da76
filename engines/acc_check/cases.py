"""The calls of a dump as acc_check cases: which API records replay (forward, and backward where the dump kept the
gradients and the forward inputs), where each one's tensors are, and why the others cannot replay.

A case holds row positions and tensor locators only; its tensors are read when it runs (one API's tensors in
memory at a time). Cases come from any :class:`~engines.dumps.source.DumpSource` (ours or msprobe's): the call's
non-tensor arguments come from the record's ``args`` JSON where the dump keeps it (ours), else from its scalar rows.
"""

import json
import math
import re
from typing import Any, Dict, Iterator, List, Tuple

import numpy as np

from engines.dumps.rows import DIR_BACKWARD, DIR_FORWARD, IO_INPUT, IO_OUTPUT, KIND_API, RowTable

# Calls whose result depends on the random generator's state, which the dump does not keep.
RANDOM_APIS = frozenset((
    "dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
    "native_dropout", "rrelu", "rrelu_", "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "poisson",
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "uniform_", "random_",
    "exponential_", "geometric_", "log_normal_", "cauchy_", "gumbel_softmax"))
# In-place changes of a tensor's view (shape, strides, storage): a replay on a copy does not mean the same thing.
INPLACE_VIEWS = frozenset(("resize_", "resize_as_", "set_", "as_strided_", "transpose_", "t_", "squeeze_",
                           "unsqueeze_", "swapdims_", "swapaxes_", "detach_"))
# Casts, copies to a device and allocation: no arithmetic to check (msprobe's fixed blacklist and its kin).
NOT_COMPUTE = frozenset(("to", "type", "float", "double", "half", "bfloat16", "int", "long", "bool", "cpu", "cuda",
                         "npu", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                         "empty_with_format", "copy_", "detach", "clone", "numpy", "item", "tolist", "data_ptr",
                         "__setitem__", "requires_grad_", "retain_grad", "register_hook", "backward", "astype"))
NOT_SAVED = "tensors not saved (a statistics dump?): "
# MindSpore primitive class names (CamelCase) that draw random numbers, or do no arithmetic.
_RANDOM_PRIMITIVE_WORDS = ("Random", "Dropout", "StandardNormal", "StandardLaplace", "UniformInt", "UniformReal",
                           "CandidateSampler", "Multinomial", "Poisson", "Shuffle", "Bernoulli", "RandInt", "Randperm",
                           "Generator")
_RANDOM_PRIMITIVES = frozenset(("Normal", "Uniform", "Gamma", "Laplace"))
_NOT_COMPUTE_PRIMITIVES = frozenset(("Cast", "Identity", "Zeros", "Ones", "ZerosLike", "OnesLike", "Fill", "Fills",
                                     "Reshape", "Depend", "Load", "TensorDump", "Print"))
_COLLECTIVE_PREFIXES = ("Distributed", "Mint_distributed", "MintDistributed", "Comm")
_RECORD = re.compile(r"^(?P<base>.+)\.(?P<index>\d+)\.(?P<direction>forward|backward)$")


class Case:
    """One API call to check: its record (``Functional.softmax.0.forward``) and its rows in the step's table."""

    __slots__ = ("rank", "step", "record", "api", "direction", "args_json", "inputs", "outputs", "forward_inputs",
                 "forward_outputs", "skip", "generated", "autocast")

    def __init__(self, rank: int, step: int, record: str, api: str, direction: str) -> None:
        self.rank = rank
        self.step = step
        self.record = record
        self.api = api  # the short name: softmax, add_
        self.direction = direction
        self.args_json = ""
        self.inputs: List[int] = []  # row positions of the inputs
        self.outputs: List[int] = []  # row positions of the outputs
        self.forward_inputs: List[int] = []  # backward: the forward record's inputs
        self.forward_outputs: List[str] = []  # backward: the forward record's output slots
        self.skip = ""  # why this call cannot replay ("" when it can)
        self.generated = False  # its missing input tensors are generated from their statistics
        self.autocast = ""  # the low dtype the call computed in when it ran under autocast ("" otherwise)

    @property
    def key(self) -> str:
        """The name results use: the record, with the rank and step when the dump has several."""
        return self.record

    @property
    def forward_record(self) -> str:
        m = _RECORD.match(self.record)
        return "%s.%s.forward" % (m.group("base"), m.group("index")) if m else self.record


def short_api(record: str) -> Tuple[str, str]:
    """(prefix, short API name) of a record name: ``Functional.softmax.0.forward`` -> (Functional, softmax)."""
    m = _RECORD.match(record)
    base = m.group("base") if m else record
    prefix, _, api = base.partition(".")
    return prefix, api.rsplit(".", 1)[-1]


def random_primitive(name: str) -> bool:
    """A MindSpore primitive class name that draws random numbers (``StandardNormal``, ``DropoutGenMask``...)."""
    return name in _RANDOM_PRIMITIVES or any(word in name for word in _RANDOM_PRIMITIVE_WORDS)


def primitive_attrs_recorded(args_json: str) -> bool:
    """Whether a ``Primitive.*`` record's ``args`` carries the primitive's ``init_attrs`` (docs/FORMAT.md); dumps
    written before they were recorded do not."""
    if not args_json or '"primitive"' not in args_json:
        return False
    try:
        skel = json.loads(args_json)
    except ValueError:
        return False
    entry = skel.get("primitive") if isinstance(skel, dict) else None
    return isinstance(entry, dict) and isinstance(entry.get("init_attrs"), dict)


def skip_reason(prefix: str, api: str, args_json: str, live: bool = False) -> str:
    """Why a call is not replayed ("" when it is); ``live``: the call's own objects are at hand (the online check
    re-runs the primitive object itself, so its attributes need no record)."""
    if prefix in _COLLECTIVE_PREFIXES:
        return "collective: its result needs the other ranks"
    if prefix == "Primitive":
        if random_primitive(api):
            return "random op: the dump keeps no RNG state to replay it"
        if api in _NOT_COMPUTE_PRIMITIVES:
            return "not a computation (cast, copy or allocation)"
        if not live and not primitive_attrs_recorded(args_json):
            return "MindSpore primitive: its attributes (LayerNorm's epsilon and axes...) are not recorded"
        return ""
    if api in INPLACE_VIEWS:
        return "in-place view op: it changes a tensor's view, not its values"
    if api in NOT_COMPUTE:
        return "not a computation (cast, copy or allocation)"
    if api in RANDOM_APIS and not _deterministic_dropout(api, args_json):
        return "random op: the dump keeps no RNG state to replay it"
    return ""


def _deterministic_dropout(api: str, args_json: str) -> bool:
    """A dropout with p = 0 or training off draws nothing."""
    if "dropout" not in api or not args_json:
        return False
    try:
        skel = json.loads(args_json)
    except ValueError:
        return False
    kwargs = skel.get("kwargs") or {}
    args = skel.get("args") or []
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    training = kwargs.get("training", args[2] if len(args) > 2 else True)
    return (isinstance(p, (int, float)) and float(p) == 0.0) or training is False


def cases_of(table: RowTable, args: Dict[str, str], rank: int, step: int, backward: bool = True,
             generate: bool = False) -> Iterator[Case]:
    """The API calls of one (rank, step) piece in dump order, each with its rows and skip reason."""
    codes, records = table.record_codes()
    rows_of: Dict[str, np.ndarray] = {}
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(len(records) + 1))
    for i, rec in enumerate(records.tolist()):
        rows_of[rec] = order[bounds[i]:bounds[i + 1]]
    for rec in records.tolist():
        rows = rows_of[rec]
        if not len(rows) or int(table.kind[rows[0]]) != KIND_API:
            continue
        direction = int(table.direction[rows[0]])
        if direction not in (DIR_FORWARD, DIR_BACKWARD) or (direction == DIR_BACKWARD and not backward):
            continue
        prefix, api = short_api(rec)
        case = Case(rank, step, rec, api, "forward" if direction == DIR_FORWARD else "backward")
        case.inputs = [int(r) for r in rows if int(table.io[r]) == IO_INPUT]
        case.outputs = [int(r) for r in rows if int(table.io[r]) == IO_OUTPUT]
        if case.direction == "forward":
            case.args_json = args.get(rec) or rows_skeleton(table, case.inputs)
        else:
            fwd = rows_of.get(case.forward_record)
            if fwd is not None:
                case.args_json = args.get(case.forward_record) or rows_skeleton(
                    table, [int(r) for r in fwd if int(table.io[r]) == IO_INPUT])
                case.forward_inputs = [int(r) for r in fwd if int(table.io[r]) == IO_INPUT]
                case.forward_outputs = [str(table.slot[r]) for r in fwd if int(table.io[r]) == IO_OUTPUT]
        fwd_rows = rows if case.direction == "forward" else rows_of.get(case.forward_record, ())
        case.autocast = autocast_dtype(table, fwd_rows)
        case.skip = skip_reason(prefix, api, case.args_json) or _data_reason(table, case)
        if generate and case.skip.startswith(NOT_SAVED):
            if case.direction == "forward":
                case.skip, case.generated = "", True
            else:
                case.skip = "the dump saved no tensors (statistics): a backward is not replayed from generated inputs"
        yield case


_LOW = ("torch.float16", "torch.bfloat16")
_WIDE = ("torch.float32", "torch.float64")


def autocast_dtype(table: RowTable, rows: Any) -> str:
    """The low dtype of a call that ran under autocast: float32/64 inputs and only float16/bfloat16 floating
    outputs (autocast cast the inputs down before the kernel); "" for any other call."""
    ins = {str(table.dtype[r]) for r in rows if int(table.io[r]) == IO_INPUT and bool(table.is_tensor[r])}
    outs = {str(table.dtype[r]) for r in rows if int(table.io[r]) == IO_OUTPUT and bool(table.is_tensor[r])
            and "float" in str(table.dtype[r])}
    if len(outs) == 1 and next(iter(outs)) in _LOW and ins & set(_WIDE):
        return next(iter(outs))
    return ""


def _data_reason(table: RowTable, case: Case) -> str:
    """Why the saved data does not allow a replay ("" when it does)."""
    needed = case.inputs if case.direction == "forward" else case.forward_inputs + case.inputs
    if case.direction == "backward":
        if not case.forward_inputs and not case.args_json:
            return "backward without its forward record in the dump"
        if any(str(table.slot[r]).startswith("output.") is False and str(table.slot[r]).startswith("input.") is False
               for r in case.outputs):
            return "backward gradients of parameters are not replayed"
        if not case.outputs:
            return "the backward record keeps no gradients"
    missing = [str(table.slot[r]) for r in needed if bool(table.is_tensor[r]) and int(table.data[r]) < 0]
    if not missing and not any(int(table.data[r]) >= 0 or not bool(table.is_tensor[r]) for r in case.outputs):
        missing = [str(table.slot[r]) for r in case.outputs]
    if missing:
        return NOT_SAVED + ", ".join(missing[:4])
    if not case.outputs:
        return "the record keeps no output"
    return ""


# -- the arguments of a dump without args JSON (msprobe's) --------------------------------------------------------
def rows_skeleton(table: RowTable, inputs: List[int]) -> str:
    """An ``args`` skeleton built from a record's input rows (``input.0``, ``input.1.0``, ``input.dim``)."""
    args: Dict[int, Any] = {}
    kwargs: Dict[str, Any] = {}
    for r in inputs:
        slot = str(table.slot[r])
        parts = slot.split(".")[1:]
        if not parts:
            continue
        value = _row_value(table, r, slot)
        head, rest = parts[0], parts[1:]
        if head.isdigit():
            args[int(head)] = _nest(args.get(int(head)), rest, value)
        else:
            kwargs[head] = _nest(kwargs.get(head), rest, value)
    positional = [args.get(i) for i in range(max(args) + 1)] if args else []
    return json.dumps({"args": positional, "kwargs": kwargs})


def _nest(container: Any, path: List[str], value: Any) -> Any:
    if not path:
        return value
    items = container if isinstance(container, list) else []
    i = int(path[0]) if path[0].isdigit() else len(items)
    while len(items) <= i:
        items.append(None)
    items[i] = _nest(items[i], path[1:], value)
    return items


def _row_value(table: RowTable, r: int, slot: str) -> Any:
    if bool(table.is_tensor[r]):
        return {"tensor": slot}
    kind = str(table.dtype[r])
    text = table.text[r]
    number = float(table.max[r])
    if "bool" in kind:
        return str(text) == "True" if text is not None else bool(number)
    if "int" in kind and not math.isnan(number):
        return int(number)
    if "float" in kind and "torch" not in kind:
        return number
    if kind == "slice" and text is not None:
        try:
            return {"type": "slice", "value": json.loads(str(text).replace("None", "null"))}
        except ValueError:
            return None
    if "dtype" in kind and text is not None:
        return {"type": "torch.dtype", "value": str(text)}
    if text is None or str(text) == "None":
        return None
    return str(text)


def device_value(table: RowTable, r: int) -> Any:
    """The recorded value of a non-tensor output row."""
    value = _row_value(table, r, str(table.slot[r]))
    return value


def tensor_dtype_name(table: RowTable, r: int) -> str:
    """The row's dtype as the results name it: ``torch.float32`` (msprobe writes that too), MindSpore's
    ``Float32`` as ``mindspore.float32``."""
    return dtype_name(str(table.dtype[r]))


def dtype_name(d: str) -> str:
    if d.startswith(("torch.", "mindspore.")):
        return d
    if d[:1].isupper():  # MindSpore's Float32, BFloat16, Int64, Bool
        return "mindspore." + d.lower()
    low = d.lower()
    return "torch." + {"float": "float32", "half": "float16"}.get(low, low)


def backward_pairs(case: Case, table: RowTable) -> Tuple[Dict[str, int], Dict[str, int]]:
    """Backward case: ({forward output slot: row of the gradient flowing into it}, {forward input slot: row of
    its recorded gradient})."""
    grads_in = {"output." + str(table.slot[r]).split(".", 1)[1]: r for r in case.inputs
                if bool(table.is_tensor[r]) and int(table.data[r]) >= 0}
    grads_out = {"input." + str(table.slot[r]).split(".", 1)[1]: r for r in case.outputs
                 if bool(table.is_tensor[r]) and int(table.data[r]) >= 0}
    return grads_in, grads_out

