"""Colours come from the theme's variables, and stay apart on a 16-colour terminal (TERM=xterm, vt100): warnings,
errors and headings all showed as the same bright red there, and light themes kept orange headings. The Python
colours its text by role (probe_tui/app/styles.py), never by a colour name."""

import ast
import re
from pathlib import Path

import pytest
from rich.color import ColorSystem
from rich.text import Text
from textual.color import Color
from textual.widgets import Static

from probe_tui.app.app import ProbeApp
from probe_tui.app.styles import themed
from probe_tui.app.themes import ANSI_THEME, apply_terminal_theme, theme_for
from tests.app_pilot import pilot_test, wait_until

APP = Path(__file__).resolve().parents[1] / "probe_tui" / "app"


def ansi_number(value: str) -> int:
    return Color.parse(value).rich_color.downgrade(ColorSystem.STANDARD).number


@pilot_test
async def test_a_16_colour_terminal_tells_warnings_errors_and_headings_apart(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.theme != ANSI_THEME  # headless: the default theme, whatever TERM says
        apply_terminal_theme(app, "standard")  # what Rich finds for TERM=xterm or vt100
        await wait_until(pilot, lambda: app.theme == ANSI_THEME)
        await pilot.pause()
        variables = app.get_css_variables()
        shown = {k: ansi_number(variables[k]) for k in ("warning", "error", "text-primary")}
        assert len(set(shown.values())) == 3, shown


def test_only_few_colour_terminals_change_the_theme():
    assert theme_for("standard") == ANSI_THEME and theme_for("windows") == ANSI_THEME
    assert theme_for("256") is None and theme_for("truecolor") is None


@pilot_test
async def test_headings_follow_light_themes(tmp_path):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        app.theme = "textual-light"
        await pilot.pause()
        variables = app.get_css_variables()
        title = app.screen.query(".pane-title").first()
        assert title.styles.color.hex == Color.parse(variables["text-primary"]).hex
        assert title.styles.color.hex != Color.parse(variables["accent"]).hex  # textual-light's orange


def test_no_hard_coded_colour_in_the_stylesheets():
    """Every colour in a .tcss file is a theme variable ($name), never a name or a hex value."""
    found = []
    for path in APP.rglob("*.tcss"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            match = re.match(r"\s*(color|background|border[a-z-]*|outline[a-z-]*|scrollbar[a-z-]*)\s*:\s*(.*);", line)
            if match and re.search(r"#[0-9a-fA-F]{3,8}\b|\b(red|yellow|orange|green|blue|cyan|magenta|white|black)\b",
                                   match.group(2)):
                found.append("{}:{}: {}".format(path.name, n, line.strip()))
    assert not found, found


COLOUR_WORDS = {"red", "green", "yellow", "blue", "cyan", "magenta", "white", "black", "orange", "purple", "grey",
                "gray", "pink"}
STYLE_WORDS = {"bold", "dim", "italic", "reverse", "underline", "strike", "blink", "not", "on", "b", "i", "u"}
ALLOWED = {("styles.py", None), ("metric_chart.py", "COLORS"), ("metric_chart.py", "RICH_COLORS")}
"""The styles module maps roles to colours; the chart's series palette is a set of distinct hues, no role."""


def colour_word(word: str) -> bool:
    word = word.lower()
    for prefix in ("bright_", "dark_", "light_"):
        word = word[len(prefix):] if word.startswith(prefix) else word
    return word.rstrip("0123456789") in COLOUR_WORDS or re.fullmatch(r"#[0-9a-f]{3}([0-9a-f]{3})?", word) is not None


def style_strings(path: Path):
    """(line, text) of every string constant that is a Rich style naming a colour ("bold red", "yellow")."""
    tree = ast.parse(path.read_text())
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and (path.name, t.id) in ALLOWED
                                                for t in node.targets):
            skipped.update(id(n) for n in ast.walk(node.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            words = node.value.split()
            if words and all(w.lower() in STYLE_WORDS or colour_word(w) for w in words) and any(
                    colour_word(w) for w in words):
                yield node.lineno, node.value


def test_no_colour_names_in_the_apps_python():
    found = ["{}:{}: {!r}".format(p.relative_to(APP), line, text) for p in sorted(APP.rglob("*.py"))
             if (p.name, None) not in ALLOWED for line, text in style_strings(p)]
    assert not found, "colours by role (probe_tui/app/styles.py), not by name:\n" + "\n".join(found)


@pytest.mark.parametrize("theme", [ANSI_THEME, "textual-light"])
@pilot_test
async def test_a_warning_and_an_error_render_in_different_colours(tmp_path, theme):
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(80, 24)) as pilot:
        apply_terminal_theme(app, "standard")
        app.theme = theme
        await pilot.pause()
        line = Text.assemble(("W", themed("warning")), ("E", themed("bold error")), ("H", themed("heading")))
        shown = app.screen.mount(Static(line, id="probe-line"))
        await shown
        await pilot.pause()
        strip = app.screen.query_one("#probe-line", Static).render_line(0)
        colours = {seg.text: seg.style.color for seg in strip if seg.text in ("W", "E", "H") and seg.style}
        assert set(colours) == {"W", "E", "H"}, colours
        assert len({colours["W"], colours["E"], colours["H"]}) == 3, colours
        if theme == ANSI_THEME:  # the terminal's own colours: yellow, red, cyan
            assert [colours[k].number for k in "WEH"] == [3, 1, 6], colours
        else:  # the light theme's text shades, not the dark theme's
            variables = app.get_css_variables()
            assert colours["E"].triplet.hex.lower() == variables["text-error"].lower()[:7]
            assert colours["W"].triplet.hex.lower() == variables["text-warning"].lower()[:7]


def _colour_of(widget, word: str, lines: int = 40):
    """The colour ``word`` is drawn in by ``widget`` (its rendered lines), None when it is not drawn."""
    for y in range(min(lines, widget.size.height or lines)):
        for segment in widget.render_line(y):
            if word in segment.text and segment.style is not None:
                return segment.style.color
    return None


def _colours_of(widget, lines: int = 40) -> set:
    return {segment.style.color for y in range(min(lines, widget.size.height)) for segment in widget.render_line(y)
            if segment.style is not None and segment.style.color is not None}


@pilot_test
async def test_a_theme_switch_recolours_the_text_already_on_screen(tmp_path):
    """Role colours were resolved when a view built its text: after a switch to a light theme the compare counts
    (a Static), and the status of a run on the home screen below it (a table cell), kept the dark theme's
    colours until their view redrew."""
    from textual.widgets import DataTable

    from probe_tui.app.screens.compare import CompareScreen
    from probe_tui.app.screens.home import HomeScreen
    from probe_tui.app.styles import theme_colours
    from tests.app_pilot import make_compare_result

    result = make_compare_result(tmp_path / "cmp")
    app = ProbeApp(tmp_path, root_label="~/exp")
    async with app.run_test(size=(120, 40)) as pilot:
        home = await wait_until(pilot, lambda: isinstance(app.screen, HomeScreen) and app.screen.scanned
                                and app.screen)
        app.open_path(result)
        screen = await wait_until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.data
                                  is not None and app.screen)
        counts = screen.query_one("#cmp-counts", Static)
        await wait_until(pilot, lambda: _colour_of(counts, "error") is not None, what="the counts drawn")
        dark = theme_colours(app, app.theme)
        assert _colour_of(counts, "error") == dark["error"]
        detail = screen.query_one("#detail-body", Static)  # the row's detail, drawn in a worker
        await wait_until(pilot, lambda: set(dark.values()) & _colours_of(detail), what="the detail drawn")
        app.theme = "textual-light"
        light = theme_colours(app, "textual-light")
        assert light["error"] != dark["error"]
        await wait_until(pilot, lambda: _colour_of(counts, "error") == light["error"],
                         what="the counts in the light theme's error colour")
        assert _colour_of(counts, "warning") == light["warning"]
        await wait_until(pilot, lambda: not (set(dark.values()) - set(light.values())) & _colours_of(detail),
                         what="no dark-theme role colour left in the detail")
        assert set(light.values()) & _colours_of(detail)
        runs = home.query_one("#runs", DataTable)
        status = runs.get_row_at(0)[2]  # the home screen below: its rows were coloured when listed
        assert status.plain == "compare result" and status.style.color == light["accent"], status.style
        for text in (cells[2] for _key, cells in runs.source):  # and so is every row a search brings back
            assert text.style.color == light["accent"]
