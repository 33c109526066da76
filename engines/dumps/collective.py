"""A record's collective description: ``records.args["collective"]`` (docs/FORMAT.md), read from the args as stored
(JSON text or already decoded)."""

import json
from typing import Any, Dict, Optional


def collective_of(args: Any) -> Optional[Dict[str, Any]]:
    """The ``collective`` dict of a record's args; None for a record that is no collective (or unreadable args)."""
    try:
        obj = json.loads(args) if isinstance(args, str) and args else args
    except ValueError:
        return None
    coll = obj.get("collective") if isinstance(obj, dict) else None
    return coll if isinstance(coll, dict) else None
