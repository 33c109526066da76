"""PNG charts of a grad compare (matplotlib, the optional ``report`` extra, imported lazily).

- ``summary_similarities.png``: the element-weighted similarity per step, with the threshold line and the first
  step that breaks the rule marked;
- ``similarities_heatmap.png``: every parameter (rows, model order) x step, so one picture shows where the
  directions drift apart;
- ``layer_ratios.png``: per layer (ordered by depth) the gradient-norm ratio target / golden at the reported
  step, the tolerance band, and the first layer over tolerance marked.
"""

from pathlib import Path
from typing import Any, List, Optional

import numpy as np

from engines import safe_fs
from engines.grad_compare.layers import LayerRatios
from engines.grad_compare.rule import RuleVerdict
from engines.grad_compare.similarity import SimilarityTable


def matplotlib_or_none() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def draw(directory: Path, table: SimilarityTable, verdict: RuleVerdict, layers: LayerRatios,
         layer_step: Optional[int]) -> List[Path]:
    """Write the charts into ``directory``; [] when matplotlib is missing (the caller notes it)."""
    plt = matplotlib_or_none()
    if plt is None:
        return []
    safe_fs.make_dirs(directory)
    written = []
    steps = table.steps

    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.plot(steps, table.summary, marker="o", label="summary (element-weighted)")
    ax.axhline(verdict.threshold, color="tab:red", linestyle="--", linewidth=1, label=f"threshold {verdict.threshold}")
    if verdict.first is not None:
        ax.axvline(verdict.first.step, color="tab:red", linewidth=1, alpha=0.5)
        ax.annotate(f"rule broken: {verdict.first.param}", (verdict.first.step, verdict.first.similarity),
                    fontsize=8, color="tab:red")
    ax.set_xlabel("step")
    ax.set_ylabel("direction similarity")
    ax.set_title("gradient direction similarity, target vs golden")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, directory / "summary_similarities.png", plt))

    if len(table.params):
        height = min(12, 1.5 + 0.18 * len(table.params))
        fig, ax = plt.subplots(figsize=(7, height))
        image = ax.imshow(table.values, aspect="auto", cmap="viridis", vmin=min(0.5, np.nanmin(table.values) if np.isfinite(table.values).any() else 0.5), vmax=1.0)
        ax.set_yticks(range(len(table.params)))
        ax.set_yticklabels(table.params, fontsize=6)
        ax.set_xticks(range(len(steps)))
        ax.set_xticklabels([str(s) for s in steps], fontsize=7)
        ax.set_xlabel("step")
        fig.colorbar(image, ax=ax, label="similarity")
        ax.set_title("similarity per parameter and step")
        fig.tight_layout()
        written.append(_save(fig, directory / "similarities_heatmap.png", plt))

    if layer_step is not None and len(layers.layers):
        ratio = layers.ratio[:, layer_step]
        first = layers.first_over(layer_step)
        fig, ax = plt.subplots(figsize=(7, 3.5))
        depth = np.arange(len(layers.layers))
        ax.axhspan(1 - layers.tolerance, 1 + layers.tolerance, color="tab:green", alpha=0.15, label="tolerance")
        ax.plot(depth, ratio, marker="o", color="tab:blue", label="target / golden")
        over = layers.over[:, layer_step]
        ax.scatter(depth[over], ratio[over], color="tab:orange", zorder=3, label="over tolerance")
        if first is not None:
            ax.scatter([first], [ratio[first]], s=120, facecolors="none", edgecolors="tab:red", linewidths=2,
                       zorder=4, label="first over tolerance (from the output)")
        ax.set_xticks(range(len(layers.layers)))
        ax.set_xticklabels(layers.layers, rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("grad norm ratio target / golden")
        title = f"layer-wise gradient norm ratio at step {layers.steps[layer_step]}"
        if first is not None:
            title += f" (first over tolerance from the output: {layers.layers[first]})"
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        written.append(_save(fig, directory / "layer_ratios.png", plt))
    return written


def _save(fig: Any, path: Path, plt: Any) -> Path:
    try:
        with safe_fs.atomic_file(path, "wb") as fh:
            fig.savefig(fh, format="png", dpi=110)
    finally:
        plt.close(fig)
    return path
