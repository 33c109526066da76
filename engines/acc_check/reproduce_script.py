"""The text of a reproduction script (``probe-tui reproduce``): a self-contained Python file that needs only torch
and numpy. It loads the call's inputs from the ``.npz`` beside it, runs the call on the device under test in the
recorded dtypes and on the CPU reference (float64 for float32 inputs, float32 for float16/bfloat16), and prints
the metrics of each output: against the reference, and the recorded output against the reference when the dump
kept it. ``{CALL}``, ``{ARGS}``, ``{NAME}``, ``{NPZ}``, ``{SETUP}`` and ``{NOTE}`` are filled in by ``engines.acc_check.reproduce``.
"""

TEMPLATE = r'''"""Reproduce {NAME}: run it on the device under test and on the CPU reference, print the errors.

Written by probe-tui reproduce; needs torch and numpy only. Inputs: {NPZ} (beside this file).

    python {SCRIPT} [--device cpu|cuda|npu:0]
{NOTE}"""

import argparse
import json
import os

import numpy as np
import torch
{SETUP}
NAME = {NAME_REPR}
ARGS = json.loads({ARGS})  # the recorded call: tensors as {{"tensor": slot}}, the rest as recorded
HERE = os.path.dirname(os.path.abspath(__file__))


def call(*args, **kwargs):
    return {CALL}(*args, **kwargs)


def load_tensors(device):
    data = np.load(os.path.join(HERE, {NPZ_REPR}))
    dtypes = json.loads(str(data["__dtypes__"]))["inputs"]
    out = {{}}
    for slot, dtype in dtypes.items():
        t = torch.from_numpy(np.ascontiguousarray(data[slot])).to(getattr(torch, dtype.split(".")[-1]))
        out[slot] = t.to(device)
    return out


def decode(obj, tensors, high=None):
    if isinstance(obj, list):
        return [decode(v, tensors, high) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if set(obj) == {{"tensor"}}:
        t = tensors[obj["tensor"]].clone()
        return t.to(high) if high is not None and t.is_floating_point() else t
    kind, value = obj.get("type"), obj.get("value")
    if kind == "float":
        return float(value)
    if kind == "slice":
        return slice(*[decode(v, tensors, high) for v in value])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "complex":
        return complex(value[0], value[1])
    if kind in ("torch.dtype", "torch.memory_format"):
        found = getattr(torch, str(value).split(".")[-1])
        return high if high is not None and isinstance(found, torch.dtype) and found.is_floating_point else found
    if kind == "torch.device":
        return torch.device(value)
    if kind == "torch.Size":
        return torch.Size(value)
    if kind is not None:
        return value
    return {{k: decode(v, tensors, high) for k, v in obj.items()}}


def run(tensors, high=None):
    args = decode(ARGS.get("args") or [], tensors, high)
    kwargs = decode(ARGS.get("kwargs") or {{}}, tensors, high)
    kwargs.pop("out", None)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    if NAME.split(".")[1:2] == ["__getitem__"] and len(args) > 1 and isinstance(args[1], list):
        args[1] = tuple(args[1])
    with torch.no_grad():
        return call(*args, **kwargs)


def flatten(out, prefix="output"):
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Size):
        items = []
        for i, v in enumerate(out):
            items.extend(flatten(v, "%s.%d" % (prefix, i)) if isinstance(v, (list, tuple)) else
                         [("%s.%d" % (prefix, i), v)])
        return items
    return [(prefix + ".0", out)]


def metrics(device, bench):
    n = device.detach().cpu().double().reshape(-1)
    b = bench.detach().cpu().double().reshape(-1)
    if n.numel() == 0 or n.shape != b.shape:
        return {{"shape": (list(device.shape), list(bench.shape))}}
    err = (n - b).abs()
    rel = err / (b.abs() + torch.finfo(bench.dtype).eps)
    out = {{"max_abs_err": float(err.max()), "max_rel_err": float(rel.max()), "mean_rel_err": float(rel.mean()),
           "thousandth_ratio": float((rel < 1e-3).double().mean())}}
    if n.norm() > 0 and b.norm() > 0:
        out["cosine"] = float(torch.dot(n, b) / (n.norm() * b.norm()))
    if device.dtype in (torch.float16, torch.bfloat16, torch.float32):
        bits = {{torch.float16: (10, -14), torch.bfloat16: (7, -126), torch.float32: (23, -126)}}[device.dtype]
        exp = torch.where(b == 0, torch.zeros_like(b), torch.floor(torch.log2(b.abs()))).clamp(min=bits[1])
        ulp = (n - b).abs() * torch.pow(2.0, bits[0] - exp)
        limit = 32.0 if device.dtype == torch.float32 else 1.0
        out["max_ulp_err"] = float(ulp.max())
        out["ulp_err_above_%g" % limit] = float((ulp > limit).double().mean())
    return out


def main():
    parser = argparse.ArgumentParser(description="Reproduce " + NAME)
    default = "cuda" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--device", default=default, help="device under test (default %(default)s)")
    device = parser.parse_args().device
    if device.startswith("npu"):
        import torch_npu  # noqa: F401
    on_device = load_tensors(device)
    floats = [t.dtype for t in on_device.values() if t.is_floating_point()]
    high = torch.float32 if any(d in (torch.float16, torch.bfloat16) for d in floats) else torch.float64
    tested = dict(flatten(run(on_device)))
    reference = dict(flatten(run(load_tensors("cpu"), high)))
    recorded = {{}}
    data = np.load(os.path.join(HERE, {NPZ_REPR}))
    for key, dtype in json.loads(str(data["__dtypes__"]))["outputs"].items():
        recorded[key] = torch.from_numpy(data[key]).to(getattr(torch, dtype.split(".")[-1]))
    print("%s on %s, reference on cpu in %s" % (NAME, device, str(high).replace("torch.", "")))
    for slot, value in reference.items():
        if not isinstance(value, torch.Tensor):
            print("  %s: %r (device: %r)" % (slot, value, tested.get(slot)))
            continue
        print("  %s %s %s" % (slot, str(tested[slot].dtype).replace("torch.", ""), list(value.shape)))
        print("    device vs reference:   %s" % json.dumps(metrics(tested[slot], value)))
        if slot in recorded:
            print("    recorded vs reference: %s" % json.dumps(metrics(recorded[slot], value)))


if __name__ == "__main__":
    main()
'''
