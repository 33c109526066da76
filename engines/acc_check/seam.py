"""The seam between acc_check (framework-free) and a framework's reference replay: what
``engines.adapters.<torch|mindspore>.acc_replay`` provide. The engine loads the module of the dump's framework
by name (``engines.frameworks.adapter_module``) and uses it through this interface only.

Tensors cross the seam as ``(numpy array, dtype name, shape)`` (``Saved``); dtype names are the engine's
(``torch.float32``, as ``cases.tensor_dtype_name`` gives them for both frameworks); outputs leave as numpy arrays
(bfloat16 and float16 widened to float32) or plain Python values, keyed by the capture's slot names
(``output.0``, ``output.1.2``; gradients by input slot, ``input.0``).
"""

from typing import Any, Dict, List, Optional, Protocol, Tuple, Type

import numpy as np

Saved = Dict[str, Tuple[np.ndarray, str, List[int]]]


class ReferenceReplay(Protocol):
    """A framework's reference replay (a module)."""

    ReplayError: Type[Exception]
    #: how result rows name the reference dtype: ``PREFIX + "float64"`` (``torch.float64``, ``mindspore.float64``)
    DTYPE_PREFIX: str

    def configure_reference(self, dtype: str = "auto", device: str = "cpu") -> None:
        """The dtype policy (``auto``, ``float64``, ``float32``) and device of this process's reference; one that
        cannot run here is a ``ReplayError``."""
        ...

    def reference_dtype(self, dtypes: List[str]) -> str:
        """``float64`` or ``float32``: the reference dtype of a call whose floating inputs have these dtypes."""
        ...

    def replay_forward(self, name: str, args_json: str, saved: Saved, grads: Optional[Saved] = None,
                       want: Optional[List[str]] = None, autocast: str = ""
                       ) -> Tuple[str, Dict[str, Any], Dict[str, Any]]:
        """(reference dtype used, {output slot: value}, {input slot: gradient}) of the record ``name``."""
        ...

    def run_as_saved(self, name: str, args_json: str, saved: Saved) -> Dict[str, Any]:
        """{output slot: value} of the call run in its recorded dtypes on this machine (generated inputs)."""
        ...

    def set_threads(self, n: int) -> None:
        ...

    def callable_expression(self, name: str) -> str:
        """The Python expression a reproduction script calls for the record ``name``."""
        ...
