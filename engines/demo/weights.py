"""Seed-generated initial weights of the demo model, framework-neutral.

Both the PyTorch build and a MindSpore build of the same architecture load these arrays, so two runs on
different frameworks start from bit-identical weights. Every parameter draws from its own numpy stream keyed
by ``(seed, crc32(name))``, so a parameter's values do not depend on which other parameters exist.

Names are the PyTorch module paths of the demo (``blocks.0.attn.qkv.weight``). Linear weights are stored
``(out_features, in_features)``, the layout of both ``torch.nn.Linear`` and MindSpore's ``nn.Dense``.
Initialisation follows GPT-2: normal(0, 0.02) for embeddings and linear weights, the residual projections
(``attn.proj``, ``mlp.fc2``) scaled by 1/sqrt(2 * n_layer), zero biases, LayerNorm weight 1 and bias 0.
"""

import math
import zlib
from typing import Any, Dict, List, Tuple

import numpy as np

from engines.demo.knobs import resolve_knobs

INIT_STD = 0.02

# (name, shape, init): init is "normal", "normal_residual", "zeros" or "ones".
ParamSpec = Tuple[str, Tuple[int, ...], str]


def _linear(prefix: str, n_in: int, n_out: int, residual: bool = False) -> List[ParamSpec]:
    return [
        (f"{prefix}.weight", (n_out, n_in), "normal_residual" if residual else "normal"),
        (f"{prefix}.bias", (n_out,), "zeros"),
    ]


def _layer_norm(prefix: str, d: int) -> List[ParamSpec]:
    return [(f"{prefix}.weight", (d,), "ones"), (f"{prefix}.bias", (d,), "zeros")]


def param_specs(knobs: Any) -> List[ParamSpec]:
    """Every parameter of the demo model in module order (the order of ``named_parameters()``)."""
    knobs = resolve_knobs(knobs)
    d = knobs.d_model
    specs: List[ParamSpec] = [
        ("tok_emb.weight", (knobs.vocab, d), "normal"),
        ("pos_emb.weight", (knobs.seq, d), "normal"),
    ]
    for i in range(knobs.n_layer):
        block = f"blocks.{i}"
        specs += _layer_norm(f"{block}.ln1", d)
        specs += _linear(f"{block}.attn.qkv", d, 3 * d)
        specs += _linear(f"{block}.attn.proj", d, d, residual=True)
        specs += _layer_norm(f"{block}.ln2", d)
        specs += _linear(f"{block}.mlp.fc1", d, knobs.d_mlp)
        specs += _linear(f"{block}.mlp.fc2", knobs.d_mlp, d, residual=True)
    specs += _layer_norm("ln_f", d)
    specs += _linear("head", d, knobs.vocab)
    return specs


def parameter_count(knobs: Any) -> int:
    return sum(int(np.prod(shape)) for _, shape, _ in param_specs(knobs))


def _stream(seed: int, name: str) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, zlib.crc32(name.encode())])))


def initial_weights(knobs: Any) -> Dict[str, np.ndarray]:
    """Float32 arrays for every parameter, a pure function of the seed and the sizes (knobs: dict or DemoKnobs)."""
    knobs = resolve_knobs(knobs)
    residual_std = INIT_STD / math.sqrt(2 * knobs.n_layer)
    out: Dict[str, np.ndarray] = {}
    for name, shape, init in param_specs(knobs):
        if init == "zeros":
            out[name] = np.zeros(shape, dtype=np.float32)
        elif init == "ones":
            out[name] = np.ones(shape, dtype=np.float32)
        else:
            std = residual_std if init == "normal_residual" else INIT_STD
            out[name] = (_stream(knobs.seed, name).standard_normal(shape) * std).astype(np.float32)
    return out
