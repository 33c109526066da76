"""The monitor on a real architecture (a tiny GPT-2 from transformers, random weights, no hub): the loss a model
returns in its outputs is recorded without being told, block outputs (tuples) and weight gradients too."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from engines.adapters.torch.monitor import MonitorSession  # noqa: E402
from engines.monitor.reader import open_metrics  # noqa: E402
from engines.monitor.writer import MetricsWriter  # noqa: E402
from schemas import load_config  # noqa: E402


def test_tiny_gpt2_loss_blocks_and_gradients(tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=16)
    model = transformers.GPT2LMHeadModel(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    section = load_config({"task": "monitor", "monitor": {
        "wg_distribution": True, "xy_distribution": True, "targets": {r"transformer\.h\.\d+": {}},
        "ops": ["norm", "max"]}}).monitor
    writer = MetricsWriter(tmp_path / "rank0")
    session = MonitorSession(section, writer).install()
    losses = []
    try:
        for _ in range(3):
            tokens = torch.randint(0, 100, (2, 16))
            loss = model(input_ids=tokens, labels=tokens).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    finally:
        session.remove()
        writer.close()
    metrics = open_metrics(tmp_path / "rank0")
    np.testing.assert_allclose(metrics.read("train/loss/value").values, losses, rtol=1e-6)
    names = {s.name for s in metrics.series(tag="actv")}
    assert {n.rsplit(".", 1)[0] for n in names} == {"transformer.h.0", "transformer.h.1"}
    assert all(n.startswith(("transformer.h.0.", "transformer.h.1.")) for n in names)
    grad = metrics.read("grad_reduced/transformer.h.1.mlp.c_fc.weight/norm")
    assert list(grad.steps) == [0, 1, 2] and np.all(grad.values > 0)
