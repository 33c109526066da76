"""Everything we ship or run keeps to Python 3.9 (docs/decisions/0013-supported-versions.md).

Three checks over every module of schemas/, engines/, probe_tui/, sample_configs/, benchmarks/ and scripts/:
- the source parses with the 3.9 grammar (``ast.parse(feature_version=(3, 9))``: ``match``, ``except*``, ...);
- what that grammar check lets through but 3.9 cannot run: ``X | Y`` in an annotation Python evaluates (any
  annotation of a module without ``from __future__ import annotations``, and class fields everywhere: pydantic and
  ``typing.get_type_hints`` evaluate them), ``X | None`` and ``int | str`` as values, parenthesized context
  managers, and names the standard library gained after 3.9 (unless guarded by a version check, an ImportError
  handler or ``TYPE_CHECKING``);
- a real Python 3.9 compiles every module, when one is installed.
"""

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("schemas", "engines", "probe_tui", "sample_configs", "benchmarks", "scripts")

_TYPE_NAMES = {"int", "float", "complex", "str", "bytes", "bool", "list", "dict", "tuple", "set", "frozenset", "type",
               "object"}
# (module, name) the standard library gained after 3.9; name None: the whole module.
_NEWER = {
    ("tomllib", None), ("itertools", "pairwise"), ("datetime", "UTC"), ("enum", "StrEnum"), ("enum", "ReprEnum"),
    ("contextlib", "chdir"), ("contextlib", "aclosing"), ("types", "NoneType"), ("types", "UnionType"),
    ("types", "EllipsisType"), ("inspect", "get_annotations"), ("dataclasses", "KW_ONLY"), ("math", "cbrt"),
    ("math", "exp2"), ("hashlib", "file_digest"), ("sys", "orig_argv"), ("sys", "stdlib_module_names"),
    ("logging", "getLevelNamesMapping"), ("asyncio", "timeout"), ("asyncio", "TaskGroup"),
    *(("typing", n) for n in ("TypeAlias", "ParamSpec", "Concatenate", "TypeGuard", "Self", "LiteralString",
                              "Never", "assert_never", "assert_type", "reveal_type", "dataclass_transform",
                              "Required", "NotRequired", "Unpack", "TypeVarTuple", "override", "is_typeddict",
                              "TypeIs", "ReadOnly")),
}
_NEWER_BUILTINS = {"aiter", "anext", "ExceptionGroup", "BaseExceptionGroup", "EncodingWarning"}
_NEWER_KEYWORDS = {"zip": {"strict"}, "dataclass": {"slots", "kw_only", "match_args"}, "field": {"kw_only"},
                   "bisect": {"key"}, "bisect_left": {"key"}, "bisect_right": {"key"}, "insort": {"key"},
                   "insort_left": {"key"}, "insort_right": {"key"}}


def shipped_modules():
    for folder in SHIPPED:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _rel(path):
    return path.relative_to(ROOT).as_posix()


def _guarded(node, parents):
    """Inside ``if sys.version_info ...``, ``if TYPE_CHECKING``, ``if hasattr(...)`` (statement or expression) or a
    try that catches ImportError/AttributeError."""
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.If, ast.IfExp)):
            test = ast.unparse(node.test)
            if any(guard in test for guard in ("version_info", "TYPE_CHECKING", "hasattr(")):
                return True
        if isinstance(node, ast.Try):
            caught = " ".join(ast.unparse(h.type) for h in node.handlers if h.type is not None)
            if any(e in caught for e in ("ImportError", "ModuleNotFoundError", "AttributeError")):
                return True
    return False


def _evaluated_annotations(tree, future):
    """The annotations Python 3.9 evaluates: every one outside function bodies without the __future__ import;
    class fields always (pydantic, dataclasses' and get_type_hints' users evaluate them, strings included)."""
    class_fields, others = [], []

    def visit(node, in_function, in_class):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                args = child.args
                for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
                    if arg is not None and arg.annotation is not None:
                        others.append(arg.annotation)
                if child.returns is not None:
                    others.append(child.returns)
                visit(child, True, False)
            elif isinstance(child, ast.ClassDef):
                visit(child, in_function, True)
            elif isinstance(child, ast.AnnAssign):
                if in_class:
                    class_fields.append(child.annotation)
                elif not in_function:
                    others.append(child.annotation)
            else:
                visit(child, in_function, in_class)

    visit(tree, False, False)
    return class_fields + ([] if future else others), class_fields


def _has_union_operator(annotation, look_in_strings):
    for node in ast.walk(annotation):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return True
        if look_in_strings and isinstance(node, ast.Constant) and isinstance(node.value, str) and "|" in node.value:
            return True
    return False


def _is_type_operand(node):
    return (isinstance(node, ast.Constant) and node.value is None) or (
        isinstance(node, ast.Name) and node.id in _TYPE_NAMES)


def _offset(lines, lineno, col):
    """The byte offset of (lineno, col) in the source (ast columns count UTF-8 bytes)."""
    return sum(len(line) for line in lines[: lineno - 1]) + col


def _parenthesized_with(node, source, lines):
    """``with (a as b, c):`` (3.10 grammar; 3.9 accepts it only by accident of its new parser)."""
    if not isinstance(node, (ast.With, ast.AsyncWith)):
        return False
    if len(node.items) == 1 and node.items[0].optional_vars is None:
        return False
    start = _offset(lines, node.lineno, node.col_offset)
    head = source[start:].split(b"with", 1)[1].lstrip()
    if not head.startswith(b"("):
        return False
    last = node.items[-1].optional_vars or node.items[-1].context_expr
    rest = source[_offset(lines, last.end_lineno, last.end_col_offset):].lstrip(b" \t\r\n,")
    return rest.startswith(b")")


def newer_than_39(source, rel):
    """Every construct of ``source`` that Python 3.9 cannot run, as 'path:line what'."""
    try:
        tree = ast.parse(source, filename=rel, feature_version=(3, 9))
    except SyntaxError as err:
        return [f"{rel}:{err.lineno} not Python 3.9 syntax: {err.msg}"]
    found = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" and
                 any(a.name == "annotations" for a in n.names) for n in tree.body)
    evaluated, class_fields = _evaluated_annotations(tree, future)
    for annotation in evaluated:
        if _has_union_operator(annotation, look_in_strings=any(annotation is f for f in class_fields)):
            found.append(f"{rel}:{annotation.lineno} X | Y in an evaluated annotation: {ast.unparse(annotation)}")
    encoded = source.encode("utf-8")
    lines = encoded.splitlines(keepends=True)
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr) and not _in_annotation(node, parents)
                and (_is_type_operand(node.left) or _is_type_operand(node.right))):
            found.append(f"{where} a type union as a value (3.10): {ast.unparse(node)}")
        elif _parenthesized_with(node, encoded, lines):
            found.append(f"{where} parenthesized context managers (3.10)")
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            newer = {k.arg for k in node.keywords} & _NEWER_KEYWORDS.get(name, set())
            if newer:
                found.append(f"{where} {name}({', '.join(sorted(newer))}=...) is 3.10+")
            if name == "bit_count":
                found.append(f"{where} int.bit_count() is 3.10+")
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and not _guarded(node, parents):
            if isinstance(node, ast.Import):
                pairs = [(a.name, None) for a in node.names]
            else:
                pairs = [(node.module, a.name) for a in node.names] + [(node.module, None)]
            for pair in pairs:
                if pair in _NEWER:
                    found.append(f"{where} {ast.unparse(node)}: newer than 3.9")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if (node.value.id, node.attr) in _NEWER and not _guarded(node, parents):
                found.append(f"{where} {node.value.id}.{node.attr} is newer than 3.9")
        elif isinstance(node, ast.Name) and node.id in _NEWER_BUILTINS and not _guarded(node, parents):
            found.append(f"{where} {node.id} is newer than 3.9")
    return found


def _in_annotation(node, parents):
    """Part of an annotation: those Python evaluates are checked above, the others never run."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.AnnAssign) and parent.annotation is node:
            return True
        if isinstance(parent, ast.arg) and parent.annotation is node:
            return True
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)) and parent.returns is node:
            return True
        node = parent
    return False


def test_every_shipped_module_keeps_to_python_39():
    modules = list(shipped_modules())
    assert len(modules) > 250 and {m.relative_to(ROOT).parts[0] for m in modules} >= {
        "schemas", "engines", "probe_tui", "benchmarks"}
    found = [line for path in modules for line in newer_than_39(path.read_text(encoding="utf-8"), _rel(path))]
    assert found == []


@pytest.mark.parametrize("source, what", [
    ("match x:\n    case 1:\n        pass\n", "not Python 3.9 syntax"),
    ("try:\n    pass\nexcept* ValueError:\n    pass\n", "not Python 3.9 syntax"),
    ("def f(x: int | None) -> None:\n    pass\n", "evaluated annotation"),
    ("x: 'int | None' = None\n", None),
    ("class C:\n    x: int | None = None\n", "evaluated annotation"),
    ("from __future__ import annotations\nclass C(BaseModel):\n    x: 'Optional[int] | str'\n",
     "evaluated annotation"),
    ("from __future__ import annotations\n\ndef f(x: int | None) -> str | None:\n    y: int | None = x\n", None),
    ("def f():\n    y: int | None = 1\n", None),
    ("isinstance(x, int | str)\n", "type union as a value"),
    ("Maybe = Optional[int] | None\n", "type union as a value"),
    ("flags = a | b\n", None),
    ("with (open(a) as f, open(b) as g):\n    pass\n", "parenthesized context managers"),
    ("with (\n    open(a) as f,\n    open(b) as g,\n):\n    pass\n", "parenthesized context managers"),
    ("with (open(a)) as f, (open(b)) as g:\n    pass\n", None),
    ("with (yield):\n    pass\n", None),
    ("for a, b in zip(x, y, strict=True):\n    pass\n", "zip(strict=...)"),
    ("@dataclasses.dataclass(frozen=True, slots=True)\nclass C:\n    pass\n", "dataclass(slots=...)"),
    ("from typing import Optional, TypeAlias\n", "newer than 3.9"),
    ("import tomllib\n", "newer than 3.9"),
    ("try:\n    import tomllib\nexcept ImportError:\n    tomllib = None\n", None),
    ("if TYPE_CHECKING:\n    from typing import Self\n", None),
    ("pairs = itertools.pairwise(x)\n", "itertools.pairwise is newer"),
    ("U = (types.UnionType,) if hasattr(types, 'UnionType') else ()\n", None),
    ("raise ExceptionGroup('x', [])\n", "ExceptionGroup is newer"),
    ("n = x.bit_count()\n", "bit_count"),
])
def test_the_check_finds_what_39_cannot_run(source, what):
    found = newer_than_39(source, "m.py")
    if what is None:
        assert found == []
    else:
        assert len(found) == 1 and what in found[0], found


def _python39():
    candidates = [*map(str, sorted(Path.home().glob(".pyenv/versions/3.9*/bin/python3.9"))), shutil.which("python3.9")]
    for exe in filter(None, candidates):
        probe = subprocess.run([exe, "-c", "import sys; assert sys.version_info[:2] == (3, 9)"], capture_output=True)
        if probe.returncode == 0:
            return exe
    return None


def test_python_39_compiles_every_shipped_module():
    exe = _python39()
    if exe is None:
        pytest.skip("python3.9 is not installed (the AST checks above still run)")
    code = ("import sys\nbad = []\nfor path in sys.stdin.read().splitlines():\n"
            "    try:\n        compile(open(path, encoding='utf-8').read(), path, 'exec', dont_inherit=True)\n"
            "    except SyntaxError as err:\n        bad.append('%s:%s %s' % (path, err.lineno, err.msg))\n"
            "print('\\n'.join(bad))\nsys.exit(1 if bad else 0)\n")
    paths = "\n".join(_rel(p) for p in shipped_modules())
    result = subprocess.run([exe, "-c", code], input=paths, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
