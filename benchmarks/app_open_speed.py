"""How fast the app opens and scrolls a large compare result.

    python benchmarks/app_open_speed.py [--rows 1000000] [--scroll 10000] [--keep DIR] [--reuse DIR]
    python benchmarks/app_open_speed.py --builder [--repeat 5] [--tabs 30]

``--builder`` measures the config builder instead (open, load a file, Tab; ``builder_speed.py``).

Builds two statistics dumps of ``--rows`` tensor rows (a transformer-like module tree: blocks of attention and MLP
modules, each with its API calls), compares them with the compare engine (exact names, HDF5 result only), then
opens the result in the app headless (``App.run_test``, 120x40) and reports:

- open to first paint: from pushing the compare screen to the first frame that shows result rows;
- scrolling: ``--scroll`` rows page by page with pagedown, each page a repaint (ms a page, rows/s);
- the same for the model tree tab (expand the first block) and the first-divergence tab;
- sorting by rel_err and filtering to errors (numpy on the columns, in the worker).

``--reuse DIR`` skips building when DIR already holds a result made by ``--keep DIR``.
"""

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engines.store import DumpWriter  # noqa: E402

META = {"rank": 0, "world_size": 1, "framework": "pytorch"}
BLOCK_APIS = (("attn", "Attention", ("Functional.linear", "Torch.matmul", "Functional.softmax", "Torch.matmul",
                                     "Functional.linear")),
              ("mlp", "MLP", ("Functional.linear", "Functional.gelu", "Functional.linear")))


def model_records(n_rows: int):
    """Records (name, kind, parent) in call order: blocks until ``n_rows`` tensor rows (3 a call) are reached."""
    names, kinds, parents = [], [], []
    counters = {}
    block = 0
    rows = 0
    while rows < n_rows:
        top = "Module.layers.{}.Block.forward.0".format(block)
        names.append(top)
        kinds.append(1)
        parents.append("")
        for sub, cls, apis in BLOCK_APIS:
            module = "Module.layers.{}.{}.{}.forward.0".format(block, sub, cls)
            names.append(module)
            kinds.append(1)
            parents.append(top)
            for api in apis:
                n = counters.get(api, 0)
                counters[api] = n + 1
                names.append("{}.{}.forward".format(api, n))
                kinds.append(0)
                parents.append(module)
                rows += 3
        block += 1
    return names, np.array(kinds, dtype=np.uint8), parents


def write_dump(rank_dir: Path, n_rows: int, noise: float, seed: int, fault_block: int = -1) -> int:
    names, kinds, parents = model_records(n_rows)
    api = np.flatnonzero(kinds == 0)
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(0).random(api.size * 3) * 10 + 0.1
    scale = 1 + noise * rng.standard_normal(api.size * 3)
    if fault_block >= 0:  # one softmax far off: the fault the ranking should find
        soft = [i for i, r in enumerate(api) if names[r].startswith("Functional.softmax") and
                parents[r].startswith("Module.layers.{}.".format(fault_block))]
        for i in soft[:1]:
            scale[3 * i + 2] *= 1.5
    with DumpWriter(rank_dir, meta=META) as w:
        rows = w.add_records(step=0, name=names, kind=kinds, direction=0, parent=parents)
        step = 300_000
        for lo in range(0, api.size, step):
            hi = min(api.size, lo + step)
            k = (hi - lo) * 3
            mx = base[lo * 3:hi * 3] * scale[lo * 3:hi * 3]
            w.add_tensors(record=np.repeat(rows[api[lo:hi]], 3), step=0,
                          slot=["input.0", "input.1", "output.0"] * (hi - lo), dtype="torch.float32",
                          shape=[(8, 64, 256)] * k, max=mx, min=-mx, mean=mx / 100, norm=mx * 300, valid=15,
                          requires_grad=0)
        w.commit_step(0)
    return api.size * 3


def build(folder: Path, n_rows: int) -> Path:
    from engines.compare.engine import run_compare

    folder.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    rows = write_dump(folder / "target" / "rank0", n_rows, 1e-4, 1, fault_block=3)
    write_dump(folder / "golden" / "rank0", n_rows, 1e-4, 2)
    print("dumps: {:,} rows a side, {:.1f} s".format(rows, time.perf_counter() - t))
    t = time.perf_counter()
    out = folder / "result"
    run_compare({"task": "compare", "compare": {"target_path": str(folder / "target" / "rank0"),
                                                "golden_path": str(folder / "golden" / "rank0"),
                                                "mode": "statistics", "formats": ["hdf5"],
                                                "output_path": str(out)}}, None)
    print("compare engine: {:.1f} s".format(time.perf_counter() - t))
    return out


async def measure(result: Path, scroll_rows: int) -> dict:
    from probe_tui.app.app import ProbeApp
    from probe_tui.app.screens.compare import CompareScreen

    figures = {}
    app = ProbeApp(result.parent, root_label="bench")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        t0 = time.perf_counter()
        screen = CompareScreen(result)
        await app.push_screen(screen)
        while not (screen.data is not None and screen.results_table.row_count > 0):
            await asyncio.sleep(0.005)
        await pilot.pause()  # the frame with the rows
        figures["open_to_first_paint_s"] = time.perf_counter() - t0
        figures["rows"] = screen.data.n_rows
        table = screen.results_table
        table.focus()
        await pilot.pause()
        page = table.page_rows
        pages = max(1, scroll_rows // page)
        t = time.perf_counter()
        for _ in range(pages):
            table.action_page_down()
            await pilot.pause()
        elapsed = time.perf_counter() - t
        figures["scroll_rows"] = pages * page
        figures["scroll_ms_per_page"] = 1000 * elapsed / pages
        figures["scroll_rows_per_s"] = pages * page / elapsed
        t = time.perf_counter()
        await screen.apply_view(sort="rel_err")
        figures["sort_rel_err_s"] = time.perf_counter() - t
        t = time.perf_counter()
        await screen.apply_view(verdict_filter="errors")
        figures["filter_errors_s"] = time.perf_counter() - t
        figures["error_rows"] = table.row_count
        t = time.perf_counter()
        await screen.apply_view(search="softmax")
        figures["search_s"] = time.perf_counter() - t
        t = time.perf_counter()
        await pilot.press("2")
        while screen.divergence_table.row_count == 0:
            await asyncio.sleep(0.005)
        await pilot.pause()
        figures["divergence_tab_s"] = time.perf_counter() - t
        t = time.perf_counter()
        await pilot.press("3")
        while not screen.tree_ready:
            await asyncio.sleep(0.005)
        await pilot.pause()
        figures["tree_tab_s"] = time.perf_counter() - t
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--scroll", type=int, default=10_000)
    parser.add_argument("--keep", type=Path, help="build into this folder and keep it")
    parser.add_argument("--reuse", type=Path, help="a folder made by --keep")
    parser.add_argument("--builder", action="store_true", help="measure the config builder (builder_speed.py)")
    parser.add_argument("--repeat", type=int, default=5, help="--builder: builders opened")
    parser.add_argument("--tabs", type=int, default=30, help="--builder: Tab presses a builder")
    args = parser.parse_args()
    if args.builder:
        from benchmarks.builder_speed import measure_builder

        print(json.dumps(asyncio.run(measure_builder(args.repeat, args.tabs)), indent=2))
        return 0
    if args.reuse:
        result = args.reuse / "result"
    else:
        folder = args.keep or Path(tempfile.mkdtemp(prefix="probe-app-bench-"))
        result = build(folder, args.rows)
    try:
        figures = asyncio.run(measure(result, args.scroll))
    finally:
        if not args.keep and not args.reuse:
            shutil.rmtree(result.parent, ignore_errors=True)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
