"""A table's one-line cells drawn by ``widgets/table_cells.py`` are the lines Textual's general path draws: the
same characters in the same styles, for every visible cell of a real view (cursor row, zebra rows, a styled
status column, a cut column), and each kind of cell it must hand back to the general path."""

from rich.console import Console
from rich.padding import Padding
from rich.style import Style
from rich.text import Text
from textual.renderables.styled import Styled
from textual.widgets import DataTable

from probe_tui.app.screens.free_benchmark import FreeBenchmarkScreen
from probe_tui.app.widgets import find_table
from probe_tui.app.widgets.find_table import FindTable
from probe_tui.app.widgets.table_cells import one_line_cell
from tests.app_pilot import make_free_benchmark_run, open_view, pilot_test, wait_until

CONSOLE = Console(width=120, color_system="truecolor")
PRE = Style(color="red", bgcolor="black") + Style.from_meta({"row": 3, "column": 1})
POST = Style(bold=True)


def characters(lines):
    """Each character of the lines with its style (how they are split into segments does not show)."""
    return [(ch, seg.style) for line in lines for seg in line for ch in seg.text]


def general(cell, width: int, pad: int, pre: Style = PRE, post: Style = POST):
    options = CONSOLE.options.update_dimensions(width, 1).update(no_wrap=True)
    return CONSOLE.render_lines(Styled(Padding(cell, (0, pad)), pre_style=pre, post_style=post), options)


def test_one_line_texts_draw_as_the_general_path_does():
    cells = [Text("abc"), Text("abc", style="bold green"), Text.assemble(("x", "red"), " y ", ("zz", "italic")),
             Text(""), Text("héllo wörld"), Text("日本語"), Text("abc", end=""), Text("1.5e-03", justify="default")]
    drawn = 0
    for cell in cells:
        for width, pad in ((12, 1), (8, 1), (6, 0), (3, 0), (2, 1)):
            fast = one_line_cell(CONSOLE, cell, width, pad, PRE, POST)
            if fast is not None:
                drawn += 1
                assert len(fast) == 1
                assert characters(fast) == characters(general(cell, width, pad)), (cell.plain, width, pad)
    assert drawn >= 20


def test_cells_the_general_path_must_draw_are_handed_back():
    for cell, width in ((Text("a longer text"), 6), (Text("two\nlines"), 20), (Text("tab\there"), 20),
                        (Text("right", justify="right"), 10), (Text("centre", justify="center"), 10),
                        (Text("pad me", justify="left"), 12), ("plain str", 20), (Text("x"), 1)):
        assert one_line_cell(CONSOLE, cell, width, 1, PRE, POST) is None, cell


@pilot_test
async def test_every_visible_cell_of_a_view_is_the_general_paths_line(tmp_path, monkeypatch):
    run = make_free_benchmark_run(tmp_path)
    async with open_view_app(tmp_path) as pilot:
        screen = await open_view(pilot, run, FreeBenchmarkScreen)
        table = screen.query_one(FindTable)
        await wait_until(pilot, lambda: table.row_count > 0)
        await pilot.press("down")  # the cursor on the second row: cursor, even and odd rows all drawn
        await pilot.pause()
        compared = fast_drawn = 0
        calls = []
        real = find_table.one_line_cell

        def counted(*args):
            lines = real(*args)
            calls.append(lines is not None)
            return lines

        monkeypatch.setattr(find_table, "one_line_cell", counted)
        base = table.rich_style
        for row in range(table.row_count):
            for column in range(len(table.columns)):
                width = table.ordered_columns[column].get_render_width(table)
                for cursor in (False, True):
                    table._cell_render_cache.clear()
                    ours = table._render_cell(row, column, base, width, cursor=cursor)
                    table._cell_render_cache.clear()
                    textuals = DataTable._render_cell(table, row, column, base, width, cursor=cursor)
                    assert characters(ours) == characters(textuals), (row, column, cursor)
                    compared += 1
        fast_drawn = sum(calls)
        assert compared >= 8 and fast_drawn >= compared // 2  # most cells took the short path


def open_view_app(folder):
    from probe_tui.app.app import ProbeApp

    return ProbeApp(folder, root_label="~/exp").run_test(size=(120, 40))
