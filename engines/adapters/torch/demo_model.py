"""The demo model in PyTorch: a small GPT built from ordinary torch building blocks.

It uses the variety of calls a real model makes (``nn.Embedding``, ``nn.LayerNorm``, ``nn.Linear``, ``F.gelu``,
``@``, ``masked_fill`` with a -inf causal mask, ``softmax``, ``dropout`` with p=0, residual adds) so that
API-level and module-level capture see realistic traffic. Module names read well: ``blocks.0.attn.qkv``,
``blocks.0.mlp.fc1``, ``ln_f``, ``head``. The faults of ``engines.demo.faults`` are wired in here.
"""

import math
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from engines.demo.faults import FP16_OVERFLOW_SCALE, FaultSchedule
from engines.demo.knobs import DemoKnobs
from engines.demo.weights import initial_weights


class ScaleGrad(torch.autograd.Function):
    """Identity forward; multiplies the incoming gradient by ``scale`` in backward (the grad_explosion fault)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        return grad * ctx.scale, None


def bf16_pairwise_sum(e: torch.Tensor) -> torch.Tensor:
    """Sum over the last dim with every partial sum stored in bfloat16 (as a low-precision kernel does).

    ``Tensor.sum`` on a bfloat16 tensor accumulates in float32 and rounds once; this rounds at each of the
    log2(T) levels of a pairwise reduction. Returns shape ``(..., 1)``.
    """
    while e.shape[-1] > 1:
        if e.shape[-1] % 2:
            e = F.pad(e, (0, 1))
        e = e[..., 0::2] + e[..., 1::2]
    return e


def _naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """exp, pairwise sum and division in ``x``'s own dtype, without subtracting the row maximum."""
    e = torch.exp(x)
    return e / bf16_pairwise_sum(e)


def _register_naive_softmax() -> Optional[Callable[[torch.Tensor], torch.Tensor]]:
    """The naive softmax as one operator, ``torch.ops.demo.naive_softmax`` (torch >= 2.4), so that API-level tools
    see the fault as one call, as they would see a low-precision fused kernel. None on older torch."""
    custom_op = getattr(torch.library, "custom_op", None)
    if custom_op is None:
        return None
    try:
        return torch.ops.demo.naive_softmax.default  # registered by an earlier import of this module
    except (AttributeError, RuntimeError):
        pass

    def kernel(x: torch.Tensor) -> torch.Tensor:
        return _naive_softmax(x)

    def setup(ctx: Any, inputs: Tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (p,) = ctx.saved_tensors
        return p * (grad - (grad * p).sum(dim=-1, keepdim=True))

    op = custom_op("demo::naive_softmax", mutates_args=())(kernel)
    op.register_fake(lambda x: torch.empty_like(x))
    op.register_autograd(backward, setup_context=setup)
    return op


_NAIVE_SOFTMAX = _register_naive_softmax()


def lowp_softmax(scores: torch.Tensor) -> torch.Tensor:
    """The lowp_softmax fault: exp, sum and division in bfloat16, without subtracting the row maximum.

    On the demo's attention logits this gives a maximum element-wise relative error of about 1.3-1.8e-2
    against the float32 softmax (norm-wise about 3e-3: the logits are small, so bf16 rounding dominates).
    The arithmetic is one operator (``Demo.naive_softmax`` at API level) that computes in its input's dtype, fed
    bfloat16: re-run in float32 (free_benchmark's improve_precision) it is accurate.
    """
    x = scores.to(torch.bfloat16)
    out = _NAIVE_SOFTMAX(x) if _NAIVE_SOFTMAX is not None else _naive_softmax(x)
    return out.to(scores.dtype)


def fp16_overflow_softmax(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The fp16_overflow fault. ``logits`` are the unmasked attention logits.

    ``torch.exp`` on the float16 tensor is the op that first produces inf: its input (the logits times
    FP16_OVERFLOW_SCALE, cast to float16) is finite, and exp overflows float16 above ln(65504) ~ 11.09.
    The mask is applied after exp (filling 0), so no -inf ever reaches that exp.
    """
    scaled = (logits * FP16_OVERFLOW_SCALE).to(torch.float16)
    e = torch.exp(scaled)
    e = e.masked_fill(mask, 0.0)
    return (e / e.sum(dim=-1, keepdim=True)).to(logits.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, knobs: DemoKnobs, layer: int, schedule: FaultSchedule) -> None:
        super().__init__()
        self.layer = layer
        self.schedule = schedule
        self.n_head = knobs.n_head
        self.head_dim = knobs.head_dim
        self.qkv = nn.Linear(knobs.d_model, 3 * knobs.d_model)
        self.proj = nn.Linear(knobs.d_model, knobs.d_model)
        self.dropout = nn.Dropout(0.0)
        causal = torch.triu(torch.ones(knobs.seq, knobs.seq, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", causal, persistent=False)

    def logits(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Unmasked attention logits ``(B, H, T, T)`` and ``v``, plus the mask for length T."""
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        return scores, v, self.causal[:t, :t]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        scores, v, mask = self.logits(x)
        if self.schedule.fp16_overflow(self.layer):
            probs = fp16_overflow_softmax(scores, mask)
        else:
            scores = scores.masked_fill(mask, float("-inf"))
            if self.schedule.lowp_softmax(self.layer):
                probs = lowp_softmax(scores)
            else:
                probs = F.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        y = (probs @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, knobs: DemoKnobs) -> None:
        super().__init__()
        self.fc1 = nn.Linear(knobs.d_model, knobs.d_mlp)
        self.fc2 = nn.Linear(knobs.d_mlp, knobs.d_model)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(F.gelu(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, knobs: DemoKnobs, layer: int, schedule: FaultSchedule) -> None:
        super().__init__()
        self.layer = layer
        self.schedule = schedule
        self.ln1 = nn.LayerNorm(knobs.d_model, eps=schedule.layer_norm_eps(layer))
        self.attn = CausalSelfAttention(knobs, layer, schedule)
        self.ln2 = nn.LayerNorm(knobs.d_model)
        self.mlp = MLP(knobs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.schedule.grad_scale(self.layer)
        if scale is not None:
            x = ScaleGrad.apply(x, 1.0 / scale)
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        if scale is not None:
            x = ScaleGrad.apply(x, scale)
        return x


class DemoGPT(nn.Module):
    """``forward(tokens) -> logits (B, T, vocab)``; ``schedule.step`` selects the step-dependent faults."""

    def __init__(self, knobs: DemoKnobs) -> None:
        super().__init__()
        self.knobs = knobs
        self.schedule = FaultSchedule(knobs.faults)
        self.tok_emb = nn.Embedding(knobs.vocab, knobs.d_model)
        self.pos_emb = nn.Embedding(knobs.seq, knobs.d_model)
        self.dropout = nn.Dropout(0.0)
        self.blocks = nn.ModuleList(Block(knobs, i, self.schedule) for i in range(knobs.n_layer))
        self.ln_f = nn.LayerNorm(knobs.d_model)
        self.head = nn.Linear(knobs.d_model, knobs.vocab)
        positions = torch.arange(knobs.seq, dtype=torch.long)
        self.register_buffer("positions", positions, persistent=False)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.tok_emb(tokens) + self.pos_emb(self.positions[: tokens.shape[1]]))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    @torch.no_grad()
    def attention_logits(self, tokens: torch.Tensor, layer: int) -> torch.Tensor:
        """Block ``layer``'s masked attention logits on ``tokens`` (the input the softmax faults act on)."""
        x = self.embed(tokens)
        for block in self.blocks[:layer]:
            x = block(x)
        scores, _, mask = self.blocks[layer].attn.logits(self.blocks[layer].ln1(x))
        return scores.masked_fill(mask, float("-inf"))


def load_weights(model: nn.Module, weights: Dict[str, np.ndarray]) -> None:
    """Copy framework-neutral arrays into the model; names and shapes must match exactly."""
    params = dict(model.named_parameters())
    missing = sorted(set(params) - set(weights))
    extra = sorted(set(weights) - set(params))
    if missing or extra:
        raise ValueError(f"demo weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}")
    with torch.no_grad():
        for name, param in params.items():
            param.copy_(torch.from_numpy(weights[name]))


def build_model(knobs: DemoKnobs, weights: Optional[Dict[str, np.ndarray]] = None) -> DemoGPT:
    model = DemoGPT(knobs)
    load_weights(model, initial_weights(knobs) if weights is None else weights)
    return model
