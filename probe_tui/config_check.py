"""config_check in a script (docs/CONFIG_CHECK.md)::

    from probe_tui.config_check import ConfigCheck

    check = ConfigCheck("pack.json", files=["train.yaml"], weight_steps=[10])
    check.start(model)            # before the first forward
    ... training ...
    check.close()                 # writes pack.json (also at interpreter exit, if never closed)

The same fingerprint as the ``config_check`` task: environment, packages, framework and device, the script's
arguments and config files, random state and deterministic flags at the first forward, the weights at init and
after the chosen steps, the first batches' sample checksums. ``probe-tui config-check compare A B`` diffs two.
"""

import atexit
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Union


class ConfigCheck:
    def __init__(self, output: Union[str, Path] = "config_check.json", *, files: Sequence[str] = (),
                 weight_steps: Sequence[int] = (), data_batches: int = 2, framework: str = "pytorch") -> None:
        from engines.config_check.session import CheckSession
        from engines.task import process_rank

        rank, world = process_rank()
        self.output = Path(output)
        self.session: Optional[Any] = CheckSession(
            framework, files=files, weight_steps=weight_steps, data_batches=data_batches,
            script=sys.argv[0] if sys.argv else None, args=list(sys.argv[1:]), rank=rank, world_size=world,
            say=lambda level, text: print("probe-tui: {}: {}".format(level, text), file=sys.stderr))
        atexit.register(self.close)

    def start(self, model: Any = None) -> "ConfigCheck":
        """Take the static facts and watch ``model`` (None: the first module called from outside any other)."""
        if self.session is not None:
            self.session.start(model)
        return self

    def close(self) -> Optional[Path]:
        """Write the pack (once); its path."""
        if self.session is None:
            return None
        from engines.config_check.session import write_pack

        session, self.session = self.session, None
        session.start()
        write_pack(self.output, session.finish())
        return self.output

    def __enter__(self) -> "ConfigCheck":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()
