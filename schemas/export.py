"""`python -m schemas.export [DIR]`: rewrite the committed JSON Schemas (default: `schemas/json/`)."""

import sys
from pathlib import Path
from typing import List, Optional

from .json_schemas import export_json_schemas


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for path in export_json_schemas(Path(args[0]) if args else None):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
