"""What a framework must provide for free_benchmark's forward check: the tensor operations of one call.

``CallChecks`` (``engines.free_benchmark.calls``) holds the whole per-call control flow once: which calls are
checked, preheat, the perturbation and the re-run, the rows and their thresholds, the fix handler. It reaches the
framework only through an object of this ``FrameworkOps`` protocol, which each adapter implements in its
``free_benchmark_call.py`` with its own tensor arithmetic (``free_benchmark_perturb``, ``free_benchmark_compare``).
"""

from typing import Any, Dict, FrozenSet, List, Optional, Protocol, Tuple

from engines.free_benchmark.perturb import Perturbed


class FrameworkOps(Protocol):
    #: the framework's name, as messages give it
    framework: str
    #: calls whose result is random by design (``calls.RANDOM_APIS`` and the framework's own)
    random_apis: FrozenSet[str]
    #: whether preheat can run (it needs ``to_cpu`` and ``single_compare``)
    preheat: bool
    #: the skip reason of an improve_precision call with nothing to raise
    skip_nothing: str

    def is_tensor(self, obj: Any) -> bool: ...

    def is_floating(self, tensor: Any) -> bool: ...

    def is_inplace(self, info: Any, kwargs: Dict[str, Any]) -> bool: ...

    def has_sharded_input(self, args: tuple, kwargs: Dict[str, Any]) -> bool:
        """A tensor argument of a subclass that may issue collectives when run (a DTensor): never re-run."""

    def first_eligible(self, args: tuple) -> Optional[int]:
        """The perturbed argument (``perturb.first_eligible_index``); None: the call cannot be checked."""

    def is_view_of_input(self, out: Any, args: tuple, kwargs: Dict[str, Any]) -> bool: ...

    def context(self, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """What the re-run needs to know about the call before it runs (torch: its autocast state)."""

    def lowered(self, context: Any, first_output: Any, args: tuple, kwargs: Dict[str, Any]) -> Any:
        """The low-precision dtype the framework ran the call in on its own (autocast), None when it did not."""

    def has_low_precision(self, args: tuple, kwargs: Dict[str, Any]) -> bool:
        """Whether improve_precision has a float16/bfloat16 tensor to raise."""

    def perturb(self, mode: str, args: tuple, kwargs: Dict[str, Any], index: int, lowered: Any,
                keep_graph: bool) -> Perturbed:
        """The perturbed arguments; raises ``perturb.Cancelled`` (with the reason) when the mode does not apply."""

    def rerun(self, func: Any, perturbed: Perturbed, keep_graph: bool, context: Any) -> Any:
        """``func`` on the perturbed arguments: outside the gradient graph unless ``keep_graph`` (fix), and outside
        the framework's own low-precision region of ``context`` (None: as the call ran)."""

    def output_items(self, out: Any) -> List[Tuple[int, Any]]:
        """``(output_index, value)`` of every compared output element."""

    def tensor_ratio(self, original: Any, perturbed: Any, tol: float) -> Any:
        """The consistency ratio of one output tensor pair, a float or a 0-d tensor left on the device."""

    def resolve(self, ratios: List[Any]) -> List[float]:
        """Host floats of a batch of ratios (one transfer per device)."""

    def single_compare(self, actual: Any, golden: Any) -> Tuple[bool, str]:
        """to_cpu's verdict: the device output against the CPU float32 output."""

    def cast_like(self, new: Any, old: Any) -> Any:
        """The fix handler's replacement: ``new`` in ``old``'s structure and dtypes (raises on a mismatch)."""
