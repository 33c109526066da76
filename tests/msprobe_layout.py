"""A test helper: our dump's rows written in msprobe 26.2's dump.json layout, with msprobe's backward slot order
(PyTorch): the gradients its hook on the output's ``grad_fn`` receives, in that node's order — ``linear`` on a
2-D input (db, dx, dwᵀ), on a 3-D input one gradient (the view's: the output gradient as [B*T, out]);
``cross_entropy`` the gradient at nll_loss (another quantity: written here as a scaled copy); any other API one
gradient per float tensor argument in argument order (positional, then keyword), None where it has none. Tensors and scalars only at the
top level of a slot (the demo has nothing nested)."""

import json
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List

from engines.dumps.opener import open_dump


def _leaf(rows, i) -> Any:
    if not rows.is_tensor[i]:
        if rows.text[i] is not None:
            return {"type": "str", "value": rows.text[i]}
        value = float(rows.max[i])
        return {"type": "int" if "int" in str(rows.dtype[i]) else "float",
                "value": int(value) if "int" in str(rows.dtype[i]) else value}
    stats = {}
    integer = "int" in str(rows.dtype[i])  # msprobe 26.2 leaves an integer tensor's Mean and Norm empty
    for key, column, bit in (("Max", "max", 1), ("Min", "min", 2), ("Mean", "mean", 4), ("Norm", "norm", 8)):
        known = int(rows.valid[i]) & bit and not (integer and key in ("Mean", "Norm"))
        stats[key] = float(getattr(rows, column)[i]) if known else None
    return {"type": "torch.Tensor", "dtype": str(rows.dtype[i]), "shape": json.loads(rows.shape[i]), **stats,
            "requires_grad": bool(rows.requires_grad[i] == 1)}


def _float(leaf: Any) -> bool:
    return isinstance(leaf, dict) and leaf.get("type") == "torch.Tensor" and "float" in leaf["dtype"]


def _msprobe_outputs(api: str, grads: Dict[str, Any], inputs: List[Any], grad_out: Any) -> List[Any]:
    """``inputs``: (our slot key, leaf) of the forward arguments, positional then keyword."""
    args = [leaf for _, leaf in inputs]
    if api == "linear" and args and _float(args[0]) and len(args[0]["shape"]) == 2:
        order = ["output.2", "output.0", "output.1"] if len(args) > 2 and _float(args[2]) else \
            ["output.0", "output.1"]
        out = [grads.get(slot) for slot in order]
        dw = out[-1]
        if dw is not None:
            out[-1] = dict(dw, shape=list(reversed(dw["shape"])))
        return out
    if api == "linear" and grad_out is not None:
        shape = grad_out["shape"]
        rows = 1
        for d in shape[:-1]:
            rows *= d
        return [dict(grad_out, shape=[rows, shape[-1]])]
    if api == "cross_entropy":
        g = grads.get("output.0")
        return [dict(g, Max=g["Max"] * 3 + 1, Mean=g["Mean"] * 3 + 1)] if g else []
    return [grads.get("output." + key) for key, leaf in inputs if _float(leaf)]


def write_msprobe_dump(run: str, out: Path) -> Path:
    """``run`` (one of our statistics runs, rank 0 step 0) as ``out/step0/rank0/dump.json``."""
    rows = open_dump(run).rows(0, 0)
    records: "OrderedDict[str, Dict[str, Dict[str, Any]]]" = OrderedDict()
    for i, record in enumerate(rows.record.tolist()):
        records.setdefault(record, {})[str(rows.slot[i])] = _leaf(rows, i)
    data: Dict[str, Any] = {}
    forward_inputs: Dict[str, List[Any]] = {}
    for record, slots in records.items():
        parts = record.split(".")
        positional = sorted((int(s.split(".")[1]), v) for s, v in slots.items()
                            if s.startswith("input.") and s.split(".")[1].isdigit() and s.count(".") == 1)
        args = [None] * (max(p for p, _ in positional) + 1 if positional else 0)
        for p, v in positional:
            args[p] = v
        kwargs = {s.split(".", 1)[1]: v for s, v in slots.items()
                  if s.startswith("input.") and not s.split(".")[1].isdigit() and s.count(".") == 1}
        outputs = [v for s, v in sorted(slots.items()) if s.startswith("output.") and s.count(".") == 1]
        if record.endswith(".forward") and parts[0] != "Module":
            forward_inputs[record] = [(str(i), v) for i, v in enumerate(args)] + list(kwargs.items())
            data[record] = {"input_args": args, "input_kwargs": kwargs, "output": outputs}
        elif record.endswith(".backward") and parts[0] != "Module":
            inputs = forward_inputs.get(record[:-len("backward")] + "forward", [])
            grads = {s: v for s, v in slots.items() if s.startswith("output.")}
            data[record] = {"input": args, "output": _msprobe_outputs(parts[1], grads, inputs, slots.get("input.0"))}
        else:
            data[record] = {"input_args": args, "input_kwargs": kwargs, "output": outputs}
    folder = out / "step0" / "rank0"
    folder.mkdir(parents=True)
    (folder / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                  "dump_data_dir": None, "data": data}))
    return out
