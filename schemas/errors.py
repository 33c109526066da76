"""Config problems as data: every issue carries the field path it is about.

`ConfigError` collects all issues of one load (not only the first); `str(err)` prints one line per issue,
`<path>: <message> (<hint>)`. Paths look like `statistics.data_mode[1]`, `rank[2]` or `monitor.targets["a.b"]`.
`issues_from_validation_error` turns pydantic's errors into such issues, rewriting its messages so they name
the offending value and, for choices, suggest the closest allowed one.
"""

import difflib
import json
import re
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from pydantic import ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

__all__ = [
    "ConfigIssue",
    "ConfigError",
    "ConfigWarning",
    "WarnFn",
    "clip",
    "format_path",
    "join_path",
    "did_you_mean",
    "show",
    "echo",
    "rule_error",
    "issues_from_validation_error",
    "default_warn",
]

WarnFn = Callable[[str, str], None]

# How much of a user's key or value a message echoes (longer ones end in "..."): an unknown key of 100,000
# characters is reported by its first few dozen.
MAX_KEY_CHARS = 40
MAX_VALUE_CHARS = 80
MAX_PATH_CHARS = 4096  # a file path may be long; key paths are already short (MAX_KEY_CHARS a key)
MAX_MESSAGE_CHARS = 500

# The custom pydantic error type our cross-field validators raise; ctx["issues"] holds (path, message, hint).
RULES_ERROR = "config_rules"


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config: where (`path`), what (`message`), and how to fix it (`hint`, may be empty).

    Unpacks like a tuple (`path, message, hint = issue`); `issue.__dict__` / `as_dict()` give a JSON-ready dict.
    """

    path: str
    message: str
    hint: str = ""

    def __post_init__(self) -> None:
        # A backstop: whatever a validator echoed, an issue stays one readable line.
        for name, limit in (("path", MAX_PATH_CHARS), ("message", MAX_MESSAGE_CHARS), ("hint", MAX_MESSAGE_CHARS)):
            value = getattr(self, name)
            if not isinstance(value, str):
                value = str(value)
            object.__setattr__(self, name, clip(value.replace("\n", " "), limit))

    def __iter__(self) -> Iterator[str]:
        return iter((self.path, self.message, self.hint))

    def as_dict(self) -> Dict[str, str]:
        return {"path": self.path, "message": self.message, "hint": self.hint}

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(Exception):
    """Raised by `load_config` with every problem found; `.errors` is the list of `ConfigIssue`."""

    def __init__(self, errors: Iterable[ConfigIssue]):
        self.errors: List[ConfigIssue] = list(errors)
        super().__init__(self.errors)  # args[0] is the list, so the error pickles and re-raises across processes

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


class ConfigWarning(UserWarning):
    """Category used for config warnings when no `on_warning` callback is given."""


def default_warn(path: str, message: str) -> None:
    warnings.warn(f"{path}: {message}" if path else message, ConfigWarning, stacklevel=4)


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in "..." when cut."""
    return text if len(text) <= limit else text[:max(limit - 3, 0)] + "..."


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def format_path(loc: Sequence[Any]) -> str:
    """('statistics', 'data_mode', 1) -> 'statistics.data_mode[1]'; odd keys are quoted: targets["a.b"]."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
            continue
        text = clip(str(part), MAX_KEY_CHARS)
        if _IDENT.match(text):
            out += f".{text}" if out else text
        else:
            out += f"[{json.dumps(text)}]"
    return out


def join_path(prefix: str, rest: str) -> str:
    if not prefix:
        return rest
    if not rest:
        return prefix
    return prefix + rest if rest.startswith("[") else f"{prefix}.{rest}"


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A hint naming the closest candidate, or '' when nothing is close."""
    word = str(word)
    if len(word) > 2 * MAX_KEY_CHARS:  # nothing we offer is that long; difflib would only spend time on it
        return ""
    options = sorted(set(candidates))
    by_lower = {c.lower(): c for c in options}
    if word.lower() in by_lower and by_lower[word.lower()] != word:
        return f"did you mean '{by_lower[word.lower()]}'?"
    close = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=0.6)
    return f"did you mean '{by_lower[close[0]]}'?" if close else ""


def echo(value: Any) -> str:
    """``repr(value)`` for a message, shortened when long (and safe for values that cannot be printed)."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        text = f"<{type(value).__name__}>"
    return clip(text, MAX_VALUE_CHARS)


def show(value: Any) -> str:
    """Render a config value the way the user wrote it (JSON), shortened when long."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        try:
            text = repr(value)
        except (ValueError, RecursionError):  # an int too long to print, a self-containing list
            text = f"<{type(value).__name__}>"
    return clip(text, MAX_VALUE_CHARS)


def rule_error(issues: Sequence[Tuple[str, str, str]]) -> PydanticCustomError:
    """Build the error a model validator raises for broken cross-field rules (paths relative to the model)."""
    summary = "; ".join(f"{p}: {m}" if p else m for p, m, _ in issues)
    return PydanticCustomError(RULES_ERROR, "{summary}", {"summary": summary, "issues": list(issues)})


class RuleCollector:
    """Small helper for model validators: collect (path, message, hint) and raise them all at once."""

    def __init__(self) -> None:
        self.issues: List[Tuple[str, str, str]] = []

    def add(self, path: str, message: str, hint: str = "") -> None:
        self.issues.append((path, message, hint))

    def raise_if_any(self) -> None:
        if self.issues:
            raise rule_error(self.issues)


_QUOTED = re.compile(r"'((?:[^'\\]|\\.)*)'")


def _choices(expected: str) -> List[str]:
    return _QUOTED.findall(expected)


def _limit_message(kind: str, ctx: dict, value: Any) -> str:
    words = {
        "greater_than": ("must be greater than", "gt"),
        "greater_than_equal": ("must be at least", "ge"),
        "less_than": ("must be less than", "lt"),
        "less_than_equal": ("must be at most", "le"),
    }
    text, key = words[kind]
    return f"{text} {ctx.get(key)} (got {show(value)})"


def _message_for(err: ErrorDetails) -> Tuple[str, str]:
    """(message, hint) for one pydantic error dict."""
    kind = err["type"]
    ctx = err.get("ctx") or {}
    value = err.get("input")
    if kind == "missing":
        return "is required", ""
    if kind == "extra_forbidden":
        return "unknown key", ""
    if kind == "bool_type":
        hint = "write true or false without quotes" if isinstance(value, str) else ""
        return f"must be true or false (got {show(value)})", hint
    if kind in ("int_type", "int_parsing", "int_from_float"):
        hint = "write the number without quotes" if isinstance(value, str) else ""
        return f"must be an integer (got {show(value)})", hint
    if kind in ("float_type", "float_parsing"):
        hint = "write the number without quotes" if isinstance(value, str) else ""
        return f"must be a number (got {show(value)})", hint
    if kind == "string_type":
        return f"must be a string (got {show(value)})", ""
    if kind == "list_type":
        return f"must be a list (got {show(value)})", ""
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be an object {{...}} (got {show(value)})", ""
    if kind == "literal_error":
        options = _choices(str(ctx.get("expected", "")))
        listed = ", ".join(f"'{o}'" for o in options)
        hint = did_you_mean(value, options) if isinstance(value, str) else ""
        return f"must be one of {listed} (got {show(value)})", hint
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return _limit_message(kind, ctx, value), ""
    if kind == "string_too_short":
        return "must not be empty", ""
    if kind == "string_too_long":
        length = len(value) if isinstance(value, str) else "?"
        return f"is {length} characters long; at most {ctx.get('max_length')} are allowed", ""
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s) (got {show(value)})", ""
    if kind == "too_long":
        return f"takes at most {ctx.get('max_length')} item(s) (got {ctx.get('actual_length')})", ""
    if kind == "string_pattern_mismatch":
        return f"{show(value)} does not match the expected form {ctx.get('pattern')}", ""
    if kind == "value_error":
        message = str(ctx.get("error", err.get("msg", "")))
        return message, ""
    hint = str(ctx.get("hint", "")) if isinstance(ctx, dict) else ""
    return err.get("msg", kind), hint


def issues_from_validation_error(exc: ValidationError, prefix: Sequence[Any] = ()) -> List[ConfigIssue]:
    """Translate pydantic errors into `ConfigIssue`s; rule errors expand into one issue per broken rule."""
    issues: List[ConfigIssue] = []
    for err in exc.errors(include_url=False):
        base = format_path(tuple(prefix) + tuple(err["loc"]))
        ctx = err.get("ctx") or {}
        if err["type"] == RULES_ERROR:
            for rel, message, hint in ctx.get("issues", []):
                issues.append(ConfigIssue(join_path(base, rel), message, hint))
            continue
        message, hint = _message_for(err)
        issues.append(ConfigIssue(base, message, hint))
    return issues


def warn_from_context(context: Optional[dict]) -> WarnFn:
    """The warning callback passed to model validators through pydantic's validation context."""
    if context and callable(context.get("warn")):
        return context["warn"]
    return default_warn
