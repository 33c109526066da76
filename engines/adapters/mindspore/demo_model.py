"""The demo model in MindSpore (PyNative): the PyTorch demo's architecture, cell for module, name for name.

Cell paths, class names and parameter names are those of ``engines.adapters.torch.demo_model``
(``blocks.0.attn.qkv`` is a ``Linear`` with ``weight`` and ``bias``), so a MindSpore dump's ``Cell.…`` records
map onto the PyTorch dump's ``Module.…`` records with no mapping file, and both builds start from the same
``engines.demo.weights.initial_weights`` arrays. The layers are small cells of our own rather than ``nn.Dense`` /
``nn.LayerNorm`` / ``nn.Embedding`` because those name their parameters ``gamma``/``beta``/``embedding_table``.

Each op is the MindSpore call nearest to the PyTorch one that has a CPU kernel in MindSpore 2.10
(``mint.nn.functional.linear``/``softmax``/``dropout``, ``Tensor`` methods, ``@``); where ``mint`` has none on the
CPU (layer norm, embedding, gelu, cross-entropy), the ``ops``/primitive equivalent is used, as msprobe's own
baseline model did. The faults of ``engines.demo.faults`` are wired in with the same numeric effects.
"""

import math
from typing import Any, Dict, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, mint, nn, ops
from mindspore.mint.nn import functional as MF

from engines.adapters.mindspore import demo_ops
from engines.demo.faults import FP16_OVERFLOW_SCALE, FaultSchedule
from engines.demo.knobs import DemoKnobs
from engines.demo.weights import initial_weights

COMPUTE_DTYPES = {"fp16": ms.float16, "bf16": ms.bfloat16}


def _zeros(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, dtype=np.float32))


class Linear(nn.Cell):
    """``y = x W^T + b`` with ``weight (out, in)`` and ``bias (out,)``; ``compute_dtype`` casts like autocast."""

    def __init__(self, n_in: int, n_out: int, compute_dtype: Any = None) -> None:
        super().__init__()
        self.weight = Parameter(_zeros(n_out, n_in), name="weight")
        self.bias = Parameter(_zeros(n_out), name="bias")
        self.compute_dtype = compute_dtype

    def construct(self, x: Tensor) -> Tensor:
        if self.compute_dtype is None:
            return MF.linear(x, self.weight, self.bias)
        dt = self.compute_dtype
        return MF.linear(x.astype(dt), self.weight.astype(dt), self.bias.astype(dt))


class LayerNorm(nn.Cell):
    """Layer norm over the last dim (the LayerNorm primitive: ``mint``'s layer_norm has no CPU kernel)."""

    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.ones((d,), dtype=np.float32)), name="weight")
        self.bias = Parameter(_zeros(d), name="bias")
        self.eps = eps
        self.norm = ops.LayerNorm(begin_norm_axis=-1, begin_params_axis=-1, epsilon=eps)

    def construct(self, x: Tensor) -> Tensor:
        weight, bias = self.weight, self.bias
        if x.dtype != weight.dtype:
            weight, bias = weight.astype(x.dtype), bias.astype(x.dtype)
        y, _, _ = self.norm(x, weight, bias)
        return y


class Embedding(nn.Cell):
    """A lookup table ``weight (num, dim)`` (a gather: ``mint``'s embedding has no CPU kernel)."""

    def __init__(self, num: int, dim: int) -> None:
        super().__init__()
        self.weight = Parameter(_zeros(num, dim), name="weight")

    def construct(self, ids: Tensor) -> Tensor:
        return ops.gather(self.weight, ids, 0)


class Dropout(nn.Cell):
    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def construct(self, x: Tensor) -> Tensor:
        return MF.dropout(x, p=self.p, training=self.training)


def lowp_softmax(scores: Tensor) -> Tensor:
    """The lowp_softmax fault: exp, sum and division in bfloat16, without subtracting the row maximum.

    One operator (``Demo.naive_softmax``, as in the PyTorch demo) that computes in its input's precision, fed
    bfloat16; re-run in float32 (free_benchmark's improve_precision) it is accurate.
    """
    return demo_ops.naive_softmax(scores.to(ms.bfloat16)).to(scores.dtype)


def fp16_overflow_softmax(logits: Tensor, mask: Tensor) -> Tensor:
    """The fp16_overflow fault: ``exp`` of the float16 logits x FP16_OVERFLOW_SCALE is the first op giving inf."""
    scaled = (logits * FP16_OVERFLOW_SCALE).astype(ms.float16)
    e = mint.exp(scaled)
    e = e.masked_fill(mask, 0.0)
    return (e / e.sum(-1, keepdim=True)).astype(logits.dtype)


class CausalSelfAttention(nn.Cell):
    def __init__(self, knobs: DemoKnobs, layer: int, schedule: FaultSchedule, compute_dtype: Any = None) -> None:
        super().__init__()
        self.layer = layer
        self.schedule = schedule
        self.n_head = knobs.n_head
        self.head_dim = knobs.head_dim
        self.qkv = Linear(knobs.d_model, 3 * knobs.d_model, compute_dtype)
        self.proj = Linear(knobs.d_model, knobs.d_model, compute_dtype)
        self.dropout = Dropout(0.0)
        self.causal = Tensor(np.triu(np.ones((knobs.seq, knobs.seq), dtype=np.bool_), k=1))
        # graph mode compiles ``Tensor.transpose`` as a full permutation; PyNative's is PyTorch's (dim0, dim1)
        self.graph = ms.get_context("mode") == ms.GRAPH_MODE

    def swap(self, x: Tensor, dim0: int, dim1: int) -> Tensor:
        if self.graph:
            return mint.transpose(x, dim0, dim1)
        return x.transpose(dim0, dim1)

    def split(self, x: Tensor, size: int) -> Tuple[Tensor, ...]:
        if self.graph:
            return ops.split(x, size, 2)
        return x.split(size, dim=2)

    def logits(self, x: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        b, t, c = x.shape
        q, k, v = self.split(self.qkv(x), c)
        q = self.swap(q.view(b, t, self.n_head, self.head_dim), 1, 2)
        k = self.swap(k.view(b, t, self.n_head, self.head_dim), 1, 2)
        v = self.swap(v.view(b, t, self.n_head, self.head_dim), 1, 2)
        scores = (q @ self.swap(k, -2, -1)) * (1.0 / math.sqrt(self.head_dim))
        return scores, v, self.causal[:t, :t]

    def construct(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        scores, v, mask = self.logits(x)
        if self.schedule.fp16_overflow(self.layer):
            probs = fp16_overflow_softmax(scores, mask)
        else:
            scores = scores.masked_fill(mask, float("-inf"))
            if self.schedule.lowp_softmax(self.layer):
                probs = lowp_softmax(scores)
            else:
                probs = MF.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        y = self.swap(probs @ v, 1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class MLP(nn.Cell):
    def __init__(self, knobs: DemoKnobs, compute_dtype: Any = None) -> None:
        super().__init__()
        self.fc1 = Linear(knobs.d_model, knobs.d_mlp, compute_dtype)
        self.fc2 = Linear(knobs.d_mlp, knobs.d_model, compute_dtype)
        self.dropout = Dropout(0.0)

    def construct(self, x: Tensor) -> Tensor:
        return self.dropout(self.fc2(ops.gelu(self.fc1(x))))


class ScaleGrad(nn.Cell):
    """Identity forward; multiplies the incoming gradient by ``scale`` in backward (the grad_explosion fault).

    A cell with its own ``bprop`` makes a graph node of its own, as PyTorch's ``autograd.Function`` does, so
    gradient hooks on the tensors around it see exactly what they see in the PyTorch demo. It is built at the
    call, not kept as an attribute, so the model's cells are the PyTorch demo's modules.
    """

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def construct(self, x: Tensor) -> Tensor:
        return x * 1.0

    def bprop(self, x: Tensor, out: Tensor, dout: Tensor) -> Tuple[Tensor]:
        return (dout * self.scale,)


class Block(nn.Cell):
    def __init__(self, knobs: DemoKnobs, layer: int, schedule: FaultSchedule, compute_dtype: Any = None) -> None:
        super().__init__()
        self.layer = layer
        self.schedule = schedule
        self.ln1 = LayerNorm(knobs.d_model, eps=schedule.layer_norm_eps(layer))
        self.attn = CausalSelfAttention(knobs, layer, schedule, compute_dtype)
        self.ln2 = LayerNorm(knobs.d_model)
        self.mlp = MLP(knobs, compute_dtype)

    def construct(self, x: Tensor) -> Tensor:
        scale = self.schedule.grad_scale(self.layer)
        if scale is not None:
            x = ScaleGrad(1.0 / scale)(x)
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        if scale is not None:
            x = ScaleGrad(scale)(x)
        return x


class DemoGPT(nn.Cell):
    """``construct(tokens) -> logits (B, T, vocab)``; ``schedule.step`` selects the step-dependent faults."""

    def __init__(self, knobs: DemoKnobs) -> None:
        super().__init__()
        self.knobs = knobs
        self.schedule = FaultSchedule(knobs.faults)
        compute_dtype = COMPUTE_DTYPES.get(knobs.dtype)
        self.tok_emb = Embedding(knobs.vocab, knobs.d_model)
        self.pos_emb = Embedding(knobs.seq, knobs.d_model)
        self.dropout = Dropout(0.0)
        self.blocks = nn.CellList([Block(knobs, i, self.schedule, compute_dtype) for i in range(knobs.n_layer)])
        self.ln_f = LayerNorm(knobs.d_model)
        self.head = Linear(knobs.d_model, knobs.vocab, compute_dtype)
        self.positions = Tensor(np.arange(knobs.seq, dtype=np.int64))

    def embed(self, tokens: Tensor) -> Tensor:
        return self.dropout(self.tok_emb(tokens) + self.pos_emb(self.positions[: tokens.shape[1]]))

    def construct(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def attention_logits(self, tokens: Tensor, layer: int) -> Tensor:
        """Block ``layer``'s masked attention logits on ``tokens`` (the input the softmax faults act on)."""
        x = self.embed(tokens)
        for block in self.blocks[:layer]:
            x = block(x)
        attn = self.blocks[layer].attn
        scores, _, mask = attn.logits(self.blocks[layer].ln1(x))
        return scores.masked_fill(mask, float("-inf"))


def load_weights(model: nn.Cell, weights: Dict[str, np.ndarray]) -> None:
    """Copy framework-neutral arrays into the model; names and shapes must match exactly."""
    params = dict(model.parameters_and_names())
    missing = sorted(set(params) - set(weights))
    extra = sorted(set(weights) - set(params))
    if missing or extra:
        raise ValueError(f"demo weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for name, param in params.items():
        if tuple(param.shape) != tuple(weights[name].shape):
            raise ValueError(f"demo weights: {name} has shape {tuple(param.shape)}, "
                             f"the arrays {tuple(weights[name].shape)}")
        param.set_data(Tensor(np.ascontiguousarray(weights[name], dtype=np.float32)))


def build_model(knobs: DemoKnobs, weights: Optional[Dict[str, np.ndarray]] = None) -> DemoGPT:
    model = DemoGPT(knobs)
    load_weights(model, initial_weights(knobs) if weights is None else weights)
    return model
