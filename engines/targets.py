"""Running a target in-process: the built-in demo, a user script, or a ``package.module:function``.

Targets run in this process so that the engines' instrumentation (function modes, module and optimizer hooks)
sees the training exactly as it runs. A script runs with ``runpy.run_path(..., run_name="__main__")``, its own
``sys.argv``, its folder first on ``sys.path`` and its env additions; argv, cwd, ``sys.path``, the environment,
and modules imported from the script's folder are restored afterwards. ``SystemExit(0)``/``SystemExit(None)``
are success; any other exit code or exception is a failure (exit code 1, traceback in ``error``).
``KeyboardInterrupt`` propagates, after the restore, so the caller can mark the run interrupted.

Bad input (a missing script, a malformed callable string, unknown keys) raises ``TargetError`` with one line
naming the field or file; it never counts as the target failing.
"""

import ast
import importlib
import importlib.util
import inspect
import os
import runpy
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

FRAMEWORKS = ("pytorch", "mindspore")
# The demo of each framework: a module with ``train(knobs, *, on_step=None)``.
DEMO_MODULES = {
    "pytorch": "engines.adapters.torch.demo",
    "mindspore": "engines.adapters.mindspore.demo",
}
# Top-level imports that identify a framework.
FRAMEWORK_IMPORTS = {"torch": "pytorch", "torch_npu": "pytorch", "mindspore": "mindspore"}
_TARGET_KINDS = ("demo", "script", "callable")
_ALLOWED_KEYS = {
    "demo": {"demo"},
    "script": {"script", "args", "cwd", "env"},
    "callable": {"callable", "kwargs", "cwd", "env"},
}

StepCallback = Callable[[int, Optional[float]], None]


class TargetError(ValueError):
    """Bad target description (exit code 2); the message is one line naming the field or file."""


@dataclass
class TargetResult:
    ok: bool
    exit_code: int
    error: str = ""
    value: Any = None  # the demo's DemoResult, or what the callable returned
    elapsed_s: float = 0.0


# ---- target description --------------------------------------------------------------------------------------

def target_kind(target: Any) -> str:
    """``demo``, ``script`` or ``callable``; checks the keys. The string ``"demo"`` is the default demo."""
    if target == "demo":
        return "demo"
    if not isinstance(target, dict):
        raise TargetError(f"target: expected a mapping with one of {', '.join(_TARGET_KINDS)}, got {target!r}")
    kinds = [k for k in _TARGET_KINDS if k in target]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "none"
        raise TargetError(f"target: needs exactly one of {', '.join(_TARGET_KINDS)} (found {found})")
    kind = kinds[0]
    unknown = sorted(set(target) - _ALLOWED_KEYS[kind])
    if unknown:
        raise TargetError(f"target.{unknown[0]}: unknown key for a {kind} target")
    return kind


def _script_path(target: Dict[str, Any]) -> Path:
    raw = target.get("script")
    if not isinstance(raw, (str, os.PathLike)) or not str(raw):
        raise TargetError(f"target.script: expected a path, got {raw!r}")
    path = Path(raw).expanduser()
    if not path.is_absolute():
        base = target.get("cwd")
        path = (Path(base).expanduser() if base else Path.cwd()) / path
    if not path.exists():
        raise TargetError(f"target.script: {raw}: no such file")
    return path.resolve()


def _split_callable(spec: Any) -> List[str]:
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise TargetError(f"target.callable: {spec!r} is not 'package.module:function'")
    module, attr = spec.split(":")
    if not module or not attr or not all(part.isidentifier() for part in module.split(".") + attr.split(".")):
        raise TargetError(f"target.callable: {spec!r} is not 'package.module:function'")
    return [module, attr]


# ---- framework detection ------------------------------------------------------------------------------------

def _imported_roots(tree: ast.AST) -> List[str]:
    """Top-level module names imported anywhere in ``tree``, in source order (relative imports skipped)."""
    names: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module.split(".")[0])
    return names


def _parse(path: Path, field: str) -> ast.AST:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise TargetError(f"{field}: {path}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except OSError as exc:
        raise TargetError(f"{field}: {path}: cannot read ({exc.strerror or exc})") from None


def _frameworks_in(path: Path, field: str, limit: int = 50) -> Set[str]:
    """Frameworks imported by ``path`` or by the modules beside it that it imports (no execution)."""
    found: Set[str] = set()
    seen: Set[Path] = set()
    queue = [path]
    while queue and len(seen) < limit:
        current = queue.pop(0)
        if current in seen:
            continue
        seen.add(current)
        tree = _parse(current, field) if current == path else _try_parse(current)
        if tree is None:
            continue
        for root in _imported_roots(tree):
            if root in FRAMEWORK_IMPORTS:
                found.add(FRAMEWORK_IMPORTS[root])
                continue
            for local in (path.parent / f"{root}.py", path.parent / root / "__init__.py"):
                if local.is_file():
                    queue.append(local)
    return found


def _try_parse(path: Path) -> Optional[ast.AST]:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, OSError, ValueError):
        return None


def detect_framework(target: Any, default: str = "pytorch") -> str:
    """Resolve ``framework: auto`` without running anything.

    demo: ``default`` (the caller's choice). script: the frameworks its imports name (and those of the
    modules beside it that it imports), by ``ast``. callable: the same scan of the function's module file.
    Neither found: ``default``. Both found: a ``TargetError`` asking for an explicit framework.
    """
    if default not in FRAMEWORKS:
        raise TargetError(f"framework: unknown framework {default!r} (expected one of {', '.join(FRAMEWORKS)})")
    kind = target_kind(target)
    if kind == "demo":
        return default
    if kind == "script":
        path, field = _script_path(target), "target.script"
        if path.is_dir():
            path = path / "__main__.py"
    else:
        module = _split_callable(target["callable"])[0]
        root = module.split(".")[0]
        if root in FRAMEWORK_IMPORTS:
            return FRAMEWORK_IMPORTS[root]
        for framework, demo_module in DEMO_MODULES.items():
            if module.startswith(demo_module.rsplit(".", 1)[0] + "."):
                return framework
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return default
        path, field = Path(spec.origin), "target.callable"
    frameworks = _frameworks_in(path, field)
    if len(frameworks) > 1:
        raise TargetError(f"{field}: {path} imports both torch and mindspore; set framework explicitly")
    return frameworks.pop() if frameworks else default


# ---- running ------------------------------------------------------------------------------------------------

def _env_additions(target: Dict[str, Any]) -> Dict[str, str]:
    env = target.get("env") or {}
    if not isinstance(env, dict):
        raise TargetError(f"target.env: expected a mapping of names to strings, got {env!r}")
    for key, value in env.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise TargetError(f"target.env.{key}: expected a string, got {value!r}")
    return {str(k): str(v) for k, v in env.items()}


def _cwd(target: Dict[str, Any]) -> Optional[Path]:
    cwd = target.get("cwd")
    if cwd is None:
        return None
    path = Path(cwd).expanduser()
    if not path.is_dir():
        raise TargetError(f"target.cwd: {cwd}: no such folder")
    return path


@contextmanager
def _process_state(argv: Optional[List[str]], cwd: Optional[Path], path_first: Optional[Path],
                   env: Dict[str, str]) -> Iterator[None]:
    """Apply argv/cwd/sys.path/env for a target and restore all of them afterwards."""
    saved_argv, saved_path, saved_cwd = sys.argv[:], sys.path[:], os.getcwd()
    saved_env = {key: os.environ.get(key) for key in env}
    saved_modules = set(sys.modules)
    try:
        if argv is not None:
            sys.argv = argv
        if path_first is not None:
            sys.path.insert(0, str(path_first))
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if path_first is not None:
            _forget_modules_from(path_first, saved_modules)


def _forget_modules_from(folder: Path, keep: Set[str]) -> None:
    """Drop modules the target imported from its own folder, so the next target gets fresh copies."""
    prefix = str(folder.resolve()) + os.sep
    for name in [n for n in sys.modules if n not in keep]:
        origin = getattr(sys.modules.get(name), "__file__", None)
        if origin and os.path.abspath(origin).startswith(prefix):
            del sys.modules[name]


def _failure_text(exc: BaseException) -> str:
    """The traceback without this module's and runpy's own frames."""
    tb = exc.__traceback__
    own = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}
    while tb is not None and (tb.tb_frame.f_code.co_filename in own
                              or os.path.abspath(tb.tb_frame.f_code.co_filename) in own):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def _exit_result(exc: SystemExit, started: float) -> TargetResult:
    code = exc.code
    if code is None or code == 0:
        return TargetResult(ok=True, exit_code=0, elapsed_s=time.perf_counter() - started)
    text = f"SystemExit: {code}" if isinstance(code, int) else str(code)
    return TargetResult(ok=False, exit_code=1, error=text, elapsed_s=time.perf_counter() - started)


def _run_guarded(body: Callable[[], Any]) -> TargetResult:
    started = time.perf_counter()
    try:
        value = body()
    except SystemExit as exc:
        return _exit_result(exc, started)
    except TargetError:
        raise
    except Exception as exc:  # the target failed: keep its traceback, never crash the tool
        return TargetResult(ok=False, exit_code=1, error=_failure_text(exc), elapsed_s=time.perf_counter() - started)
    return TargetResult(ok=True, exit_code=0, value=value, elapsed_s=time.perf_counter() - started)


def _demo_module(framework: str) -> ModuleType:
    module_name = DEMO_MODULES[framework]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise TargetError(f"target.demo: no {framework} demo is available yet ({module_name})") from None
        raise TargetError(f"target.demo: the {framework} demo needs {exc.name!r} installed") from None


def _run_demo(target: Any, framework: str, on_step: Optional[StepCallback]) -> TargetResult:
    from engines.demo.knobs import DemoKnobError, resolve_knobs

    raw = {} if target == "demo" else target.get("demo")
    try:
        knobs = resolve_knobs({} if raw in (None, True, "default") else raw)
    except DemoKnobError as exc:
        raise TargetError(f"target.{exc}") from None
    module = _demo_module(framework)
    return _run_guarded(lambda: module.train(knobs, on_step=on_step))


def _run_script(target: Dict[str, Any], on_step: Optional[StepCallback]) -> TargetResult:
    path = _script_path(target)
    args = target.get("args") or []
    if not isinstance(args, (list, tuple)) or not all(isinstance(a, (str, int, float)) for a in args):
        raise TargetError(f"target.args: expected a list of strings, got {args!r}")
    argv = [str(path)] + [str(a) for a in args]
    folder = path if path.is_dir() else path.parent
    def body() -> None:
        runpy.run_path(str(path), run_name="__main__")  # its globals are dropped: they may hold a model

    with _process_state(argv, _cwd(target), folder, _env_additions(target)):
        return _run_guarded(body)


def _resolve_callable(spec: str) -> Callable[..., Any]:
    module_name, attr = _split_callable(spec)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise TargetError(f"target.callable: no module named {exc.name!r} (from {spec!r})") from None
        raise
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise TargetError(f"target.callable: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise TargetError(f"target.callable: {spec!r} is not callable")
    return obj


def _accepts_on_step(fn: Callable[..., Any]) -> bool:
    try:
        return "on_step" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _run_callable(target: Dict[str, Any], on_step: Optional[StepCallback]) -> TargetResult:
    kwargs = target.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise TargetError(f"target.kwargs: expected a mapping, got {kwargs!r}")
    _split_callable(target["callable"])

    def body() -> Any:
        fn = _resolve_callable(target["callable"])  # an exception raised by the module's own code is a failure
        extra = {"on_step": on_step} if on_step is not None and _accepts_on_step(fn) else {}
        return fn(**kwargs, **extra)

    with _process_state(None, _cwd(target), None, _env_additions(target)):
        return _run_guarded(body)


def run_target(target: Any, *, framework: str, on_step: Optional[StepCallback] = None) -> TargetResult:
    """Run ``target`` in this process.

    ``framework`` is ``pytorch``, ``mindspore`` or ``auto`` (``detect_framework``); it picks the demo's build.
    ``on_step(step, loss)`` is called after each optimizer step by the demo, and passed to a callable whose
    signature has an ``on_step`` parameter. Scripts are not told about it: engines count a script's steps with
    the framework's optimizer-step hooks.
    """
    kind = target_kind(target)
    if framework == "auto":
        framework = detect_framework(target)
    if framework not in FRAMEWORKS:
        raise TargetError(f"framework: unknown framework {framework!r} (expected one of "
                          f"{', '.join(FRAMEWORKS)}, auto)")
    if kind == "demo":
        return _run_demo(target, framework, on_step)
    if kind == "script":
        return _run_script(target, on_step)
    return _run_callable(target, on_step)
