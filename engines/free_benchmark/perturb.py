"""free_benchmark's perturbations (docs/reference/msprobe-tasks.md §8.3), the framework-neutral part: which argument is perturbed, and
the modes that only rearrange arguments.

add_noise, bit_noise and change_value perturb only the first eligible tensor: the first floating tensor of the
first positional argument that is a tensor or a container (msprobe's ``valid_input_index``); the adapter computes
the perturbed tensor itself. ``no_change`` re-runs the inputs as they are. improve_precision and to_cpu touch every
tensor and are the adapter's.
"""

from typing import Any, Callable, Dict, Optional, Tuple

from engines.free_benchmark import structure

TENSOR_MODES = ("add_noise", "bit_noise", "change_value")


class Cancelled(Exception):
    """The perturbation does not apply to this call; the message says why (one line)."""


class Perturbed:
    """The perturbed call's arguments, whether anything changed, and the device the re-run happens on (to_cpu;
    None: the call's own). ``refusal``: ``(flag, reason)`` when whether the mode applies is decided on the device
    (add_noise's ``max(abs(x)) < eps``): the flag, a 0-d tensor, is read with the step's ratios, and a call it
    refuses is counted as skipped then, its rows dropped (no host sync per call)."""

    __slots__ = ("args", "kwargs", "changed", "device", "refusal")

    def __init__(self, args: tuple, kwargs: Dict[str, Any], changed: bool, device: Any = None) -> None:
        self.args = args
        self.kwargs = kwargs
        self.changed = changed
        self.device = device
        self.refusal: Optional[Tuple[Any, str]] = None


def first_eligible_index(args: tuple, is_tensor: Callable[[Any], bool], eligible: Callable[[Any], bool]
                         ) -> Optional[int]:
    """The first positional argument that is an ``eligible`` tensor or any list/tuple/dict; None: the call
    cannot be checked."""
    for i, a in enumerate(args):
        if is_tensor(a):
            if eligible(a):
                return i
        elif isinstance(a, (list, tuple, dict)):
            return i
    return None


def perturbed(mode: str, args: tuple, kwargs: Dict[str, Any], index: int,
              perturbations: Dict[str, Callable[[Any], Any]], eligible: Callable[[Any], bool],
              whole: Dict[str, Callable[[tuple, Dict[str, Any]], Perturbed]]) -> Perturbed:
    """The perturbed arguments for ``mode``: ``no_change`` and the tensor ``perturbations`` (of the argument
    ``index``, ``first_eligible_index``) here; the modes that touch every tensor (``whole``: improve_precision,
    to_cpu) by the adapter, given the arguments with ``inplace`` off."""
    simple = rearranged(mode, args, kwargs, index, perturbations, eligible)
    if simple is not None:
        return Perturbed(simple[0], simple[1], True)
    if mode in whole:
        return whole[mode](tuple(args), no_inplace(kwargs))
    raise Cancelled("pert_mode %r is unknown" % mode)


def mapped(args: tuple, kwargs: Dict[str, Any], map_tensors: Callable[[Any, Callable[[Any], Any]], Any],
           fn: Callable[[Any], Tuple[Any, bool]]) -> Perturbed:
    """The arguments with every tensor through ``fn``, which returns ``(tensor, changed)``; the result is changed
    when one was."""
    changed = [False]

    def one(t: Any) -> Any:
        new, did = fn(t)
        changed[0] = changed[0] or did
        return new

    new_args = map_tensors(tuple(args), one)
    new_kwargs = map_tensors(kwargs, one)
    return Perturbed(new_args, new_kwargs, changed[0])


def rearranged(mode: str, args: tuple, kwargs: Dict[str, Any], index: int,
               perturbations: Dict[str, Callable[[Any], Any]], eligible: Callable[[Any], bool]
               ) -> Optional[Tuple[tuple, Dict[str, Any]]]:
    """``(args, kwargs)`` for ``no_change`` and the tensor perturbations (``inplace`` off); None for another mode.
    ``index`` is the eligible argument (``first_eligible_index``)."""
    if mode == "no_change":
        return tuple(args), no_inplace(kwargs)
    if mode in perturbations:
        items = list(args)
        new, done = structure.replace_first(items[index], eligible, perturbations[mode])
        if not done:
            raise Cancelled("%s: no floating tensor in argument %d" % (mode, index))
        items[index] = new
        return tuple(items), no_inplace(kwargs)
    return None


def no_inplace(kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of the keyword arguments with ``inplace`` off (a re-run must not write its inputs)."""
    kwargs = dict(kwargs)
    if "inplace" in kwargs:
        kwargs["inplace"] = False
    return kwargs
