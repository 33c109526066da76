"""Hypothesis strategies for configs, for the schema-agreement test and the config fuzz suite.

`schema_configs(task)` walks the task's exported JSON Schema (properties, types, enums, patterns, bounds) and
draws configs of that shape, ignoring the cross-field rules (`allOf`/`if`/`then`), so that those rules are hit
often; a few values are swapped for a value of another type. Both the loader and the schema then judge it.
"""

from typing import Any, Dict, List

from hypothesis import strategies as st

import schemas

# Strings for fields without a pattern: names each level accepts, blanks, look-alikes.
NAMES = ["Functional.linear.0.forward", "Torch.matmul.0.forward", "Tensor.add.3.backward",
         "Module.fc.Linear.forward.0", "Cell.net.Dense.backward.1", "relu", "softmax", "", " ", "layers.0",
         "Functional.linear", "Module.fc", "tensor", "tuple[2]", "tuple[2]:0", "tuple[2]:2", "m:f", "pkg.mod:fn",
         "train.py", "./probe_dump", "xlsx", "L1", "\u0663", "é"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(-2, 2, allow_nan=False),
                    st.sampled_from(NAMES), st.just([]), st.just({}))


def _resolve(schema: Dict[str, Any], root: Dict[str, Any]) -> Dict[str, Any]:
    while "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _number(schema: Dict[str, Any], integer: bool) -> st.SearchStrategy:
    edges: List[Any] = [0, 1, -1]
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        if key in schema:
            edges += [schema[key] - 1, schema[key], schema[key] + 1]
    if integer:
        return st.one_of(st.sampled_from([int(e) for e in edges]), st.integers(-5, 40))
    return st.one_of(st.sampled_from([float(e) for e in edges] + [0.5, 1e-8]),
                     st.floats(-10, 10, allow_nan=False, allow_infinity=False))


def node(schema: Dict[str, Any], root: Dict[str, Any], depth: int = 0) -> st.SearchStrategy:
    """Values of one schema node (cross-field rules ignored), now and then of another type."""
    if not depth:
        return _node(schema, root, depth)
    inner = _node(schema, root, depth)
    return st.integers(0, 11).flatmap(lambda i: SCALARS if i == 0 else inner)


def _node(schema: Dict[str, Any], root: Dict[str, Any], depth: int) -> st.SearchStrategy:
    schema = _resolve(schema, root)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return st.one_of([_node(s, root, depth) for s in schema[key]])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([_node({**schema, "type": k}, root, depth) for k in kind])
    if kind == "object" or "properties" in schema:
        return _object(schema, root, depth)
    if kind == "array":
        items = schema.get("items", {})
        return st.lists(node(items, root, depth + 1), max_size=4)
    if kind == "string":
        if "pattern" in schema:
            return st.one_of(st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) < 40),
                             st.sampled_from(NAMES))
        return st.sampled_from(NAMES)
    if kind == "integer":
        return _number(schema, True)
    if kind == "number":
        return _number(schema, False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return SCALARS


def _object(schema: Dict[str, Any], root: Dict[str, Any], depth: int) -> st.SearchStrategy:
    props = schema.get("properties", {})
    required = set(schema.get("required", []))
    if not props:
        extra = schema.get("additionalProperties")
        values = node(extra, root, depth + 1) if isinstance(extra, dict) else SCALARS
        return st.dictionaries(st.sampled_from(["a", "layers.0", " ", "b.c"]), values, max_size=2)
    fields = {name: node(sub, root, depth + 1) for name, sub in props.items()}

    @st.composite
    def build(draw):
        out = {}
        for name, values in fields.items():
            keep = draw(st.floats(0, 1)) < (0.95 if name in required else 0.35)
            if keep:
                out[name] = draw(values)
        return out
    return build()


def schema_configs(task: str) -> st.SearchStrategy:
    """Configs of one task drawn from its JSON Schema's shape; `task` is always set."""
    root = schemas.json_schema(task)
    return _object(root, root, 0).map(lambda c: {**c, "task": task})
