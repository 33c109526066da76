"""A compare launched as several processes (torchrun or srun, on one node or many): each takes its share of the
(rank, step) pairs, rank 0 writes the one result store.

Every member opens both dumps, pairs the pieces and settles the mode as one process would; they then agree that
all of them got that far (else each stops with the first member's one line). Piece ``n`` goes to member
``n % size`` (the pieces are alike: one rank's step each). A member compares its share, with ``workers``
processes of its own when asked (:mod:`engines.compare.pair_pool`), and writes each piece's result to
``piece<n>.pkl`` in a parts folder rank 0 made beside the results (so it must be on a file system every node
sees, as the dumps and the results are). The members then tell rank 0 which pieces they wrote, or the one line
that stopped them; rank 0 reads the pieces back in order, ranks and writes the result store exactly as one
process would (the files are the same), removes the parts folder and sends every member the outcome (exit code and
summary, or the error line), so that all exit alike. The process group carries only these small objects.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Generator, List, Optional, Sequence

from engines import safe_fs
from engines.compare.options import CompareError, CompareOptions
from engines.compare.pair_pool import Piece, PieceResult, SideSpec, piece_results
from engines.compare.workgroup import WorkGroup
from engines.dumps.source import DumpSource

START, AGREED, SHARED, GATHERED, DONE = range(5)


class EchoedError(CompareError):
    """A launched member other than rank 0 stops on bad input that rank 0 reports: the launch prints its one line
    once (``echoed`` tells the CLI to exit 2 without printing it again)."""

    echoed = True


class LaunchedSplit:
    """This process's part in a launched compare (see the module docstring); ``stage`` says which collectives
    it has passed, so that a failure anywhere still meets the others at the next one."""

    def __init__(self, group: WorkGroup):
        self.group = group
        self.rank, self.size = group.rank, group.size
        self.stage = START
        self.parts: Optional[Path] = None
        self.metas: List[Dict[str, Any]] = []

    # -- every member --------------------------------------------------------------------------------------
    def agree(self) -> None:
        """All members opened the dumps and paired the pieces (collective)."""
        self._agree(None)

    def share(self, pieces: Sequence[Piece]) -> List[int]:
        return [n for n in range(len(pieces)) if n % self.size == self.rank]

    def open_parts(self, opts: CompareOptions) -> Path:
        """The parts folder, made by rank 0 beside the results (collective)."""
        made: Any = None
        if self.rank == 0:
            base = opts.output_path.parent if opts.output_path is not None else opts.dump_path
            try:
                safe_fs.make_dirs(base)
                made = tempfile.mkdtemp(prefix=".compare-parts-", dir=str(base))
            except OSError as exc:
                made = {"error": "compare: cannot make the parts folder in {}: {}".format(
                    base, safe_fs.describe_os_error(base, exc))}
        made = self.group.broadcast(made)
        self.stage = SHARED
        if isinstance(made, dict):
            self.stage = DONE
            raise CompareError(made["error"])
        self.parts = Path(made)
        return self.parts

    def compute_share(self, pieces: Sequence[Piece], target: DumpSource, golden: DumpSource, spec: SideSpec,
                      workers: Optional[int], done: Callable[[int, PieceResult], None]) -> Dict[str, Any]:
        """Compare this member's pieces into the parts folder; what it wrote, or the line that stopped it."""
        mine = self.share(pieces)
        meta: Dict[str, Any] = {"rank": self.rank, "pieces": [], "error": ""}
        assert self.parts is not None
        try:
            results = piece_results([pieces[n] for n in mine], target, golden, spec, workers or 1, done)
            for result in results:
                n = mine[result.n]
                if result.error:
                    meta["error"] = result.error
                    break
                result.n = n
                with safe_fs.create_file(self.parts / "piece{}.pkl".format(n), "wb") as fh:
                    pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
                meta["pieces"].append(n)
        except CompareError as exc:
            meta["error"] = str(exc)
        except Exception as exc:  # a fault of this member: the others must still hear of it
            meta["error"] = "rank {}: {}: {}".format(self.rank, type(exc).__name__, str(exc).splitlines()[0]
                                                     if str(exc) else "")
        return meta

    # -- members other than 0 ------------------------------------------------------------------------------
    def wait_outcome(self, meta: Dict[str, Any]) -> Dict[str, Any]:
        """Hand the share to rank 0 and wait for the outcome it sends (raises its error line)."""
        self.group.gather(meta)
        self.stage = GATHERED
        told = self.group.broadcast(None)
        self.stage = DONE
        if told.get("error"):
            raise CompareError(told["error"])
        return told

    # -- rank 0 --------------------------------------------------------------------------------------------
    def results(self, meta: Dict[str, Any], total: int,
                done: Callable[[int, PieceResult], None]) -> Generator[PieceResult, None, None]:
        """Every piece's result in order, read back from the parts folder once all members are done."""
        metas = self.group.gather(meta) or [meta]
        self.stage = GATHERED
        for m in metas:
            if m["error"]:
                raise CompareError(m["error"])
        own = set(meta["pieces"])
        count = len(own)
        assert self.parts is not None
        _check_private(self.parts)
        for n in range(total):
            path = self.parts / "piece{}.pkl".format(n)
            try:
                safe_fs.check_regular_or_absent(path)  # a link planted there is refused, never followed
                with open(path, "rb") as fh:
                    result: PieceResult = pickle.load(fh)
                os.unlink(path)
            except (OSError, EOFError, pickle.UnpicklingError) as exc:
                raise CompareError("compare: the result of pair {} ({}) could not be read back: {}".format(
                    n, path, exc)) from None
            if n not in own:
                count += 1
                done(count, result)
            yield result

    def tell(self, outcome: Optional[Dict[str, Any]], error: str = "") -> None:
        """Rank 0: send every member the outcome (or the error line) once they handed in their shares."""
        if self.rank == 0 and self.stage == GATHERED:
            self.group.broadcast({"error": error} if error else dict(outcome or {}))
        self.stage = DONE

    def failed(self, exc: BaseException) -> None:
        """Meet the others at the collective they wait at, with this member's error."""
        line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if not isinstance(exc, CompareError):
            line = "rank {}: {}: {}".format(self.rank, type(exc).__name__, line)
        if self.stage == START:
            self._agree(line, raise_=False)
        elif self.stage == AGREED:  # the others wait for the parts folder
            self.group.broadcast({"error": line} if self.rank == 0 else None)
            if self.rank != 0:  # rank 0 made it: they go on and hand in their shares
                self.group.gather({"rank": self.rank, "pieces": [], "error": line})
                self.group.broadcast(None)
        elif self.stage == SHARED:  # failed before handing in its share
            self.stage = GATHERED if self.rank == 0 else self.stage
            if self.rank == 0:
                self.group.gather({"rank": 0, "pieces": [], "error": line})
            else:
                self.group.gather({"rank": self.rank, "pieces": [], "error": line})
                self.group.broadcast(None)
                self.stage = DONE
        if self.stage == GATHERED:
            self.tell(None, line)
        self.stage = DONE

    def close(self) -> None:
        if self.rank == 0 and self.parts is not None:
            shutil.rmtree(self.parts, ignore_errors=True)
        self.group.close()

    def _agree(self, error: Optional[str], raise_: bool = True) -> None:
        errors = self.group.all_gather(error)
        self.stage = AGREED
        first = next((e for e in errors if e), None)
        if first is not None:
            self.stage = DONE
            if raise_:
                raise CompareError(first)


def _check_private(parts: Path) -> None:
    """The parts folder is still the private one rank 0 made (this user's, no one else's access): only then are
    the pickles in it read (docs/SECURITY.md)."""
    try:
        safe_fs.check_private_dir(parts, "compare parts folder")
        if os.lstat(parts).st_mode & 0o077:
            raise safe_fs.UnsafePathError("{}: others may write into it; its results are not read".format(parts))
    except OSError as exc:
        raise CompareError("compare: parts folder {}: {}".format(parts, exc)) from None
