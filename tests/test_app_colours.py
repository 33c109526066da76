"""Colours come from the theme's variables, and stay apart on a 16-colour terminal (TERM=xterm, vt100): warnings,
errors and headings all showed as the same bright red there, and light themes kept orange headings."""

import re
from pathlib import Path

from rich.color import ColorSystem
from textual.color import Color

from probe_tui.app.app import ProbeApp
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
