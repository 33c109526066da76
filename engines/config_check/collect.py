"""The framework-free parts of a fingerprint: environment, packages, Python, the command, config files, the Python
and numpy random state (docs/CONFIG_CHECK.md). The framework's parts come from
``engines/adapters/<fw>/config_check.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import re
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

#: Environment variable names whose values are secrets: the pack keeps a digest, so two packs still compare.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|PRIVATE|(^|_)KEY($|_)|API_?KEY|AUTH", re.IGNORECASE)
MAX_PARSED_FILE = 1 << 20
MAX_VALUES = 5000


def digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def environment(env: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """Every environment variable; a secret's value (a name with TOKEN, SECRET, PASSWORD, KEY...) as a digest."""
    source = os.environ if env is None else env
    return {k: (digest(v) if SECRET_NAME.search(k) else v) for k, v in sorted(source.items())}


def packages() -> Dict[str, str]:
    """name -> version of every installed distribution (lowercase names, ``_`` as ``-``)."""
    from importlib import metadata

    out: Dict[str, str] = {}
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
        except Exception:  # a damaged dist-info
            continue
        if name:
            out[str(name).lower().replace("_", "-")] = str(dist.version)
    return dict(sorted(out.items()))


def python_facts() -> Dict[str, str]:
    return {"python": platform.python_version(), "python_implementation": platform.python_implementation(),
            "platform": platform.platform(), "machine": platform.machine(), "cpu_count": str(os.cpu_count())}


def command(script: Optional[str], args: Sequence[str]) -> Dict[str, str]:
    """The script (its path and SHA-256) and its arguments: ``args.<name>`` for each ``--name value`` /
    ``--name=value`` (``true`` for a bare flag), ``pos.<i>`` for the others."""
    out: Dict[str, str] = {}
    if script:
        out["script"] = str(script)
        try:
            out["script.sha256"] = hashlib.sha256(Path(script).read_bytes()).hexdigest()
        except OSError:
            pass
    words = [str(a) for a in args]
    i = pos = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--") and len(word) > 2:
            name, eq, value = word[2:].partition("=")
            if not eq:
                if i + 1 < len(words) and not words[i + 1].startswith("--"):
                    value = words[i + 1]
                    i += 1
                else:
                    value = "true"
            out["args." + name] = value
        else:
            out["pos.{}".format(pos)] = word
            pos += 1
        i += 1
    return out


def flatten(value: Any, prefix: str, out: Dict[str, str]) -> None:
    """Each scalar of a JSON-like value by dotted key, as JSON text (at most MAX_VALUES)."""
    if len(out) >= MAX_VALUES:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            flatten(v, "{}.{}".format(prefix, k) if prefix else str(k), out)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            flatten(v, "{}.{}".format(prefix, i) if prefix else str(i), out)
    else:
        out[prefix] = json.dumps(value, default=str)


def file_fingerprint(path: str) -> Dict[str, Any]:
    """SHA-256 and size of a file; for JSON/YAML of at most 1 MiB also each scalar value by dotted key."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return {"sha256": "", "size": -1, "values": {}, "error": exc.strerror or str(exc)}
    out: Dict[str, Any] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "values": {}, "error": ""}
    if len(data) <= MAX_PARSED_FILE:
        parsed: Any = None
        suffix = Path(path).suffix.lower()
        try:
            if suffix == ".json":
                parsed = json.loads(data)
            elif suffix in (".yaml", ".yml"):
                import importlib

                parsed = importlib.import_module("yaml").safe_load(data)  # PyYAML, when installed
        except Exception:  # not parseable: the digest alone says whether it changed
            parsed = None
        if isinstance(parsed, (dict, list)):
            values: Dict[str, str] = {}
            flatten(parsed, "", values)
            out["values"] = values
    return out


def random_state() -> Dict[str, str]:
    """Checksums of Python's and numpy's global random state (equal states: equal draws)."""
    out = {"python.random": "{:08x}".format(zlib.crc32(repr(random.getstate()).encode()))}
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            state = np.random.get_state()
            out["numpy.random"] = "{:08x}".format(zlib.crc32(state[1].tobytes() + str(state[2:]).encode()))
        except Exception:
            pass
    out["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "")
    return out


def sample_checksums(rows: List[List[bytes]]) -> List[str]:
    """One checksum per sample: ``rows[i]`` the bytes of sample ``i`` of each input tensor."""
    out = []
    for parts in rows:
        crc = 0
        for part in parts:
            crc = zlib.crc32(part, crc)
        out.append("{:08x}".format(crc))
    return out
