"""The monitor and grad_probe on sharded parameters (FSDP2's ``fully_shard``: parameters, gradients and Adam state
are DTensors): each rank measures its local shard, with no collective and no failure. One process, a world of
one on gloo; the two-process runs are in tests/test_dist_layouts.py."""

import socket

import numpy as np
import pytest
import torch

from engines.adapters.torch import monitor_optim
from engines.adapters.torch.grad_probe_stats import compute_grad_stats
from engines.adapters.torch.monitor_stats import StepMetrics

OPS = ["norm", "min", "max", "mean", "zeros", "nans"]


@pytest.fixture
def sharded(monkeypatch):
    """A fully_shard'ed Linear after one Adam step and a second backward: (model, optimizer)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        opt = torch.optim.Adam(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            model(torch.randn(2, 4)).pow(2).sum().backward()
            if not opt.state:
                opt.step()
        assert type(model.weight.grad).__name__ == "DTensor"
        yield model, opt
    finally:
        dist.destroy_process_group()


def _named(model):
    return [(n, p) for n, p in model.named_parameters()]


def test_grad_probe_measures_each_rank_s_shard_of_a_dtensor_gradient(sharded):
    model, _ = sharded
    named = [(n, p.grad) for n, p in _named(model)]
    stats = compute_grad_stats(0, named, "L2", [-0.01, 0.0, 0.01])
    local = [g.to_local() for _, g in named]
    assert stats.names == ["weight", "bias"] and stats.shapes == [tuple(t.shape) for t in local]
    np.testing.assert_array_equal(stats.max, [float(t.max()) for t in local])
    np.testing.assert_array_equal(stats.norm, [float(torch.linalg.vector_norm(t).double()) for t in local])


def test_monitor_metrics_of_dtensor_gradients_parameters_and_adam_state(sharded):
    model, opt = sharded
    named = _named(model)
    metrics = StepMetrics()
    metrics.add_bulk("grad_reduced", [n for n, _ in named], [p.grad for _, p in named], OPS, 1e-8)
    monitor_optim.add_bulk(metrics, "param_origin", named, OPS, 1e-8)
    monitor_optim.record_mg_direction(metrics, opt, named)
    monitor_optim.record_adam_state(metrics, opt, named, OPS, 1e-8)
    monitor_optim.record_update(metrics, opt, named, OPS, 1e-8)
    values = metrics.collect()
    assert np.isfinite(values).all() and len(values) == len(metrics.keys)
    by_key = dict(zip(metrics.keys, values))
    weight_grad = model.weight.grad.to_local()
    assert by_key[("grad_reduced", "weight", "max")] == float(weight_grad.max())
    bias_norm = float(torch.linalg.vector_norm(model.bias.to_local().detach().double()))
    assert by_key[("param_origin", "bias", "norm")] == pytest.approx(bias_norm, rel=1e-6)  # a float32 kernel
    assert ("exp_avg_sq", "weight", "norm") in by_key and ("update_ratio", "bias", "value") in by_key
    assert metrics.shapes[0] == "[3, 4]"
