"""Where an analysis job that writes files (acc_check, analyze_overflow) puts them: the section's ``output_path``
(a folder, made when missing) or a new run folder under the job's ``dump_path`` (docs/decisions/0002-run-folders.md)."""

from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple

from engines import safe_fs
from engines.errors import JobError


def result_folder(job: Any, task: str, output_path: Optional[str], dump_path: str, fallback_config: Dict[str, Any],
                  taken: Sequence[str] = ()) -> Tuple[Path, Any]:
    """``(folder, run)``: ``run`` is None for an ``output_path``. An ``output_path`` that is a file, or that already
    holds one of the ``taken`` names, is bad input (``JobError`` naming ``<task>.output_path``)."""
    if output_path:
        out = Path(output_path).expanduser()
        if out.exists() and not out.is_dir():
            raise JobError("%s.output_path: %s is a file, not a folder" % (task, out))
        if any((out / name).exists() for name in taken):
            raise JobError("%s.output_path: %s already holds results; give a new folder" % (task, out))
        try:
            safe_fs.make_dirs(out)
        except OSError as exc:
            raise JobError("%s.output_path: %s" % (task, safe_fs.describe_os_error(out, exc))) from None
        return out, None
    from engines.runs import RunError, create_run

    try:
        from schemas import dump_config

        config = dump_config(job)
    except Exception:
        config = fallback_config
    try:
        run = create_run(dump_path, task=task, config=config, framework="pytorch")
    except (RunError, OSError) as exc:
        raise JobError("dump_path: %s" % exc) from None
    return run.path, run
