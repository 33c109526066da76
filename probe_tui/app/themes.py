"""The app's colours come from the theme's variables ($text-primary headings, $warning, $error, ...), never from
hard-coded colours in the .tcss files. Textual's default themes give warnings, errors and the accent colours that
a 16-colour terminal (TERM=xterm, vt100) shows as the same bright red, so on such a terminal the app starts on
``probe-ansi``: the terminal's own ANSI colours, warnings yellow, errors red, headings cyan.
"""

from typing import Optional

from textual.app import App
from textual.theme import BUILTIN_THEMES, Theme

ANSI_THEME = "probe-ansi"
FEW_COLOURS = ("standard", "windows")
"""Rich's names of the 8/16-colour systems."""


def ansi_theme() -> Theme:
    base = BUILTIN_THEMES["ansi-dark"]
    return Theme(name=ANSI_THEME, primary="ansi_cyan", secondary="ansi_blue", warning=base.warning,
                 error=base.error, success=base.success, accent="ansi_magenta", foreground=base.foreground,
                 background=base.background, surface=base.surface, panel=base.panel, boost=base.boost, dark=True,
                 luminosity_spread=base.luminosity_spread, text_alpha=base.text_alpha,
                 variables=dict(base.variables), ansi=True)


def theme_for(color_system: Optional[str]) -> Optional[str]:
    """The theme to start on for a terminal of ``color_system`` (Rich's name); None keeps Textual's default."""
    return ANSI_THEME if color_system in FEW_COLOURS else None


def apply_terminal_theme(app: App, color_system: Optional[str] = None) -> None:
    """Register the app's themes and pick the one the terminal (``color_system``: Rich's name, by default what
    Rich found from TERM and COLORTERM) can show. A headless app (tests, snapshots) keeps the default theme
    unless told the colour system, so its pictures do not depend on the TERM of the machine."""
    if ANSI_THEME not in app.available_themes:
        app.register_theme(ansi_theme())
    if color_system is None and not app.is_headless:
        color_system = app.console.color_system
    chosen = theme_for(color_system)
    if chosen is not None:
        app.theme = chosen
