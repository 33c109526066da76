r"""Parameter and module names: wrapper prefixes stripped, and the name filters of ``param_list`` / ``targets``.

A filter entry matches a name when it, or the name's dotted prefix, is equal to it, matches it as a glob
(``layers.*.attn``) or matches it as a regular expression (``layers\.\d+``): ``layers.0`` selects
``layers.0.attn.qkv.weight`` (msprobe's monitor selects parameters by prefix).
"""

import fnmatch
import re
from typing import Callable, Iterable, List, Optional

# Wrappers that insert a level into every name: DDP / DataParallel, FSDP1, torch.compile, activation checkpointing.
_WRAPPER_PARTS = ("module", "_fsdp_wrapped_module", "_orig_mod", "_checkpoint_wrapped_module")


def strip_wrappers(name: str) -> str:
    """``module._orig_mod.layers.0.weight`` -> ``layers.0.weight`` (docs/decisions/0014-training-setups.md: prefixes stripped for matching)."""
    parts = [p for p in name.split(".") if p not in _WRAPPER_PARTS]
    return ".".join(parts)


Check = Callable[[str], bool]


def _is_or_under(p: str) -> Check:
    return lambda name: name == p or name.startswith(p + ".")


def _is(p: str) -> Check:
    return lambda name: name == p


def _glob(p: str, children: bool) -> Check:
    if children:
        return lambda name: fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*")
    return lambda name: fnmatch.fnmatchcase(name, p)


def _regex(r: "re.Pattern[str]") -> Check:
    return lambda name: r.fullmatch(name) is not None


def _any(checks: List[Check]) -> Check:
    return lambda name: any(check(name) for check in checks)


def _compile_one(pattern: str) -> Check:
    pattern = pattern.strip()
    checks: List[Check] = [_is_or_under(pattern)]
    if any(ch in pattern for ch in "*?["):
        checks.append(_glob(pattern, children=True))
    try:
        checks.append(_regex(re.compile(f"(?:{pattern})(?:\\..*)?")))
    except re.error:
        pass
    return _any(checks)


def name_filter(patterns: Optional[Iterable[str]]) -> Check:
    """A predicate for names; no patterns (None or empty) selects everything."""
    compiled = [_compile_one(p) for p in (patterns or []) if str(p).strip()]
    if not compiled:
        return lambda name: True
    return _any(compiled)


def module_filter(patterns: Optional[Iterable[str]]) -> Check:
    """Like :func:`name_filter` but without the prefix rule: ``blocks.0`` selects that module, not its children
    (use ``blocks.0.*`` or ``blocks\\.0\\..*`` for those). No patterns selects every module."""
    checks: List[Check] = []
    for pattern in (p.strip() for p in (patterns or []) if str(p).strip()):
        checks.append(_is(pattern))
        if any(ch in pattern for ch in "*?["):
            checks.append(_glob(pattern, children=False))
        try:
            checks.append(_regex(re.compile(pattern)))
        except re.error:
            pass
    if not checks:
        return lambda name: True
    return _any(checks)


_SQUASH = [re.compile(p) for p in (r".*\.(layers?\..*)", r".*?(embeddings?\..*)", r".*?(final.*)", r".*?(output.*)",
                                   r".*?(norm.*)")]


def squash(name: str) -> str:
    """msprobe's ``squash_name``: keep the tail from the first ``layers.``/``embedding``/``final``/``output``/``norm``."""
    for pattern in _SQUASH:
        match = pattern.match(name)
        if match:
            return match.group(1)
    return name
