"""The dump browser on msprobe's dumps and ours: the step → rank → module → API → tensor tree, statistics,
tensor values and histogram, name search and the inf/nan filter."""

from pathlib import Path

import numpy as np
import pytest

from probe_tui.app.app import ProbeApp
from probe_tui.app.data.dump_index import DumpIndex
from probe_tui.app.data.tensor_preview import PreviewError, histogram, read_slice
from probe_tui.app.screens.dump import DumpScreen
from probe_tui.app.screens.overflow import OverflowScreen
from probe_tui.app.widgets.dump_tree import DumpRef, DumpTree
from tests.app_pilot import open_view, pilot_test, rendered_text, run_sample, viewing, wait_until

MSPROBE = Path(__file__).resolve().parent / "data" / "msprobe" / "real"


def lines(tree: DumpTree):
    """(label, ref) of every line shown, in order."""
    out = []
    for n in range(tree.last_line + 1):
        node = tree.get_node_at_line(n)
        if node is not None:
            out.append((node.label.plain, node.data))
    return out


def detail(screen) -> str:
    return rendered_text(screen.detail_renderable, width=70)


@pilot_test
async def test_msprobe_tensor_dump_tree_values_histogram_and_slice():
    async with viewing(MSPROBE / "tensor_mix", DumpScreen) as (pilot, screen):
        tree = screen.dump_tree
        await wait_until(pilot, lambda: any(r.kind == "record" for _, r in lines(tree)), what="records listed")
        shown = lines(tree)
        assert shown[0][0].startswith("step 0") and shown[1][0].startswith("rank 0")
        top = [label for label, ref in shown if ref.kind == "record"]
        assert top[0].startswith("0 (Linear)") and any(t.startswith("Torch.softmax.0.forward") for t in top)
        linear = next(i for i, (label, _) in enumerate(shown) if label.startswith("0 (Linear)"))
        tree.move_cursor_to_line(linear)
        await pilot.press("enter")
        await wait_until(pilot, lambda: any(r.kind == "row" for _, r in lines(tree)))
        # the module's rows, then the API inside it
        children = [(label, ref) for label, ref in lines(tree) if ref.kind in ("row", "record")][1:]
        assert children[0][0].startswith("input.0") and "▣" in children[0][0]
        assert any(label.startswith("Functional.linear.0.forward") for label, _ in children)
        weight = next(n for n in range(tree.last_line + 1)
                      if tree.get_node_at_line(n).data.kind == "row" and tree.get_node_at_line(n).data.row >= 0
                      and "parameters.weight" in tree.get_node_at_line(n).label.plain)
        tree.move_cursor_to_line(weight)
        text = await wait_until(pilot, lambda: "histogram" in detail(screen) and detail(screen),
                                what="values and histogram")
        assert "Module.0.Linear.forward.0.parameters.weight" in text and "[8, 4]" in text
        assert "32 counted" in text  # every element of the 8x4 weight in the histogram
        await pilot.press("v")
        await pilot.press(*"0, :2", "enter")
        text = await wait_until(pilot, lambda: "tensor[0, :2]" in detail(screen) and detail(screen))
        assert "shape [2]" in text
        await pilot.press("v", "ctrl+u", *"9, 0", "enter")  # out of range: said, not crashed
        await wait_until(pilot, lambda: "index" in detail(screen) and "out of bounds" in detail(screen))


@pilot_test
async def test_search_keeps_matching_records_and_their_modules():
    async with viewing(MSPROBE / "tensor_mix", DumpScreen, size=(100, 30)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.index is not None)
        await pilot.press("slash", *"softmax", "enter")
        await wait_until(pilot, lambda: screen.matches > 0)
        records = [label.split("  ")[0] for label, ref in lines(screen.dump_tree) if ref.kind == "record"]
        assert records == ["Torch.softmax.0.forward", "Torch.softmax.0.backward"], records
        assert "softmax" in screen.dump_tree.cursor_node.label.plain  # n-style jump to the first match
        await pilot.press("slash", "ctrl+u", "enter")  # an empty search shows everything again
        await wait_until(pilot, lambda: not screen.search and
                         len([r for _, r in lines(screen.dump_tree) if r.kind == "record"]) > 2)


@pytest.fixture(scope="module")
def overflow_run(tmp_path_factory):
    pytest.importorskip("torch")
    root = tmp_path_factory.mktemp("overflow")
    return root, Path(run_sample(root, "overflow_check.json").run_dir)


@pilot_test
async def test_our_dump_inf_nan_filter_from_an_overflow_run(overflow_run):
    root, run = overflow_run
    app = ProbeApp(root, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        await open_view(pilot, run, OverflowScreen)
        await wait_until(pilot, lambda: app.screen.result is not None)
        await pilot.press("d")  # the kept calls' tensors
        screen = await wait_until(pilot, lambda: isinstance(app.screen, DumpScreen) and app.screen)
        await wait_until(pilot, lambda: screen.index is not None)
        assert screen.index.origin == "probe-tui" and screen.index.holds["tensor"]
        await pilot.press("f")
        await wait_until(pilot, lambda: screen.nonfinite_only and screen.matches > 0)
        records = [(label, ref) for label, ref in lines(screen.dump_tree) if ref.kind == "record"]
        assert records[0][0].startswith("Torch.exp.0.forward") and "inf/nan" in records[0][0]
        rows = [(label, ref) for label, ref in lines(screen.dump_tree) if ref.kind == "row"]
        output = next(ref for label, ref in rows if label.startswith("output.0"))
        assert "inf/nan" in next(label for label, ref in rows if ref is output)
        line = next(n for n in range(screen.dump_tree.last_line + 1) if screen.dump_tree.get_node_at_line(n).data is output)
        screen.dump_tree.move_cursor_to_line(line)
        text = await wait_until(pilot, lambda: "histogram" in detail(screen) and detail(screen))
        assert "+inf" in text and "float16" in text


def test_pieces_index_records_under_their_modules_and_read_tensors():
    index = DumpIndex(MSPROBE / "tensor_mix")
    try:
        assert index.origin == "msprobe" and index.steps() == [0] and index.ranks == [0]
        piece = index.piece(0, 0)
        linear = piece.records["Module.0.Linear.forward.0"]
        assert "Functional.linear.0.forward" in linear.children
        assert piece.records["Functional.linear.0.forward"].parent == "Module.0.Linear.forward.0"
        assert piece.keep(nonfinite=True) == set()
        kept = piece.keep(match=lambda name: "relu" in name)
        assert "Functional.relu.0.forward" in kept and "Module.1.ReLU.forward.0" in kept
        i = next(int(r) for r in linear.rows if piece.rows.slot[r] == "parameters.weight")
        reader = index.tensor_reader(0, 0)
        try:
            shape, first = read_slice(reader, piece.rows, i)
            assert shape == (8, 4) and first.size == 32
            _, part = read_slice(reader, piece.rows, i, "1, ::2")
            assert part.shape == (2,) and np.allclose(part, first.reshape(8, 4)[1, ::2])
            with pytest.raises(PreviewError):
                read_slice(reader, piece.rows, i, "x")
            hist = histogram(reader, piece.rows, i, bins=8)
            assert int(hist.counts.sum()) == 32 and hist.nan == hist.posinf == 0
            assert np.isclose(hist.edges[0], piece.rows.min[i], rtol=1e-6)
        finally:
            reader.close()
    finally:
        index.close()


def test_rows_without_tensor_data_say_so(tmp_path):
    from tests.app_pilot import write_dump

    write_dump(tmp_path / "run" / "rank0", golden=False)
    index = DumpIndex(tmp_path / "run" / "rank0")
    try:
        piece = index.piece(0, 0)
        assert piece.top[:2] == ["Module.blocks.0.Block.forward.0", "Module.blocks.1.Block.forward.0"]
        with pytest.raises(PreviewError, match="statistics only"):
            read_slice(index.tensor_reader(0, 0), piece.rows, 0)
    finally:
        index.close()
    assert isinstance(DumpRef("row", 0), DumpRef)


def write_two_steps(rank_dir: Path) -> Path:
    """Our dump of two steps: a linear and a softmax (whose ``dim=-1`` is a non-tensor argument) per step."""
    import json

    from engines.store import DumpWriter
    from tests.app_pilot import META

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with DumpWriter(rank_dir, meta=META) as w:
        for step in (0, 1):
            names = ["Functional.linear.0.forward", "Functional.softmax.0.forward"]
            rows = w.add_records(step=step, name=names, kind=0, direction=0, parent="",
                                 args=[json.dumps({"args": [], "kwargs": {}}),
                                       json.dumps({"args": [], "kwargs": {"dim": -1}})])
            w.add_tensors(step=step, valid=15, record=list(rows), slot=["output.0", "output.0"],
                          dtype=["torch.float32"] * 2, shape=[x.shape, x.shape], max=[7.0, 1.0], min=[0.0, 0.0],
                          mean=[3.5, 0.25], norm=[11.8, 1.0])
            w.commit_step(step)
    return rank_dir


@pilot_test
async def test_search_opens_the_matches_of_every_step_and_scalars_name_their_type(tmp_path):
    """`/` and `f` unfolded the first step's matches only; a non-tensor argument read `<class 'int'> = -1`."""
    run = write_two_steps(tmp_path / "run" / "rank0")
    async with viewing(run, DumpScreen, root=tmp_path, size=(100, 30)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.index is not None)
        await pilot.press("slash", *"softmax", "enter")
        await wait_until(pilot, lambda: screen.matches == 2)
        shown = lines(screen.dump_tree)
        records = [(ref.step, label.split("  ")[0]) for label, ref in shown if ref.kind == "record"]
        assert records == [(0, "Functional.softmax.0.forward"), (1, "Functional.softmax.0.forward")], records
        scalars = [label for label, ref in shown if ref.kind == "row" and "dim" in label]
        assert scalars == ["input.dim int = -1"] * 2, scalars


@pilot_test
async def test_a_cleared_filter_leaves_the_other_read_steps_shut_until_opened(tmp_path):
    """Clearing a search refilled the tree with every record of every step the search had read, shut ones too
    (hundreds of lines a step); a shut step's records are now added as it opens, its line says what it holds."""
    run = write_two_steps(tmp_path / "run" / "rank0")
    async with viewing(run, DumpScreen, root=tmp_path, size=(100, 30)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.index is not None)
        await pilot.press("slash", *"softmax", "enter")
        await wait_until(pilot, lambda: screen.matches == 2)
        await pilot.press("slash", "ctrl+u", "enter")
        await wait_until(pilot, lambda: not screen.search and screen.keep is None)
        tree = screen.dump_tree
        first, second = (step.children[0] for step in tree.root.children)
        assert [c.data.record for c in first.children] == ["Functional.linear.0.forward",
                                                           "Functional.softmax.0.forward"]
        assert first.is_expanded and not second.is_expanded
        assert not second.children
        assert second.label.plain == "rank 0  2 records · 3 rows"
        second.expand()
        await wait_until(pilot, lambda: len(second.children) == 2, what="the second step's records")
        assert [c.data.record for c in second.children] == ["Functional.linear.0.forward",
                                                            "Functional.softmax.0.forward"]


def write_wide_step(rank_dir: Path, records: int = 60) -> Path:
    """Our dump of two steps of ``records`` linears each."""
    import json

    from engines.store import DumpWriter
    from tests.app_pilot import META

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    with DumpWriter(rank_dir, meta=META) as w:
        for step in (0, 1):
            names = ["Functional.linear.{}.forward".format(n) for n in range(records)]
            rows = w.add_records(step=step, name=names, kind=0, direction=0, parent="",
                                 args=[json.dumps({"args": [], "kwargs": {}})] * records)
            w.add_tensors(step=step, valid=15, record=list(rows), slot=["output.0"] * records,
                          dtype=["torch.float32"] * records, shape=[x.shape] * records, max=[7.0] * records,
                          min=[0.0] * records, mean=[3.5] * records, norm=[11.8] * records)
            w.commit_step(step)
    return rank_dir


@pilot_test
async def test_the_tree_asks_for_a_layout_once_a_fill_and_not_as_the_focus_leaves_it(tmp_path, monkeypatch):
    """Textual's Tree forgets its lines and asks for a layout of the screen on each line added (a step of 400
    records did it 400 times, ~100 ms of CPU) and on each restyle (the focus going to the search field at `/`),
    as if its lines had changed."""
    asked = []
    original = DumpTree.refresh

    def counted(self, *regions, **options):
        if options.get("layout"):
            asked.append(self)
        return original(self, *regions, **options)

    monkeypatch.setattr(DumpTree, "refresh", counted)
    run = write_wide_step(tmp_path / "run" / "rank0")
    async with viewing(run, DumpScreen, root=tmp_path, size=(100, 30)) as (pilot, screen):
        await wait_until(pilot, lambda: screen.index is not None)
        tree = screen.dump_tree
        await wait_until(pilot, lambda: len(tree.root.children[0].children[0].children) == 60, what="step 0 filled")
        await pilot.pause(0.3)
        second = tree.root.children[1].children[0]
        asked.clear()
        second.expand()
        await wait_until(pilot, lambda: len(second.children) == 60, what="step 1 filled")
        await pilot.pause(0.2)
        assert 1 <= len(asked) <= 2, len(asked)  # the line opened, then its records added at once
        asked.clear()
        await pilot.press("slash")
        await wait_until(pilot, lambda: screen.focused is screen.query_one("#dump-input"), what="the search field")
        await pilot.pause(0.2)
        assert asked == []
        assert "Functional.linear.1.forward" in [c.data.record for c in second.children]
