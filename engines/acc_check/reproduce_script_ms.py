"""The text of a MindSpore reproduction script (``probe-tui reproduce`` on a MindSpore dump): a self-contained
Python file that needs only mindspore and numpy. It loads the call's inputs from the ``.npz`` beside it, runs the
call on the device under test (``--device CPU|GPU|Ascend``) in the recorded dtypes and on the CPU reference
(float64 for float32 inputs, float32 for float16/bfloat16; float32 when the call has no float64 kernel), and prints
the metrics of each output against the reference, and of the recorded output when the dump kept it. MindSpore
runs one device target per process, so with a device other than the CPU the reference is computed by the same
script in a child process (``--reference-to``). ``{CALL}``, ``{ARGS}``, ``{NAME}``, ``{NPZ}``, ``{SETUP}`` and
``{NOTE}`` are filled in by ``engines.acc_check.reproduce``.
"""

TEMPLATE = r'''"""Reproduce {NAME}: run it on the device under test and on the CPU reference, print the errors.

Written by probe-tui reproduce; needs mindspore and numpy only. Inputs: {NPZ} (beside this file).

    python {SCRIPT} [--device CPU|GPU|Ascend]
{NOTE}"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import mindspore
import mindspore as ms
import mindspore.mint.nn.functional  # noqa: F401  (mindspore.mint.nn.functional.* calls)
import numpy as np
{SETUP}
NAME = {NAME_REPR}
ARGS = json.loads({ARGS})  # the recorded call: tensors as {{"tensor": slot}}, the rest as recorded
HERE = os.path.dirname(os.path.abspath(__file__))
FLOATS = (ms.float16, ms.bfloat16, ms.float32, ms.float64)
BITS = {{"float16": (10, -14, 1.0), "bfloat16": (7, -126, 1.0), "float32": (23, -126, 32.0)}}


def call(*args, **kwargs):
    return {CALL}(*args, **kwargs)


def dtype_of(name):
    return getattr(ms, {{"bool": "bool_"}}.get(name.split(".")[-1], name.split(".")[-1]))


def load_tensors():
    data = np.load(os.path.join(HERE, {NPZ_REPR}))
    out = {{}}
    for slot, dtype in json.loads(str(data["__dtypes__"]))["inputs"].items():
        out[slot] = ms.Tensor(np.ascontiguousarray(data[slot])).astype(dtype_of(dtype))
    return out


def decode(obj, tensors, high=None):
    if isinstance(obj, list):
        return [decode(v, tensors, high) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if set(obj) == {{"tensor"}}:
        t = tensors[obj["tensor"]]
        return t.astype(high) if high is not None and t.dtype in FLOATS else t
    kind, value = obj.get("type"), obj.get("value")
    if kind == "float":
        return float(value)
    if kind == "slice":
        return slice(*[decode(v, tensors, high) for v in value])
    if kind == "ellipsis":
        return Ellipsis
    if kind == "complex":
        return complex(value[0], value[1])
    if kind == "mindspore.dtype":
        found = dtype_of(str(value).lower())
        return high if high is not None and found in FLOATS else found
    if kind is not None:
        return value
    return {{k: decode(v, tensors, high) for k, v in obj.items()}}


def run(tensors, high=None):
    args = decode(ARGS.get("args") or [], tensors, high)
    kwargs = decode(ARGS.get("kwargs") or {{}}, tensors, high)
    if kwargs.get("inplace") is True:
        kwargs["inplace"] = False
    return call(*args, **kwargs)


def flatten(out, prefix="output"):
    if isinstance(out, (list, tuple)):
        items = []
        for i, v in enumerate(out):
            items.extend(flatten(v, "%s.%d" % (prefix, i)) if isinstance(v, (list, tuple)) else
                         [("%s.%d" % (prefix, i), v)])
        return items
    return [(prefix + ".0", out)]


def as_array(value):
    if isinstance(value, ms.Tensor):
        name = str(value.dtype).lower()
        if value.dtype in (ms.float16, ms.bfloat16):
            value = value.astype(ms.float32)
        return value.asnumpy(), name
    return value, None


def metrics(device, dtype, bench, bench_dtype):
    n = np.asarray(device, dtype=np.float64).reshape(-1)
    b = np.asarray(bench, dtype=np.float64).reshape(-1)
    if n.size == 0 or n.shape != b.shape:
        return {{"shape": (list(np.shape(device)), list(np.shape(bench)))}}
    err = np.abs(n - b)
    eps = 2.0 ** -52 if bench_dtype == "float64" else 2.0 ** -23
    rel = err / (np.abs(b) + eps)
    out = {{"max_abs_err": float(err.max()), "max_rel_err": float(rel.max()), "mean_rel_err": float(rel.mean()),
           "thousandth_ratio": float((rel < 1e-3).mean())}}
    if np.linalg.norm(n) > 0 and np.linalg.norm(b) > 0:
        out["cosine"] = float(np.dot(n, b) / (np.linalg.norm(n) * np.linalg.norm(b)))
    if dtype in BITS:
        mantissa, low, limit = BITS[dtype]
        with np.errstate(divide="ignore"):
            exp = np.where(b == 0, 0.0, np.floor(np.log2(np.abs(b))))
        ulp = err * np.power(2.0, mantissa - np.maximum(exp, low))
        out["max_ulp_err"] = float(ulp.max())
        out["ulp_err_above_%g" % limit] = float((ulp > limit).mean())
    return out


def reference():
    """({{slot: array}}, reference dtype) on this process's device (the CPU)."""
    tensors = load_tensors()
    floats = [t.dtype for t in tensors.values() if t.dtype in FLOATS]
    high = ms.float32 if any(d in (ms.float16, ms.bfloat16) for d in floats) else ms.float64
    try:
        out = run(tensors, high)
    except Exception:
        if high == ms.float32:
            raise
        high = ms.float32  # no float64 kernel for this call in this MindSpore
        out = run(tensors, high)
    return {{slot: as_array(v)[0] for slot, v in flatten(out)}}, str(high).lower()


def main():
    parser = argparse.ArgumentParser(description="Reproduce " + NAME)
    parser.add_argument("--device", default="CPU", help="device under test: CPU, GPU or Ascend (default CPU)")
    parser.add_argument("--reference-to", help=argparse.SUPPRESS)
    parser.add_argument("--reference-in-child", action="store_true", help=argparse.SUPPRESS)  # as with GPU/Ascend
    options = parser.parse_args()
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target=options.device)
    if options.reference_to:
        values, high = reference()
        np.savez(options.reference_to, __dtype__=np.array(high), **values)
        return
    tested = dict(flatten(run(load_tensors())))
    if options.device.upper() == "CPU" and not options.reference_in_child:
        bench, high = reference()
    else:  # one device target per process: the CPU reference runs in a child
        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "reference.npz")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--device", "CPU", "--reference-to", path],
                       check=True)
        data = np.load(path)
        bench = {{k: data[k] for k in data.files if k != "__dtype__"}}
        high = str(data["__dtype__"])
    data = np.load(os.path.join(HERE, {NPZ_REPR}))
    recorded = json.loads(str(data["__dtypes__"]))["outputs"]
    print("%s on %s, reference on cpu in %s" % (NAME, options.device, high))
    for slot, value in bench.items():
        got, dtype = as_array(tested.get(slot))
        if dtype is None:
            print("  %s: %r (device: %r)" % (slot, value, got))
            continue
        print("  %s %s %s" % (slot, dtype, list(np.shape(value))))
        print("    device vs reference:   %s" % json.dumps(metrics(got, dtype, value, high)))
        if slot in recorded:
            print("    recorded vs reference: %s" % json.dumps(metrics(data[slot], dtype, value, high)))


if __name__ == "__main__":
    main()
'''
