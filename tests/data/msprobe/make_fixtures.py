"""Regenerate the msprobe-format fixtures in this folder (run from the repository root).

They follow msprobe's layout (docs/reference/msprobe-analysis.md §1.4, docs/reference/msprobe-tasks.md §4): ``step<N>/rank<R>/dump.json``,
``stack.json``, ``construct.json`` and ``dump_tensor_data/<name>.npy``; the values are those of docs/reference/msprobe-analysis.md §8.3.
"""

import json
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def tensor_leaf(arr, data_name=None, requires_grad=False):
    leaf = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(arr.shape),
            "Max": float(arr.max()), "Min": float(arr.min()), "Mean": float(arr.mean()),
            "Norm": float(np.linalg.norm(arr.astype(np.float64))), "requires_grad": requires_grad,
            "md5": "{:08x}".format(zlib.crc32(np.ascontiguousarray(arr).tobytes()))}
    if data_name:
        leaf["data_name"] = data_name
    return leaf


def write_side(root: Path, outputs, task="tensor"):
    rank_dir = root / "step0" / "rank0"
    tensor_dir = rank_dir / "dump_tensor_data"
    tensor_dir.mkdir(parents=True, exist_ok=True)
    data = {}
    stack = {}
    x = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    for k, (api, out) in enumerate(outputs.items()):
        name = "Functional.{}.0.forward".format(api)
        entry = {"input_args": [], "input_kwargs": {}, "output": []}
        for slot, arr in (("input.0", x), ("output.0", out)):
            fname = "{}.{}.npy".format(name, slot)
            if task == "tensor":
                np.save(tensor_dir / fname, arr)
            leaf = tensor_leaf(arr, fname if task == "tensor" else None)
            (entry["input_args"] if slot.startswith("input") else entry["output"]).append(leaf)
        data[name] = entry
        stack[str(k)] = [[name], ["File model.py, line {}, in forward, \n y = {}(x)".format(10 + k, api)]]
    dump = {"task": task, "level": "L1", "framework": "pytorch", "dump_data_dir": None, "data": data}
    (rank_dir / "dump.json").write_text(json.dumps(dump, indent=1))
    (rank_dir / "stack.json").write_text(json.dumps(stack, indent=1))
    (rank_dir / "construct.json").write_text("{}")


def main():
    f = np.float32
    npu = {"relu": np.array([1, 2, 3, 4], f), "matmul": np.array([10, 20, 30, 40], f),
           "softmax": np.array([.1, .2, .3, .4], f)}
    bench = {"relu": np.array([1, 2, 3, 4], f), "matmul": np.array([10, 20, 30, 48], f),
             "softmax": np.array([.4, .3, .2, .1], f)}
    write_side(HERE / "e2e_83" / "npu", npu)
    write_side(HERE / "e2e_83" / "bench", bench)


if __name__ == "__main__":
    main()
