"""grad_probe's torch hook: the values it stores equal ones computed directly from the gradients."""

import csv
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from engines.adapters.torch.grad_probe import GradProbeHook  # noqa: E402
from engines.grad_probe.levels import csv_header  # noqa: E402
from engines.grad_probe.reader import GradReader  # noqa: E402
from engines.grad_probe.writer import GradStoreWriter  # noqa: E402

BOUNDS = [-0.01, 0.0, 0.01]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.ReLU(), torch.nn.Linear(24, 24))
        self.head = torch.nn.Linear(24, 3)
        self.unused = torch.nn.Linear(2, 2)  # never gets a gradient

    def forward(self, x):
        return self.head(torch.relu(self.body(x)))


def _train(steps=3, seed=0):
    """Trains Net, returning the model and a snapshot of every gradient at every optimizer step."""
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    snapshots = []
    for _ in range(steps):
        loss = model(torch.randn(8, 12)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        snapshots.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
        optimizer.step()
    return model, snapshots


def _record(tmp_path, level, train_steps=3, **kwargs):
    writer = GradStoreWriter(tmp_path / "rank0", level=level, bounds=BOUNDS, csv_dir=tmp_path / "rank0")
    hook = GradProbeHook(writer.write, level=level, bounds=BOUNDS, **kwargs).install()
    try:
        _, snapshots = _train(train_steps)
    finally:
        hook.remove()
        writer.close()
    return GradReader(tmp_path / "rank0"), snapshots


def test_l2_values_match_direct_computation(tmp_path):
    reader, snapshots = _record(tmp_path, "L2")
    assert reader.steps() == [0, 1, 2] and reader.level == "L2" and reader.bounds == BOUNDS
    for step, grads in enumerate(snapshots):
        data = reader.read_step(step)
        assert data.names == ["body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias", "head.weight",
                              "head.bias"]
        for i, name in enumerate(data.names):
            g = grads[name]
            assert data.max[i] == g.max().item() and data.min[i] == g.min().item()
            assert data.norm[i] == pytest.approx(g.norm().item(), rel=1e-6)
            buckets = torch.bucketize(g.reshape(-1), torch.tensor(BOUNDS))
            expected = np.bincount(buckets.numpy(), minlength=len(BOUNDS) + 1) / g.numel()
            np.testing.assert_allclose(data.hist[i], expected, rtol=0, atol=1e-12)
            assert data.zero_frac[i] == pytest.approx((g == 0).sum().item() / g.numel())
            assert np.array_equal(data.direction(i), (g > 0).numpy())
            assert data.crc32[i] == -1  # the hash is an L0 column


def test_l0_hash_is_crc32_of_the_float32_gradient_and_no_direction(tmp_path):
    reader, snapshots = _record(tmp_path, "L0", train_steps=1)
    data = reader.read_step(0)
    for i, name in enumerate(data.names):
        expected = zlib.crc32(snapshots[0][name].float().contiguous().numpy().tobytes())
        assert data.crc32[i] == expected
    assert all(p is None for p in data.packed)


def test_csv_export_has_msprobe_headers(tmp_path):
    _record(tmp_path, "L2", train_steps=2)
    with open(tmp_path / "rank0" / "grad_summary_1.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["param_name", "(-inf, -0.01]", "(-0.01, 0]", "(0, 0.01]", "(0.01, inf)", "=0", "max", "min",
                       "norm", "shape"]
    assert rows[1][0] == "body.0.weight" and rows[1][-1] == "[24, 12]"
    assert csv_header("L0")[:2] == ["param_name", "MD5"] and csv_header("L1") == ["param_name", "max", "min",
                                                                                 "norm", "shape"]


def test_param_list_and_step_filters(tmp_path):
    reader, _ = _record(tmp_path, "L1", train_steps=4, param_list=["head", r"body\.0\..*"], steps=[1, 3])
    assert reader.steps() == [1, 3]
    assert reader.read_step(3).names == ["body.0.weight", "body.0.bias", "head.weight", "head.bias"]


def test_directions_are_packed_bits_not_bytes(tmp_path):
    reader, _ = _record(tmp_path, "L1", train_steps=1)
    data = reader.read_step(0)
    assert [len(p) for p in data.packed] == [(int(n) + 7) // 8 for n in data.numels]


def test_recording_does_not_change_training(tmp_path):
    _, reference = _train(3, seed=5)
    writer = GradStoreWriter(tmp_path / "rank0", level="L2", bounds=BOUNDS)
    hook = GradProbeHook(writer.write, level="L2", bounds=BOUNDS).install()
    try:
        model, probed = _train(3, seed=5)
    finally:
        hook.remove()
        writer.close()
    for a, b in zip(reference, probed):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
