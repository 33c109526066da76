"""What the function mode sees, and what it leaves alone: imported names, in-place ops, nested calls, custom
ops in an ``npu`` namespace, collectives, checkpointing, compiled regions; and that capture changes no number."""

import socket

import pytest
import torch
import torch.nn.functional as F
from test_capture_support import TINY, Dump, assert_stats_equal, make_session, run_demo
from torch import relu  # the binding msprobe misses (its FAQ #3)


def _capture(tmp_path, fn, **options):
    s = make_session(tmp_path, **options)
    s.start()
    out = fn()
    s.stop()
    s.step_end()
    s.close()
    written = (tmp_path / "rank0").exists()
    return (Dump(tmp_path / "rank0") if written else None), s.summary, out


def test_names_bound_by_from_import_are_captured(tmp_path):
    x = torch.randn(5, requires_grad=True)
    dump, _, y = _capture(tmp_path, lambda: relu(x).sum().backward(), level="L1")
    names = dump.names(0)
    assert "Torch.relu.0.forward" in names and "Torch.relu.0.backward" in names
    assert_stats_equal(dump.rows("Torch.relu.0.forward")["input.0"], x)


def test_in_place_ops_record_inputs_before_they_are_overwritten(tmp_path):
    x = torch.arange(6, dtype=torch.float32)
    before = x.clone()

    def body():
        x.add_(10.0)
        x.mul_(2)
        return x

    dump, _, _ = _capture(tmp_path, body, level="L1")
    add = dump.rows("Tensor.add_.0.forward")
    assert_stats_equal(add["input.0"], before)
    assert_stats_equal(add["output.0"], before + 10)
    mul = dump.rows("Tensor.mul_.0.forward")
    assert_stats_equal(mul["input.0"], before + 10)
    assert_stats_equal(mul["output.0"], (before + 10) * 2)
    assert '"input.1"' not in dump.record("Tensor.add_.0.forward")["args"]  # 10.0 is a scalar argument
    assert "10.0" in dump.record("Tensor.add_.0.forward")["args"]


def test_in_place_backward_is_the_gradient_of_that_call(tmp_path):
    w = torch.randn(4, requires_grad=True)

    def body():
        h = w * 3
        h.mul_(h.detach() + 1)  # in place on a non-leaf
        h.sum().backward()

    dump, _, _ = _capture(tmp_path, body, level="L1")
    bwd = dump.rows("Tensor.mul_.0.backward")
    h = w.detach() * 3
    assert_stats_equal(bwd["input.0"], torch.ones(4))
    assert_stats_equal(bwd["output.0"], h + 1)  # d(h * c)/dh = c


def test_nested_calls_are_recorded_once(tmp_path):
    x = torch.randn(3, 8)
    dump, _, _ = _capture(tmp_path, lambda: F.normalize(F.layer_norm(x, (8,)), dim=1), level="L1")
    # F.normalize calls norm/clamp_min/expand_as/div and layer_norm calls torch.layer_norm inside: not recorded
    assert dump.names(0) == ["Functional.layer_norm.0.forward", "Functional.normalize.0.forward"]


def test_metadata_calls_and_properties_are_never_recorded(tmp_path):
    x = torch.randn(2, 3)

    def body():
        return (x.size(), x.dim(), x.shape, len(x), x.numel(), x.dtype, x.T, x.data_ptr(), repr(x), x.stride(),
                x.requires_grad, x.is_contiguous())

    dump, summary, _ = _capture(tmp_path, body, level="L1")
    assert dump is None and summary.records == 0  # nothing at all was recorded


class _SparseMatMuls(torch.nn.Module):
    """A tiny model calling ``torch.mm`` and ``torch.hspmm``: each shares its binding with an alias (``dsmm``,
    ``spmm``; ``hsmm``) that sorts before it."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        return torch.mm(x, self.w), torch.hspmm(x.to_sparse(), self.w)


def test_aliased_bindings_are_named_as_called(tmp_path):
    model, x = _SparseMatMuls(), torch.randn(2, 4)
    dump, _, _ = _capture(tmp_path, lambda: model(x), level="L1")
    names = dump.names(0)
    assert "Torch.mm.0.forward" in names and "Torch.hspmm.0.forward" in names
    assert not any(n.startswith(("Torch.dsmm", "Torch.spmm", "Torch.hsmm")) for n in names)


def _loader_step_names(root):
    """One step over four batches of a shuffled ``num_workers=2`` DataLoader whose iterator is made while recording."""
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.arange(64.0).reshape(16, 4), torch.ones(16, 1))
    model = torch.nn.Linear(4, 1)

    def body():
        batches = iter(DataLoader(data, batch_size=2, shuffle=True, num_workers=2))  # seeds itself, samples
        for _ in range(4):
            x, y = next(batches)  # the main process unpickles what the workers sent: torch's calls, not the model's
            F.mse_loss(model(x), y)

    dump, _, _ = _capture(root, body, level="L1")
    return dump.names(0)


def test_dataloader_workers_add_no_records(tmp_path):
    first, second = _loader_step_names(tmp_path / "a"), _loader_step_names(tmp_path / "b")
    assert first == second
    assert sorted({n.split(".")[1] for n in first}) == ["linear", "mse_loss"]


def test_a_data_loading_region_left_open_does_not_silence_the_next_start(tmp_path):
    s = make_session(tmp_path, level="L1")
    s.start()
    torch.ops.profiler._record_function_enter_new("enumerate(DataLoader)#It.__next__", None)  # its exit never runs
    s.stop()
    s.start()
    torch.relu(torch.ones(2))
    s.stop()
    s.step_end()
    s.close()
    assert "Torch.relu.0.forward" in Dump(tmp_path / "rank0").names(0)


@pytest.fixture(scope="module")
def npu_op():
    """A custom op in an ``npu`` namespace: the CPU stand-in for a torch_npu kernel."""
    lib_name = "npu::probe_tui_scaled_gelu"

    @torch.library.custom_op(lib_name, mutates_args=())
    def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
        return F.gelu(x) * scale

    def backward(ctx, grad):
        x, = ctx.saved_tensors
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            y = F.gelu(xx) * ctx.scale
            g, = torch.autograd.grad(y, xx, grad)
        return g, None

    def setup(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.scale = inputs[1]

    torch.library.register_autograd(lib_name, backward, setup_context=setup)
    return torch.ops.npu.probe_tui_scaled_gelu


def test_custom_npu_namespace_ops_are_captured_forward_and_backward(tmp_path, npu_op):
    x = torch.randn(6, requires_grad=True)
    dump, _, _ = _capture(tmp_path, lambda: npu_op(x, 2.0).sum().backward(), level="L1")
    names = dump.names(0)
    assert "NPU.probe_tui_scaled_gelu.0.forward" in names and "NPU.probe_tui_scaled_gelu.0.backward" in names
    assert not any(n.startswith("Functional.gelu") for n in names)  # the kernel's inside is not an API call
    fwd = dump.rows("NPU.probe_tui_scaled_gelu.0.forward")
    assert_stats_equal(fwd["output.0"], F.gelu(x.detach()) * 2.0)
    assert "2.0" in dump.record("NPU.probe_tui_scaled_gelu.0.forward")["args"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_collectives_are_recorded_with_their_results(tmp_path, monkeypatch):
    import torch.distributed as dist

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        t = torch.arange(4, dtype=torch.float32)
        before = t.clone()

        def body():
            dist.all_reduce(t)
            work = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
            work.wait()
            dist.broadcast(t, src=0)

        dump, _, _ = _capture(tmp_path, body, level="L1")
    finally:
        dist.destroy_process_group()
    names = dump.names(0)
    assert names[:3] == ["Distributed.all_reduce.0.forward", "Distributed.all_reduce.1.forward",
                         "Distributed.broadcast.0.forward"]
    rows = dump.rows("Distributed.all_reduce.0.forward")
    assert_stats_equal(rows["input.0"], before)
    assert_stats_equal(rows["output.0"], t)  # in place: the argument after the collective
    assert "ReduceOp" in dump.record("Distributed.all_reduce.1.forward")["args"]


def test_a_buffer_an_async_collective_fills_later_is_read_anew(tmp_path, monkeypatch):
    """An irecv (a pipeline stage's activations) or an ``async_op=True`` collective writes its buffer when the work
    completes, after its record, and the backend's write leaves the version counter alone: the next op on that
    buffer must record what it holds then, not the entry summarised at the collective's call (garbage, NaN)."""
    import torch.distributed as dist

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        buf = torch.full((4,), float("nan"))
        arrived = torch.arange(4, dtype=torch.float32)

        def body():
            work = dist.broadcast(buf, src=0, async_op=True)
            work.wait()
            buf.data.copy_(arrived)  # what the peer's data does to the buffer: no version bump
            return torch.relu(buf)

        dump, _, _ = _capture(tmp_path, body, level="L1")
    finally:
        dist.destroy_process_group()
    assert buf._version == 0
    assert_stats_equal(dump.rows("Torch.relu.0.forward")["input.0"], arrived)


def test_dispatch_fallback_records_collectives_the_function_mode_cannot_see(tmp_path, monkeypatch):
    """On torch < 2.3 ``dist.all_reduce`` is plain Python: the dispatch-mode fallback records ``c10d`` ops then.
    Simulated here by hiding the collective from the function mode's table."""
    import torch.distributed as dist

    from engines.adapters.torch import api_table, dispatch_capture

    assert dispatch_capture.function_mode_sees_collectives()  # this torch: the fallback is not needed
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        t = torch.arange(4, dtype=torch.float32)
        both = make_session(tmp_path / "both", level="L1", force_dispatch=True)
        both.start()
        dist.all_reduce(t)  # seen by both modes: recorded once
        both.step_end()
        both.close()
        monkeypatch.setitem(api_table.table(), dist.all_reduce, None)
        only = make_session(tmp_path / "dispatch", level="L1", force_dispatch=True)
        only.start()
        dist.all_reduce(t)
        y = t * 2
        only.step_end()
        only.close()
    finally:
        dist.destroy_process_group()
    assert Dump(tmp_path / "both" / "rank0").names(0) == ["Distributed.all_reduce.0.forward"]
    names = Dump(tmp_path / "dispatch" / "rank0").names(0)
    assert names == ["Distributed.all_reduce.0.forward", "Tensor.mul.0.forward"]
    rows = Dump(tmp_path / "dispatch" / "rank0").rows("Distributed.all_reduce.0.forward")
    assert any(k.startswith("output") for k in rows) and y.shape == (4,)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return F.gelu(self.lin(x))


class _Checkpointed(torch.nn.Module):
    def __init__(self, reentrant):
        super().__init__()
        self.block, self.head, self.reentrant = _Block(), torch.nn.Linear(4, 1), reentrant

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return self.head(checkpoint(self.block, x, use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_forwards_are_marked_and_not_counted_twice(tmp_path, reentrant):
    from engines.capture.naming import FLAG_RECOMPUTED

    net = _Checkpointed(reentrant)
    x = torch.randn(2, 4, requires_grad=True)
    s = make_session(tmp_path, level="mix")
    s.start(net)
    net(x).sum().backward()
    s.step_end()
    s.close()
    r = Dump(tmp_path / "rank0")._records
    flagged = {n for n, f in zip(r["name"], r["flags"]) if int(f) & FLAG_RECOMPUTED}
    plain = [n for n, f in zip(r["name"], r["flags"]) if not int(f) & FLAG_RECOMPUTED]
    # the re-run of the block during backward is recorded once more, flagged, under the same index
    assert flagged == {"Module.block._Block.forward.0", "Module.block.lin.Linear.forward.0"}
    assert plain.count("Module.block._Block.forward.0") == 1
    assert not any(n.endswith(".forward.1") for n in r["name"])  # nothing counted twice
    assert "Module.block.lin.Linear.backward.0" in plain and "Module.block._Block.backward.0" in plain
    if not reentrant:  # the default: the first forward's graph is the one backward runs
        assert "Functional.gelu.0.backward" in plain and "Functional.linear.0.backward" in plain


def test_compiled_regions_are_reported_not_crashing(tmp_path):
    import warnings

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(model, backend="eager")
    x = torch.randn(2, 4)
    s = make_session(tmp_path, level="mix")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s.start(compiled)
        compiled(x).sum().backward()
        s.step_end()
    s.close()
    assert any("torch.compile" in n for n in s.summary.notes)


@pytest.mark.parametrize("level", ["L0", "L1", "mix"])
def test_capture_changes_no_number(tmp_path, level):
    """docs/decisions/0010-capture-does-not-change-numbers.md: losses, gradients and weights bit-identical with capture on and off."""
    from engines.adapters.torch import demo

    knobs = dict(TINY, steps=3)
    plain = demo.train(knobs)
    _, _, result = run_demo(tmp_path, knobs, level=level, summary_mode="hash")
    assert result.losses == plain.losses
    # gradients and weights: one more step each way, compared tensor by tensor
    torch.manual_seed(0)
    a = _grads_after_step(None, tmp_path / "a")
    b = _grads_after_step(level, tmp_path / "b")
    for (na, ga), (nb, gb) in zip(a, b):
        assert na == nb and torch.equal(ga, gb), na


def _grads_after_step(level, root):
    from engines.adapters.torch.demo import build_model
    from engines.demo.data import batches
    from engines.demo.knobs import resolve_knobs

    knobs = resolve_knobs(dict(TINY, steps=1))
    torch.manual_seed(knobs.seed)
    model = build_model(knobs)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens, targets = [(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches(knobs)][0]
    s = make_session(root, level=level) if level else None
    if s:
        s.start(model)
    loss = F.cross_entropy(model(tokens).view(-1, knobs.vocab), targets.view(-1))
    loss.backward()
    opt.step()
    if s:
        s.step_end()
        s.close()
    return [(n, p.grad.clone()) for n, p in model.named_parameters()] + \
        [(n + ".w", p.detach().clone()) for n, p in model.named_parameters()]


def test_a_list_of_models_is_named_by_index(tmp_path):
    gen, disc = torch.nn.Sequential(torch.nn.Linear(3, 3)), torch.nn.Sequential(torch.nn.Linear(3, 1))
    s = make_session(tmp_path, level="L0")
    s.start([gen, disc])
    disc(gen(torch.randn(2, 3))).sum().backward()
    s.step_end()
    s.close()
    names = Dump(tmp_path / "rank0").names(0)
    assert "Module.0.0.Linear.forward.0" in names and "Module.1.0.Linear.forward.0" in names
    assert "Module.1.0.Linear.parameters_grad.0" in names


def test_rm_dropout_mode_zeroes_every_dropout():
    from engines.adapters.torch.environment import DropoutOffMode

    x = torch.ones(1000)
    drop = torch.nn.Dropout(0.5)
    with DropoutOffMode():
        assert torch.equal(drop(x), x) and torch.equal(F.dropout(x, 0.9, training=True), x)
    assert not torch.equal(drop(x), x)


def test_gradient_accumulation_counts_calls_and_gradient_events(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    s = make_session(tmp_path, level="mix")
    s.start(model)
    grads = []
    for _ in range(2):  # two micro-batches, one optimizer step
        model(torch.randn(4, 3)).sum().backward()
        grads.append(model[0].weight.grad.clone())
    s.step_end()
    s.close()
    dump = Dump(tmp_path / "rank0")
    names = dump.names(0)
    for n in ("Module.0.Linear.forward.1", "Module.0.Linear.backward.1", "Functional.linear.3.forward",
              "Module.0.Linear.parameters_grad.0", "Module.0.Linear.parameters_grad.1"):
        assert n in names
    # the accumulated .grad after each micro-batch
    assert_stats_equal(dump.rows("Module.0.Linear.parameters_grad.1")["weight"], grads[1])


def test_debug_level_records_only_save(tmp_path):
    x = torch.randn(4, requires_grad=True)
    s = make_session(tmp_path, level="debug")
    s.start()
    y = torch.tanh(x)
    s.save("act", y)
    y.sum().backward()
    s.step_end()
    s.close()
    assert Dump(tmp_path / "rank0").names(0) == ["act.0.debug", "act_grad.0.debug"]


def test_fully_shard_modules_keep_their_own_class_name(tmp_path, monkeypatch):
    """FSDP2 swaps each sharded module's class for a generated ``FSDPLinear``; records name ``Linear``, as the
    unsharded model does, so the two layouts' records match (and the root stays unrecorded)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        mesh = init_device_mesh("cpu", (1,))
        fully_shard(model[0], mesh=mesh)
        fully_shard(model, mesh=mesh)
        assert type(model[0]).__name__ == "FSDPLinear"
        dump, _, _ = _capture(tmp_path, lambda: model(torch.ones(2, 4)).sum().backward(), level="L0")
    finally:
        dist.destroy_process_group()
    names = dump.names(0)
    assert "Module.0.Linear.forward.0" in names and "Module.1.ReLU.forward.0" in names
    assert "Module.0.Linear.parameters_grad.0" in names
    assert not any("FSDP" in n for n in names), names
