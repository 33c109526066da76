"""L1 for MindSpore: the public callables of its namespaces, wrapped while a session runs, recorded once each.

MindSpore offers no API-level hook in PyNative (no function mode, no dispatcher callback), so wrapping is
unavoidable. It is done reversibly: ``ApiWrappers.install()`` puts the wrappers in place when a session starts
and ``uninstall()`` restores every original when it stops; a wrapper built once per callable is reused, and one
that a script kept (``from mindspore.ops import gelu`` during a session) calls straight through when no session
runs. Each wrapper carries ``__wrapped__``, which MindSpore's jit parser follows, so ``@jit`` graphs (the AdamW
optimizer's update, a user's jitted step) compile the originals and are never affected.

A call is recorded only at its outermost level (the tool is *busy* while the original runs) and only when the
caller is model code: MindSpore's own machinery (autograd, optimizers, Tensor internals) calls the same public
functions, and those calls are not the user's ops. Inputs are summarised before the call (in-place ops
overwrite them), outputs after; the backward side is observed on the autograd graph (``backward_capture``).
"""

import functools
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from mindspore import Tensor

from engines.adapters.mindspore import api_table, flatten, primitive_attrs
from engines.adapters.mindspore.backward_capture import attach, input_edge
from engines.capture import naming
from engines.capture.api import ApiRecords
from engines.capture.backward import PendingBackward
from engines.capture.defaults import signature_defaults

_UNREAD = object()


class _Current:
    """The session the installed wrappers report to (one per process, like a torch function mode)."""

    session: Any = None


CURRENT = _Current()


class ApiInfo:
    """What was decided once for one callable: its name and whether it is captured at all."""

    __slots__ = ("prefix", "api", "base", "captured", "distributed", "inplace", "defaults")

    def __init__(self, prefix: str, api: str, captured: bool = True) -> None:
        self.prefix = prefix
        self.api = api
        self.base = prefix + "." + api
        self.captured = captured
        self.distributed = prefix in (naming.PREFIX_DISTRIBUTED, api_table.PREFIX_MINT_DISTRIBUTED)
        self.inplace = api_table.is_inplace(api)
        # keyword defaults of the callable's signature, read at its first captured call: a keyword argument equal
        # to its default is not recorded (engines.capture.defaults; nn.Dropout passes training=True explicitly)
        self.defaults: Any = _UNREAD


def _function_wrapper(original: Callable, info: ApiInfo) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        s = CURRENT.session
        if s is None or s.busy_depth or not s.running or not info.captured:
            return original(*args, **kwargs)
        if api_table.internal_caller(sys._getframe(1).f_code):
            return original(*args, **kwargs)
        return s.api_capture.call(info, original, args, kwargs)

    try:
        functools.update_wrapper(wrapper, original)
    except (AttributeError, TypeError):
        wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    wrapper.__probe_tui_api__ = info.base  # type: ignore[attr-defined]
    return wrapper


def _primitive_wrapper(original: Callable) -> Callable:
    def __call__(prim: Any, *args: Any, **kwargs: Any) -> Any:
        s = CURRENT.session
        if s is None or s.busy_depth or not s.running:
            return original(prim, *args, **kwargs)
        if api_table.internal_caller(sys._getframe(1).f_code):
            return original(prim, *args, **kwargs)
        info = s.api_capture.primitive_info(prim)
        if info is None or not info.captured:
            return original(prim, *args, **kwargs)
        bound = lambda *a, **k: original(prim, *a, **k)  # noqa: E731
        bound.__probe_tui_primitive__ = prim  # type: ignore[attr-defined]  # its init_attrs go in the record
        return s.api_capture.call(info, bound, args, kwargs)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    __call__.__probe_tui_api__ = api_table.PREFIX_PRIMITIVE  # type: ignore[attr-defined]
    return __call__


_MISSING = object()


class ApiWrappers:
    """Installs and removes every wrapper; built once per process (the tables do not change)."""

    def __init__(self) -> None:
        self.entries: List[Tuple[Any, str, Any, Callable]] = []  # (owner, attribute, original or _MISSING, wrapper)
        self.infos: Dict[str, ApiInfo] = {}
        self.installed = False
        self._built = False

    def _build(self) -> None:
        for module, prefix in api_table.namespaces():
            for attr, original, pfx, api in api_table.module_functions(module, prefix):
                self._add(module, attr, original, self._info(pfx, api))
        for attr, original, pfx, api in api_table.tensor_methods():
            own = vars(Tensor).get(attr, _MISSING)
            info = self._info(pfx, api)
            wrapper = _function_wrapper(original, info)
            self.entries.append((Tensor, attr, own, wrapper))
        for cls in api_table.primitive_classes():
            self.entries.append((cls, "__call__", vars(cls)["__call__"], _primitive_wrapper(vars(cls)["__call__"])))
        self._built = True

    def _info(self, prefix: str, api: str) -> ApiInfo:
        key = prefix + "." + api
        info = self.infos.get(key)
        if info is None:
            info = self.infos[key] = ApiInfo(prefix, api)
        return info

    def _add(self, owner: Any, attr: str, original: Any, info: ApiInfo) -> None:
        self.entries.append((owner, attr, original, _function_wrapper(original, info)))

    def apply_selector(self, selector: Any) -> None:
        """The config's ``apis`` allow/deny lists decide, per API base name, what is captured."""
        if not self._built:
            self._build()
        for info in self.infos.values():
            info.captured = selector.admits(info.base)

    def install(self) -> None:
        if self.installed:
            return
        if not self._built:
            self._build()
        for owner, attr, _, wrapper in self.entries:
            try:
                setattr(owner, attr, wrapper)
            except (AttributeError, TypeError):
                continue
        self.installed = True

    def uninstall(self) -> None:
        if not self.installed:
            return
        for owner, attr, original, _ in self.entries:
            try:
                if original is _MISSING:
                    if attr in vars(owner):
                        delattr(owner, attr)
                else:
                    setattr(owner, attr, original)
            except (AttributeError, TypeError):
                continue
        self.installed = False


_WRAPPERS: Optional[ApiWrappers] = None


def wrappers() -> ApiWrappers:
    global _WRAPPERS
    if _WRAPPERS is None:
        _WRAPPERS = ApiWrappers()
    return _WRAPPERS


class ApiCapture(ApiRecords):
    """Record assembly for API calls (``engines.capture.api``): forward now, backward through graph hooks."""

    walkers = flatten.WALKERS
    tensor_type = Tensor
    info_class = ApiInfo  # what register_custom_api names its calls with (engines.capture.script_controls)
    stack_skip = 2  # the wrapper and ``call``

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.primitives: Dict[str, Optional[ApiInfo]] = {}

    def primitive_info(self, prim: Any) -> Optional[ApiInfo]:
        name = api_table.primitive_name(prim)
        if name is None:
            return None
        info = self.primitives.get(name)
        if info is None and name not in self.primitives:
            info = ApiInfo(api_table.PREFIX_PRIMITIVE, name, self.session.filter.apis.admits(
                api_table.PREFIX_PRIMITIVE + "." + name))
            self.primitives[name] = info
        return info

    def call(self, info: ApiInfo, func: Callable, args: tuple, kwargs: Dict[str, Any]) -> Any:
        s = self.session
        if info.defaults is _UNREAD:
            info.defaults = signature_defaults(func)
        s.busy_depth += 1
        try:
            pre = self.safe_before(info, args, kwargs, None, self._primitive_record(info, func))
            try:
                out = func(*args, **kwargs)
            except BaseException:
                if pre is not None:
                    s.rollback(pre[0], pre[1])
                raise
            if info.inplace and args and isinstance(args[0], Tensor):
                s.entries.forget(args[0])
            if pre is not None:
                self.safe_after(info, pre, args, kwargs, out)
        finally:
            s.busy_depth -= 1
        return out

    def _primitive_record(self, info: ApiInfo, func: Callable) -> Optional[Dict[str, Any]]:
        """A primitive call's ``{"primitive": {class, init_attrs}}`` for its record's ``args`` (docs/FORMAT.md)."""
        prim = getattr(func, "__probe_tui_primitive__", None)
        if prim is None or info.prefix != api_table.PREFIX_PRIMITIVE:
            return None
        try:
            return primitive_attrs.record_of(prim)
        except Exception as exc:  # never break training: the record goes without them
            self.session.summary.failed("the attributes of %s" % info.base, exc)
            return None

    # -- what the neutral record assembly asks -----------------------------------------------------------------
    def input_edge(self, slot: str, t: Any) -> Any:
        return input_edge(slot, t)

    def _attach(self, pending: PendingBackward, edges: List, outputs: List, seq: int, want_inputs: bool,
                want_outputs: bool) -> bool:
        return attach(pending, edges, outputs, want_inputs=want_inputs, want_outputs=want_outputs)

    def _outputs(self, info: Any, out: Any, args: tuple, kwargs: Dict[str, Any]) -> Tuple[List, bool]:
        outputs = flatten.output_tensors(out)
        if info.distributed and not outputs:
            # A collective that returns nothing wrote into its arguments: they are its result.
            flatten.tensors_in(list(args), "output", outputs)
            for k, v in kwargs.items():
                flatten.tensors_in(v, "output.%s" % k, outputs)
        return outputs, info.inplace or info.distributed


__all__ = ["ApiCapture", "ApiInfo", "ApiWrappers", "CURRENT", "wrappers"]
