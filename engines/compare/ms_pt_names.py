"""MindSpore -> PyTorch API names (our own table; docs/reference/msprobe-analysis.md §1.6.5 describes what msprobe maps).

An API name is its first two tokens (``Functional.dense``). ``Mint.X`` maps to ``Torch.X`` and
``MintFunctional.X`` to ``Functional.X``; ``Tensor.X`` keeps its name; everything else goes through
:data:`MS_TO_PT`. Users extend or override it with an api_mapping file.
"""

from __future__ import annotations

from typing import Dict

PREFIX_MAP = {"Mint": "Torch", "MintFunctional": "Functional", "MintDistributed": "Distributed"}

_TORCH_NS = (
    "abs add addmm all any arange argmax argmin argsort bmm cat ceil chunk clamp clone cos cosh cumsum div einsum "
    "eq equal erf exp expand_dims flatten flip floor full gather ge gt isclose isfinite isinf isnan le log log1p "
    "logical_and logical_not logical_or lt masked_fill matmul max maximum mean min minimum mm mul ne neg norm "
    "ones ones_like permute pow prod rand randn repeat_interleave reshape round rsqrt scatter sigmoid sign sin "
    "sinh split sqrt square squeeze stack std sub sum tan tanh tile topk transpose tril triu unsqueeze var where "
    "zeros zeros_like"
).split()
_FUNCTIONAL_NS = (
    "avg_pool2d batch_norm binary_cross_entropy conv1d conv2d conv3d cross_entropy dropout elu embedding gelu "
    "group_norm hardswish interpolate layer_norm leaky_relu log_softmax max_pool2d mse_loss nll_loss normalize "
    "pad relu silu smooth_l1_loss softmax softplus"
).split()

MS_TO_PT: Dict[str, str] = {}
for _name in _TORCH_NS:
    MS_TO_PT["Functional." + _name] = "Torch." + _name
for _name in _FUNCTIONAL_NS:
    MS_TO_PT["Functional." + _name] = "Functional." + _name
MS_TO_PT.update({
    "Functional.dense": "Functional.linear",
    "Functional.bidense": "Functional.bilinear",
    "Functional.concat": "Torch.cat",
    "Functional.reduce_sum": "Torch.sum",
    "Functional.reduce_mean": "Torch.mean",
    "Functional.select": "Torch.where",
    "Functional.batch_matmul": "Torch.bmm",
    "Functional.expand": "Tensor.expand",
    "Functional.fill": "Torch.full",
    "Functional.one_hot": "Functional.one_hot",
    "Functional.sort": "Torch.sort",
})


def map_api(api: str, table: Dict[str, str]) -> str:
    """PyTorch name of a MindSpore API name (first two tokens); unchanged when nothing maps it."""
    hit = table.get(api)
    if hit is not None:
        return hit
    head, _, tail = api.partition(".")
    if head in PREFIX_MAP:
        return PREFIX_MAP[head] + "." + tail
    return MS_TO_PT.get(api, api)
