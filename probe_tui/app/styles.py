"""The colours of the app's text come from the running app's theme, by role, never from colour names.

A style spec names a role among Rich attributes: ``themed("bold error")``, ``themed("reverse success")``. The
roles map to the theme's text variables (docs/APP.md, "Colours"): ``error`` $text-error, ``warning``
$text-warning, ``success`` $text-success, ``info`` and ``heading`` $text-primary, ``accent`` $text-accent;
``muted`` is Rich's ``dim``. On ``probe-ansi`` (16-colour terminals) they are the terminal's red, yellow, green,
cyan and magenta; on a light theme the darker text shades that read on a light background.

A spec is resolved when the text is built (the screens build their text when they draw or update), against the
active app's current theme; outside an app (a unit test of a renderable) the ``textual-dark`` colours apply. A theme
switch recolours the text already on screen (``probe_tui/app/recolour.py``).
"""

from typing import Dict, Optional, Tuple, Union

from rich.color import Color as RichColor
from rich.style import Style
from textual.app import App, active_app
from textual.color import Color

ROLE_VARIABLES = {"error": "text-error", "warning": "text-warning", "success": "text-success",
                  "info": "text-primary", "heading": "text-primary", "accent": "text-accent"}
ATTRIBUTE_ROLES = {"muted": "dim"}
FALLBACK_THEME = "textual-dark"

_colours: Dict[str, Dict[str, RichColor]] = {}
"""Theme name -> role -> colour (a theme's variables are computed once)."""
_styles: Dict[Tuple[str, str], Style] = {}
"""(theme name, spec) -> the style :func:`themed` built (Rich styles are immutable: one object serves every cell;
a table of 338 rows asked for ~340 styles as it filled, each parsed and combined anew)."""


def _running_app() -> Optional[App]:
    try:
        return active_app.get()
    except LookupError:
        return None


def _theme_colours(app: Optional[App]) -> Dict[str, RichColor]:
    if app is None:
        if FALLBACK_THEME not in _colours:
            app = App()
            app.theme = FALLBACK_THEME
            theme_colours(app, FALLBACK_THEME)
        return _colours[FALLBACK_THEME]
    return theme_colours(app, app.theme)


def theme_colours(app: App, name: str) -> Dict[str, RichColor]:
    """Role -> colour of ``app``'s theme ``name`` (any registered theme, not only the current one), computed as
    Textual computes the theme's CSS variables."""
    if name not in _colours:
        theme = app.get_theme(name)
        if theme is None:
            raise KeyError(name)
        variables = {**app.get_theme_variable_defaults(), **theme.to_color_system().generate(), **theme.variables}
        _colours[name] = {role: Color.parse(variables[var]).rich_color for role, var in ROLE_VARIABLES.items()}
    return _colours[name]


def role_colour(role: str) -> RichColor:
    """The current theme's colour of ``role`` (a key of ROLE_VARIABLES)."""
    return _theme_colours(_running_app())[role]


def themed(spec: str) -> Style:
    """``spec``'s Rich attributes with its role's colour from the current theme (``""``: no style)."""
    app = _running_app()
    key = (app.theme if app is not None else FALLBACK_THEME, spec)
    style = _styles.get(key)
    if style is None:
        style = _styles[key] = _build_style(spec, _theme_colours(app))
    return style


def _build_style(spec: str, colours: Dict[str, RichColor]) -> Style:
    colour: Optional[RichColor] = None
    attributes = []
    for word in spec.split():
        if word in ROLE_VARIABLES:
            colour = colours[word]
        else:
            attributes.append(ATTRIBUTE_ROLES.get(word, word))
    style = Style.parse(" ".join(attributes)) if attributes else Style()
    return style + Style(color=colour) if colour is not None else style


def plot_colour(role: str) -> Union[int, Tuple[int, int, int]]:
    """``role``'s colour as plotext takes it: a 256-colour code for the terminal's own colours, else (r, g, b)."""
    colour = role_colour(role)
    if colour.number is not None and colour.triplet is None:
        return colour.number
    r, g, b = colour.get_truecolor()
    return (r, g, b)
