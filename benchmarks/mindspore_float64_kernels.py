"""Which MindSpore calls lack a float64 CPU kernel: the measurement behind acc_check's float32 fallback on
MindSpore dumps (docs/ACC_CHECK.md, "MindSpore").

    python benchmarks/mindspore_float64_kernels.py

Every compute callable of the capture's API table (``engines/adapters/mindspore/replay_table.py``; random ops,
collectives and the demo's operators aside) is called on one (4, 6) tensor in [0.1, 0.9], in float32 and in
float64, on the CPU. Prints how many run in both, and those that run in float32 but not in float64 (with
MindSpore's one-line reason). Calls needing more than one argument fail in both dtypes and are not counted.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mindspore as ms  # noqa: E402
import numpy as np  # noqa: E402
from mindspore import Tensor  # noqa: E402

from engines.adapters.mindspore import replay_table  # noqa: E402

_RANDOM = ("rand", "normal", "uniform", "bernoulli", "multinomial", "poisson", "dropout", "shuffle")


def _runs(func, x: np.ndarray) -> str:
    try:
        func(Tensor(x))
        return ""
    except Exception as exc:
        text = str(exc).strip()
        return "%s: %s" % (type(exc).__name__, text.splitlines()[0][:120] if text else "")


def main() -> None:
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    base = np.random.default_rng(0).uniform(0.1, 0.9, size=(4, 6))
    both, float32_only = [], {}
    for (prefix, api), _ in sorted(replay_table._named_callables().items()):
        if prefix in ("Distributed", "MintDistributed", "Demo") or any(r in api for r in _RANDOM):
            continue
        try:
            func = replay_table.resolve(prefix, api)
        except replay_table.NotReplayable:
            continue
        if _runs(func, base.astype(np.float32)):
            continue
        why = _runs(func, base)
        if why:
            float32_only["%s.%s" % (prefix, api)] = why
        else:
            both.append("%s.%s" % (prefix, api))
    print(json.dumps({"mindspore": ms.__version__, "float32_and_float64": len(both),
                      "float32_only": float32_only}, indent=1))


if __name__ == "__main__":
    main()
