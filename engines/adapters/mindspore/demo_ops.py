"""Operators of the MindSpore demo that L1 records as single calls, under the prefix ``Demo`` (``Demo.naive_softmax``),
as the PyTorch demo's ``torch.ops.demo`` operators are: a low-precision fused kernel is one call to API-level
tools, and free_benchmark can re-run it in float32."""

import mindspore as ms
from mindspore import Tensor, mint

_HALF = (ms.float16, ms.bfloat16)


def naive_softmax(x: Tensor) -> Tensor:
    """exp, pairwise sum and division in ``x``'s own precision, without subtracting the row maximum.

    MindSpore has no bfloat16 exp or sum on the CPU: for a float16/bfloat16 input each op computes in float32 and
    its result is rounded to the input's dtype, which is what a kernel of that dtype returns. A float32 input
    runs in float32 (accurate: that is what free_benchmark's improve_precision checks against).
    """
    dt = x.dtype
    low = dt in _HALF

    def rounded(t: Tensor) -> Tensor:
        return t.astype(dt).astype(ms.float32) if low else t

    e = rounded(mint.exp(x.astype(ms.float32) if low else x))
    s = e
    while s.shape[-1] > 1:
        if s.shape[-1] % 2:
            s = mint.cat([s, mint.zeros_like(s[..., :1])], dim=-1)
        s = rounded(s[..., 0::2] + s[..., 1::2])
    out = rounded(e / s)
    return out.astype(dt) if low else out
