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
    """``module._orig_mod.layers.0.weight`` -> ``layers.0.weight`` (DECISIONS 14: prefixes stripped for matching)."""
    parts = [p for p in name.split(".") if p not in _WRAPPER_PARTS]
    return ".".join(parts)


def _compile_one(pattern: str) -> Callable[[str], bool]:
    pattern = pattern.strip()
    checks: List[Callable[[str], bool]] = [lambda name, p=pattern: name == p or name.startswith(p + ".")]
    if any(ch in pattern for ch in "*?["):
        checks.append(lambda name, p=pattern: fnmatch.fnmatchcase(name, p) or fnmatch.fnmatchcase(name, p + ".*"))
    try:
        regex = re.compile(f"(?:{pattern})(?:\\..*)?")
    except re.error:
        regex = None
    if regex is not None:
        checks.append(lambda name, r=regex: r.fullmatch(name) is not None)
    return lambda name: any(check(name) for check in checks)


def name_filter(patterns: Optional[Iterable[str]]) -> Callable[[str], bool]:
    """A predicate for names; no patterns (None or empty) selects everything."""
    compiled = [_compile_one(p) for p in (patterns or []) if str(p).strip()]
    if not compiled:
        return lambda name: True
    return lambda name: any(match(name) for match in compiled)


def module_filter(patterns: Optional[Iterable[str]]) -> Callable[[str], bool]:
    """Like :func:`name_filter` but without the prefix rule: ``blocks.0`` selects that module, not its children
    (use ``blocks.0.*`` or ``blocks\\.0\\..*`` for those). No patterns selects every module."""
    compiled = []
    for pattern in (p.strip() for p in (patterns or []) if str(p).strip()):
        checks: List[Callable[[str], bool]] = [lambda name, p=pattern: name == p]
        if any(ch in pattern for ch in "*?["):
            checks.append(lambda name, p=pattern: fnmatch.fnmatchcase(name, p))
        try:
            regex = re.compile(pattern)
            checks.append(lambda name, r=regex: r.fullmatch(name) is not None)
        except re.error:
            pass
        compiled.append(checks)
    if not compiled:
        return lambda name: True
    return lambda name: any(check(name) for checks in compiled for check in checks)


_SQUASH = [re.compile(p) for p in (r".*\.(layers?\..*)", r".*?(embeddings?\..*)", r".*?(final.*)", r".*?(output.*)",
                                   r".*?(norm.*)")]


def squash(name: str) -> str:
    """msprobe's ``squash_name``: keep the tail from the first ``layers.``/``embedding``/``final``/``output``/``norm``."""
    for pattern in _SQUASH:
        match = pattern.match(name)
        if match:
            return match.group(1)
    return name
