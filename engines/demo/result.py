"""What a demo run returns, the same for the PyTorch and the MindSpore build."""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from engines.demo.faults import describe
from engines.demo.knobs import DemoKnobs


@dataclass
class DemoResult:
    knobs: DemoKnobs
    losses: List[float] = field(default_factory=list)
    step_times_s: List[float] = field(default_factory=list)
    n_params: int = 0
    framework: Optional[str] = None  # named in the summary when set (the MindSpore build sets it)

    @property
    def steps(self) -> int:
        return len(self.losses)

    @property
    def final_loss(self) -> Optional[float]:
        return self.losses[-1] if self.losses else None

    def summary(self) -> Dict[str, Any]:
        """JSON-ready facts for run.json and the CLI (NaN/inf losses become strings)."""
        def plain(x: float) -> Union[float, str]:
            return x if x == x and abs(x) != float("inf") else str(x)

        out = {
            "steps": self.steps,
            "losses": [plain(x) for x in self.losses],
            "final_loss": None if self.final_loss is None else plain(self.final_loss),
            "n_params": self.n_params,
            "preset": self.knobs.preset,
            "dtype": self.knobs.dtype,
            "faults": describe(self.knobs.faults),
        }
        if self.framework:
            out["framework"] = self.framework
        return out
